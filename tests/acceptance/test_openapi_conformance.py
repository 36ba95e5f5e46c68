"""The OpenAPI document is the contract: schemathesis drives the real service from its own
`/openapi.json` and checks every answer against it.

Every status an operation answers must be documented for it, every body must match its schema
and content type, nothing may be a 500, data the schema calls valid must not be refused (400 or
422) and data it calls invalid must be. Bounded: `MAX_EXAMPLES` generated examples per operation
beside the boundary cases, no stateful phase: about a minute on two cores.

Two operations can wait: a long-poll holds up to `timeout_ms` (30 s) on a live run, and a live
run's event stream never ends. Generated requests keep their meaning but not their patience: a
long-poll waits at most `MAX_WAIT_MS`, and the stream reads a run that has ended.

The Durable Streams operations (`/v1/stream/{name}`: bytes in and out, headers as the protocol's
fields) have a conformance suite of their own for their meaning; here they are held to what JSON
Schema can say of them: every status, content type, header and body documented, never a 500. A
live read goes to a closed stream, which answers at once.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx
import pytest
import schemathesis
from schemathesis import engine
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events as engine_events
from schemathesis.openapi.checks import RejectedPositiveData

from ledger.ingest.rules import DEFAULT_MAX_ATTEMPT_STEP
from ledger.service.app import IDEMPOTENCY_KEY_PARAMETER
from ledger.service.models import SEGMENT_PATTERN
from ledger.validate import MAX_RUN_ID_LENGTH
from tests.acceptance.conftest import Server, new_id

# Above the project's per-test default: about a minute, more on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MAX_EXAMPLES = 15
MAX_WAIT_MS = 50
STREAM = "/v1/runs/{run_id}/events/stream"
LONG_POLL = "/v1/runs/{run_id}/events"
APPEND = LONG_POLL
STREAMS = "^/v1/stream/"
UPLOAD = "/v1/runs/{run_id}/status"
IDEMPOTENCY_KEY = "Idempotency-Key"
VALID_KEY = re.compile(IDEMPOTENCY_KEY_PARAMETER["schema"]["pattern"])
# NUL and lone surrogates: never storable in a structured value (the rules refuse them, 422).
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
BIGINT_LIMIT = 2**63
VALID_RUN_ID = re.compile(SEGMENT_PATTERN)

# What both runs check: answers only (no stateful phase), with a fixed budget and seed.
_CHECKS = f"""
[generation]
max-examples = {MAX_EXAMPLES}
deterministic = true

[phases.stateful]
enabled = false

[checks]
enabled = false

[checks.not_a_server_error]
enabled = true

[checks.status_code_conformance]
enabled = true

[checks.content_type_conformance]
enabled = true

[checks.response_schema_conformance]
enabled = true
"""

CONFIG = SchemathesisConfig.from_str(
    _CHECKS
    + """
[checks.positive_data_acceptance]
enabled = true
# A valid request may still name a run that does not exist (404), contradict stored state (409)
# or ask for trimmed events (410); what it may not get is 400 or 422.
expected-statuses = ["2xx", "404", "409", "410"]

[checks.negative_data_rejection]
enabled = true
"""
)


STREAM_CONFIG = SchemathesisConfig.from_str(
    """
# The stream operations' headers are patterns (offsets, producer ids, TTLs) that generation meets by
# filtering; on a slow machine Hypothesis may then stop with a health check, which says nothing of
# the service's answers (the checks below do).
suppress-health-check = ["filter_too_much", "too_slow"]
"""
    + _CHECKS
    + """
[checks.response_headers_conformance]
enabled = true
"""
)


@pytest.fixture(scope="module")
def closed_stream(server: Server) -> str:
    """A JSON stream with a message, closed: a live read of it ends at once."""
    name = new_id("conformance-closed")
    with server.client() as http:
        created = http.put(
            f"/v1/stream/{name}",
            content=b'[{"n": 1}]',
            headers={"Content-Type": "application/json", "Stream-Closed": "true"},
        )
        assert created.status_code == 201, created.text
    return name


@pytest.fixture(scope="module")
def ended_run(server: Server) -> str:
    """A run with a few events and its terminal state: its stream ends."""
    run_id = new_id("conformance-ended")
    with server.client() as http:
        http.post("/v1/runs", json={"run_id": run_id}).raise_for_status()
        events = [{"type": "log", "line": "one"}, {"type": "status", "status": "running"}]
        http.post(f"/v1/runs/{run_id}/events", json={"events": events}).raise_for_status()
        http.put(f"/v1/runs/{run_id}/terminal", json={"status": "completed"}).raise_for_status()
    return run_id


def _patient(case: Any, ended_run: str) -> Any:
    path = case.operation.path
    if path == LONG_POLL and isinstance(case.query, dict):
        wait = case.query.get("timeout_ms")
        if isinstance(wait, int) and not isinstance(wait, bool) and wait > MAX_WAIT_MS:
            case.query["timeout_ms"] = MAX_WAIT_MS
    if path == STREAM and isinstance(case.path_parameters, dict):
        run_id = case.path_parameters.get("run_id")
        # Only a run id the schema calls valid is replaced: an invalid one must still be refused.
        if _valid_run_id(run_id):
            case.path_parameters["run_id"] = ended_run
    return case


def _one_key_per_request(case: Any) -> Any:
    """A generated Idempotency-Key repeats across requests, which the ledger rightly refuses (422)
    when the body differs: a key names one request, so each valid one is made unique."""
    key = (case.headers or {}).get(IDEMPOTENCY_KEY)
    if isinstance(key, str) and VALID_KEY.fullmatch(key):
        case.headers[IDEMPOTENCY_KEY] = f"{key[:990]}-{uuid.uuid4().hex}"
    return case


def _same_run(case: Any) -> Any:
    """An upload's body `run_id`, when sent, must be the path's (JSON Schema cannot say so): a
    valid one is left out, which the schema allows; an invalid one stays, to be refused."""
    if (
        case.operation.path == UPLOAD
        and isinstance(case.body, dict)
        and _valid_run_id(case.body.get("run_id"))
    ):
        del case.body["run_id"]
    return case


def _first_delivery(case: Any) -> Any:
    """Generated run ids and `upload_seq`s repeat across requests, and an upload whose attempt
    already applied its `upload_seq` is a late duplicate, answered as one without the rest of its
    body being validated (the uploader resends an upload's unchanged bytes): each upload to a valid
    run id goes to a run of its own, so its body is what gets checked."""
    if case.operation.path == UPLOAD and isinstance(case.path_parameters, dict):
        run_id = case.path_parameters.get("run_id")
        if _valid_run_id(run_id):
            suffix = uuid.uuid4().hex
            case.path_parameters["run_id"] = f"{run_id[: MAX_RUN_ID_LENGTH - len(suffix)]}{suffix}"
    return case


def _valid_run_id(value: object) -> bool:
    return (
        isinstance(value, str)
        and len(value) <= MAX_RUN_ID_LENGTH
        and VALID_RUN_ID.fullmatch(value) is not None
    )


def _states_what_the_schema_cannot(case: Any) -> bool:
    """False for a case the schema calls valid but that breaks a rule JSON Schema cannot state:
    a NUL or a lone surrogate in a structured value (never storable), a terminal event
    before the end of its batch, a log count below its number of lines, an attempt further ahead of
    the run's than an upload may jump."""
    body = case.body
    if _unstorable(body):
        return False
    if _past_bigint(body):
        return False
    if case.operation.path == APPEND and isinstance(body, dict) and isinstance(body.get("events"), list):
        kinds = [event.get("type") for event in body["events"] if isinstance(event, dict)]
        if "terminal" in kinds[:-1]:
            return False
    if case.operation.path == UPLOAD and isinstance(body, dict):
        # How far an attempt may jump depends on the run's current one: from 0, this far.
        if _count(body.get("producer_attempt"), absent=0) > DEFAULT_MAX_ATTEMPT_STEP:
            return False
        if _count(body.get("live_log_total_count")) < _count(len(body.get("live_logs") or [])):
            return False
        replay = body.get("terminal_log_replay")
        if isinstance(replay, dict) and _count(replay.get("total_count")) < len(replay.get("lines") or []):
            return False
    return True


def _unstorable(value: object) -> bool:
    """A NUL or a lone surrogate in any string or key of a JSON value."""
    if isinstance(value, dict):
        return any(_unstorable(key) or _unstorable(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_unstorable(item) for item in value)
    return isinstance(value, str) and UNSTORABLE.search(value) is not None


def _past_bigint(value: object) -> bool:
    """Integers at or past 2**63: the schema's bound is right, but a generator working in floats
    near it draws some just above."""
    if isinstance(value, dict):
        return any(_past_bigint(item) for item in value.values())
    if isinstance(value, list):
        return any(_past_bigint(item) for item in value)
    return isinstance(value, int) and not isinstance(value, bool) and value >= BIGINT_LIMIT


def _count(value: object, absent: float = float("inf")) -> float:
    # An absent log count defaults to the number of lines: never below it.
    return absent if value is None else float(value) if isinstance(value, int | float) else 0.0


def _run(events: Any) -> tuple[list[str], set[str]]:
    """The failures the engine reported, and the operations it sent requests to."""
    found: list[str] = []
    tested: set[str] = set()
    for event in events:
        if isinstance(event, engine_events.FatalError):
            raise event.exception
        if isinstance(event, engine_events.NonFatalError):
            found.append(f"{event.label}: error {event.value!r}")
        recorder = getattr(event, "recorder", None)
        if recorder is None:
            continue
        if recorder.interactions:
            tested.add(recorder.label)
        for checks in recorder.checks.values():
            for check in checks:
                if check.failure_info is None:
                    continue
                failure = check.failure_info.failure
                found.append(
                    f"{recorder.label} [{check.name}] {failure.title}: {failure.message}\n"
                    f"{check.failure_info.code_sample}"
                )
    return found, tested


def test_every_answer_is_documented_and_every_valid_request_accepted(server: Server, ended_run: str) -> None:
    document = httpx.get(f"{server.url}/openapi.json", headers=server.headers, timeout=30)
    document.raise_for_status()
    # The Durable Streams protocol has a conformance suite of its own, run against this service.
    schema = schemathesis.openapi.from_dict(document.json(), config=CONFIG).exclude(path_regex=STREAMS)
    schema.config.update(base_url=server.url, headers=server.headers)

    @schema.hook("map_case")  # type: ignore[misc]
    def patient(context: Any, case: Any) -> Any:
        return _first_delivery(_same_run(_one_key_per_request(_patient(case, ended_run))))

    @schema.hook("filter_failure")  # type: ignore[misc]
    def not_for_a_rule_json_schema_cannot_state(context: Any, failure: Any, case: Any, response: Any) -> bool:
        return not isinstance(failure, RejectedPositiveData) or _states_what_the_schema_cannot(case)

    failures, tested = _run(engine.from_schema(schema).execute())
    assert not failures, f"{len(failures)} failures:\n\n" + "\n\n".join(failures)
    documented = {
        f"{method.upper()} {path}"
        for path, item in document.json()["paths"].items()
        if not re.match(STREAMS, path)
        for method in item
    }
    assert documented <= tested, f"never exercised: {sorted(documented - tested)}"


def _read_closed(case: Any, closed_stream: str) -> Any:
    """A live read (long-poll or SSE) waits for data that never comes to a generated name that
    exists: it reads the closed stream instead, whose end answers at once."""
    query = case.query if isinstance(case.query, dict) else {}
    if (
        case.method.upper() == "GET"
        and query.get("live") is not None
        and isinstance(case.path_parameters, dict)
    ):
        case.path_parameters["name"] = closed_stream
    return case


def test_every_stream_answer_is_documented(server: Server, closed_stream: str) -> None:
    document = httpx.get(f"{server.url}/openapi.json", headers=server.headers, timeout=30)
    document.raise_for_status()
    schema = schemathesis.openapi.from_dict(document.json(), config=STREAM_CONFIG).include(path_regex=STREAMS)
    schema.config.update(base_url=server.url, headers=server.headers)

    @schema.hook("map_case")  # type: ignore[misc]
    def patient(context: Any, case: Any) -> Any:
        return _one_key_per_request(_read_closed(case, closed_stream))

    failures, tested = _run(engine.from_schema(schema).execute())
    assert not failures, f"{len(failures)} failures:\n\n" + "\n\n".join(failures)
    documented = {
        f"{method.upper()} {path}"
        for path, item in document.json()["paths"].items()
        if re.match(STREAMS, path)
        for method in item
    }
    assert len(documented) == 5 and documented <= tested, f"never exercised: {sorted(documented - tested)}"
