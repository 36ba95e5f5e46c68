"""The service's JSON encoder (`ledger.service.json_answer`) writes what the encoders it replaced
wrote: FastAPI's response-model serializer for answers, Starlette's `JSONResponse` for errors, and
the standard library for log lines."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter
from pydantic_core import PydanticSerializationError
from starlette.responses import JSONResponse

from ledger import shapes
from ledger.service.json_answer import JsonAnswer, encode
from ledger.service.logs import JsonFormatter

# What the append route answered through before: FastAPI validated the answer against its type,
# then wrote it with pydantic's serializer.
APPENDED = TypeAdapter(shapes.AppendedEvents)


def before(answer: Any) -> bytes:
    return APPENDED.dump_json(APPENDED.validate_python(answer))


def appended(**fields: Any) -> dict[str, Any]:
    return {"events": [{"seq": 1, "type": "step.progress", "ts": 1_764_565_200_123, **fields}]}


TRICKY: list[dict[str, Any]] = [
    appended(line="plain"),
    appended(line='é, ü, 日本語, emoji 😀, U+2028 \u2028 and U+2029 \u2029, a quote " and a \\'),
    appended(line="control \x01\x1f and DEL \x7f"),
    # Integers at and past the 64-bit edges: jsonb keeps them exactly, so answers carry them.
    appended(n=2**63 - 1, m=-(2**63), k=2**64 - 1),
    appended(big=10**30, small=-(10**30)),
    appended(nested={"a": [1, 2.5, None, True, {"b": 10**25}], "c": ""}),
    appended(f=0.1, g=1e300, h=-0.0, i=1.0, j=5e-324),
    {"events": []},
]


@pytest.mark.parametrize("answer", TRICKY, ids=range(len(TRICKY)))
def test_an_answer_is_the_bytes_the_response_model_wrote(answer: dict[str, Any]) -> None:
    assert encode(answer) == before(answer)
    assert json.loads(encode(answer)) == answer


def test_nan_and_infinity_are_null_as_the_response_model_wrote_them() -> None:
    answer = appended(x=float("nan"), y=float("inf"), z=float("-inf"), big=10**30)
    assert encode(answer) == before(answer)
    event = json.loads(encode(answer))["events"][0]
    assert (event["x"], event["y"], event["z"], event["big"]) == (None, None, None, 10**30)


def test_a_lone_surrogate_is_refused_as_the_response_model_refused_it() -> None:
    answer = appended(line="\ud800")
    with pytest.raises(PydanticSerializationError):
        before(answer)
    with pytest.raises(PydanticSerializationError):
        encode(answer)


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(st.characters(exclude_categories=["Cs"])),
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
        ),
        max_leaves=12,
    )
)
def test_any_json_value_in_an_event_is_written_as_before(value: Any) -> None:
    answer = appended(value=value)
    assert encode(answer) == before(answer)


@pytest.mark.parametrize(
    "body",
    [
        {"error": "run 'x': not found"},
        {"error": "é \u2028 😀", "code": "terminal", "terminal": {"status": "failed", "result": 10**30}},
    ],
)
def test_an_error_answer_is_the_json_starlette_wrote(body: dict[str, Any]) -> None:
    ours = JsonAnswer(body, status_code=409)
    theirs = JSONResponse(body, status_code=409)
    assert ours.body == theirs.body
    assert ours.headers["content-type"] == theirs.headers["content-type"] == "application/json"
    assert ours.headers["content-length"] == theirs.headers["content-length"]


def test_a_log_line_holds_what_json_wrote_even_where_orjson_refuses() -> None:
    record = logging.LogRecord("ledger.x", logging.INFO, __file__, 1, "hello %s", ("日本",), None)
    record.count = 10**30  # beyond orjson's integers: written by json instead
    record.where = object()  # not JSON at all: written as its str(), as before
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "hello 日本"
    assert entry["count"] == 10**30
    assert entry["where"].startswith("<object object at")
