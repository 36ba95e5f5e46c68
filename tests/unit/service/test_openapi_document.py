"""The OpenAPI document states the whole contract: a body schema for every success, every error
status an operation can answer with the error body, and the value rules the ledger enforces."""

from __future__ import annotations

import re
from typing import Any

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import shapes, validate
from ledger.errors import InvalidInput
from ledger.service.app import create_app
from ledger.service.errors import error_responses
from ledger.service.models import CURSOR_PATTERN, NON_BLANK_PATTERN, SEGMENT_PATTERN, digits_at_most
from ledger.service.settings import ServiceSettings

# The Durable Streams protocol (bytes in and out, its own statuses) has a conformance suite of its own.
OWN_PROTOCOL = "/v1/stream/"
DATABASE_STATUSES = {"401", "422", "503"}
BODY_STATUSES = {"400", "413"}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    app = create_app(ServiceSettings(public_docs=True), "postgresql://unused/db", ["tok"])
    return app.openapi()


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, item in document["paths"].items()
        if not path.startswith(OWN_PROTOCOL)
        for method, operation in item.items()
    ]


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    return document["components"]["schemas"][ref.rsplit("/", 1)[-1]]


def test_every_success_has_a_body_schema(document: dict[str, Any]) -> None:
    missing = []
    for method, path, operation in operations(document):
        for status, response in operation["responses"].items():
            if status.startswith("2") and status != "204":
                content = response.get("content", {})
                if not content or not all(media.get("schema") for media in content.values()):
                    missing.append(f"{method} {path} {status}")
    assert not missing


def test_every_api_operation_names_its_error_statuses_with_the_error_body(document: dict[str, Any]) -> None:
    for method, path, operation in operations(document):
        if not path.startswith("/v1/"):
            continue
        responses = operation["responses"]
        if "security" not in operation:  # public, and asks nothing of the caller: no 401, no 422
            assert path == "/v1/limits", f"{method} {path}"
            continue
        assert responses.keys() >= DATABASE_STATUSES, f"{method} {path}"
        if "requestBody" in operation:
            assert responses.keys() >= BODY_STATUSES, f"{method} {path}"
        for status, response in responses.items():
            if status.startswith(("4", "5")):
                schema = response["content"]["application/json"]["schema"]
                assert resolve(document, schema)["title"] == "ErrorBody", f"{method} {path} {status}"
        assert "503" in responses and "Retry-After" in responses["503"]["headers"]


def test_no_answer_is_documented_in_fastapis_own_error_shape(document: dict[str, Any]) -> None:
    # FastAPI's default 422 body is {"detail": [...]}; the ledger answers {"error": "..."}.
    for method, path, operation in operations(document):
        for status, response in operation["responses"].items():
            for media in response.get("content", {}).values():
                assert "HTTPValidationError" not in str(media.get("schema")), f"{method} {path} {status}"


@pytest.mark.parametrize(
    ("method", "path", "statuses"),
    [
        ("get", "/v1/runs/{run_id}", {"404"}),
        ("post", "/v1/runs/{run_id}/events", {"404", "409"}),
        ("get", "/v1/runs/{run_id}/events", {"404", "410"}),
        ("get", "/v1/runs/{run_id}/events/stream", {"204", "404", "410"}),
        ("put", "/v1/runs/{run_id}/terminal", {"404", "409"}),
        ("post", "/v1/runs/{run_id}/status", {"409"}),
        ("put", "/v1/runs/{run_id}/mapping", {"409"}),
    ],
)
def test_state_dependent_answers_are_documented_where_they_happen(
    document: dict[str, Any], method: str, path: str, statuses: set[str]
) -> None:
    assert document["paths"][path][method]["responses"].keys() >= statuses


def test_success_bodies_are_the_library_shapes(document: dict[str, Any]) -> None:
    def success_schema(method: str, path: str) -> dict[str, Any]:
        content = document["paths"][path][method]["responses"]["200"]["content"]
        return resolve(document, content["application/json"]["schema"])

    assert success_schema("get", "/v1/runs/{run_id}")["title"] == "Run"
    assert success_schema("get", "/v1/runs/{run_id}/events")["title"] == "EventPage"
    assert success_schema("post", "/v1/runs/{run_id}/status")["title"] == "UploadResult"
    assert success_schema("post", "/v1/pools/{pool}/claim")["title"] == "ClaimResult"
    run = success_schema("get", "/v1/runs/{run_id}")
    assert {"producer_attempt", "last_upload_seq", "live_log_count"} <= set(run["required"])
    # An event is an open shape: its type's fields travel flat beside seq, type and ts.
    assert resolve(document, {"$ref": "#/components/schemas/Event"})["additionalProperties"] is True


def test_parameters_carry_the_rules_the_ledger_enforces(document: dict[str, Any]) -> None:
    def parameter(path: str, method: str, name: str) -> dict[str, Any]:
        found = [p for p in document["paths"][path][method]["parameters"] if p["name"] == name]
        assert found, f"{method} {path} has no parameter {name}"
        return found[0]

    run_id = parameter("/v1/runs/{run_id}", "get", "run_id")["schema"]
    assert run_id["maxLength"] == validate.MAX_RUN_ID_LENGTH and run_id["pattern"] == SEGMENT_PATTERN
    assert parameter("/v1/runs/{run_id}/events", "get", "after")["schema"]["pattern"] == CURSOR_PATTERN
    limit = parameter("/v1/runs/{run_id}/events", "get", "limit")["schema"]
    assert (limit["minimum"], limit["maximum"]) == (1, 10_000)
    key = parameter("/v1/runs", "post", "Idempotency-Key")["schema"]
    assert key["maxLength"] == 1024


def test_error_responses_is_the_one_place_error_statuses_are_described() -> None:
    documented = error_responses(404, 503, notes={404: "No such pool."})
    assert documented[404] == {"model": shapes.ErrorBody, "description": "No such pool."}
    assert documented[503]["headers"]["Retry-After"]["schema"] == {"type": "integer"}


# -- the patterns say what the library's checks say ------------------------------------------------


def accepted(check: Any, value: str) -> bool:
    try:
        check(value)
    except InvalidInput:
        return False
    return True


SAMPLE_CHARACTERS = st.characters(codec="utf-8") | st.sampled_from(
    ["/", " ", "\t", "\x00", "\x1f", "\x7f", "\x85", "\xa0", "\u2028", "\u3000", "a", "0"]
)


@given(st.text(SAMPLE_CHARACTERS, max_size=6))
def test_the_run_id_pattern_is_the_run_id_rule(value: str) -> None:
    matches = re.fullmatch(SEGMENT_PATTERN[1:-1], value) is not None
    assert matches == accepted(lambda v: validate.run_id("run_id", v), value)


@given(st.text(SAMPLE_CHARACTERS, max_size=6))
def test_the_non_blank_pattern_is_the_non_blank_text_rule(value: str) -> None:
    matches = re.fullmatch(NON_BLANK_PATTERN[1:-1], value) is not None
    assert matches == accepted(lambda v: validate.required_text("version", v, non_empty=True), value)


@given(
    st.one_of(
        st.integers(min_value=-5, max_value=validate.INT64_MAX + 5).map(str),
        st.integers(min_value=validate.INT64_MAX - 1000, max_value=validate.INT64_MAX + 1000).map(str),
        st.text(st.sampled_from("0123456789-now+ "), max_size=21),
    )
)
def test_the_cursor_pattern_is_the_cursor_rule(value: str) -> None:
    matches = re.fullmatch(CURSOR_PATTERN[1:-1], value) is not None
    assert matches == accepted(lambda v: validate.cursor("after", v), value)


@pytest.mark.parametrize("limit", [0, 7, 10, 99, 1000, 9_223_372_036_854_775_807])
def test_digits_at_most_matches_exactly_up_to_its_limit(limit: int) -> None:
    pattern = re.compile(f"({digits_at_most(limit)})")
    for value in {0, limit // 2, limit - 1, limit, limit + 1, limit * 10}:
        if value >= 0:
            assert (pattern.fullmatch(str(value)) is not None) == (value <= limit), value


def test_the_shapes_are_what_pydantic_serializes_unchanged() -> None:
    # Response validation must not add nor drop keys: an event keeps its type's fields.
    page = {
        "events": [
            {"seq": 1, "type": "log", "ts": 5, "line": "x"},
            {"seq": 2, "type": "step.progress", "ts": 6},
        ],
        "latest_seq": 2,
        "first_seq": 1,
        "terminal": None,
    }
    adapter = pydantic.TypeAdapter(shapes.EventPage)
    assert adapter.dump_python(adapter.validate_python(page)) == page


# -- Durable Streams: its own statuses and headers, documented too ---------------------------------

STREAM = "/v1/stream/{name}"
STREAM_STATUSES = {
    "put": {"200", "201", "400", "401", "403", "404", "405", "409", "413", "422", "503"},
    "post": {"200", "204", "400", "401", "403", "404", "405", "409", "410", "413", "422", "503"},
    "delete": {"204", "400", "401", "403", "404", "405", "410", "503"},
    "head": {"200", "400", "401", "403", "404", "410", "503"},
    "get": {"200", "204", "304", "400", "401", "403", "404", "410", "503"},
}


@pytest.mark.parametrize(("method", "statuses"), sorted(STREAM_STATUSES.items()))
def test_every_stream_operation_documents_each_status_it_answers(
    document: dict[str, Any], method: str, statuses: set[str]
) -> None:
    operation = document["paths"][STREAM][method]
    assert operation["responses"].keys() == statuses
    for status, response in operation["responses"].items():
        if status.startswith(("4", "5")):
            schema = response["content"]["application/json"]["schema"]
            assert resolve(document, schema)["title"] == "ErrorBody", f"{method} {status}"
        else:
            assert response["description"] != "Successful Response", f"{method} {status}"
    assert "HTTPValidationError" not in str(operation)
    assert operation["parameters"][0]["name"] == "name"


def test_the_stream_protocol_s_headers_are_documented_where_they_travel(document: dict[str, Any]) -> None:
    item = document["paths"][STREAM]

    def parameters(method: str) -> set[str]:
        return {p["name"] for p in item[method]["parameters"]}

    def headers(method: str, status: str) -> set[str]:
        return set(item[method]["responses"][status].get("headers", {}))

    assert {"Content-Type", "Stream-TTL", "Stream-Expires-At", "Stream-Forked-From"} <= parameters("put")
    assert {"Producer-Id", "Producer-Epoch", "Producer-Seq", "Stream-Seq", "Stream-Closed"} <= parameters(
        "post"
    )
    assert {"offset", "live", "cursor", "If-None-Match"} <= parameters("get")
    assert "Idempotency-Key" in parameters("put") and "Idempotency-Key" in parameters("post")
    assert {"Location", "Stream-Next-Offset"} <= headers("put", "201")
    assert {"Producer-Epoch"} <= headers("post", "403")
    assert {"Producer-Expected-Seq", "Producer-Received-Seq", "Stream-Closed"} <= headers("post", "409")
    assert headers("post", "405") == {"Allow"}
    assert {"Stream-Next-Offset", "Stream-Up-To-Date", "Stream-Cursor", "ETag"} <= headers("get", "200")
    assert "Retry-After" in headers("get", "503")
    assert set(item["get"]["responses"]["200"]["content"]) == {"application/json", "text/event-stream", "*/*"}
    assert set(item["put"]["requestBody"]["content"]) >= {"application/octet-stream", "application/json"}
