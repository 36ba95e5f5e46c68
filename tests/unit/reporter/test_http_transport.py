"""The HTTP transport against httpx.MockTransport: retries, final answers, stale attempt.

The transport is an adapter over `ledger.client.AsyncLedgerClient`: these pin what the reporter
relies on through it (the client's own rules are in tests/unit/test_client.py).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from ledger.errors import (
    InvalidInput,
    LedgerError,
    LedgerUnavailable,
    NotFound,
    PayloadTooLarge,
    RunTerminal,
    StaleAttempt,
    Unauthorized,
)
from ledger.validate import encode_body
from reporter.transports.http import DEFAULT_RETRY_POLICY, HttpTransport, RetryPolicy

PAYLOAD = {"run_id": "run/1", "upload_seq": 7, "producer_attempt": 2, "status": "running"}


class Recorder:
    def __init__(self, answers: list[httpx.Response | Exception]) -> None:
        self.answers = answers
        self.requests: list[httpx.Request] = []
        self.sleeps: list[float] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


def make(answers: list[httpx.Response | Exception], **policy: Any) -> tuple[HttpTransport, Recorder]:
    recorder = Recorder(answers)
    policy = {"max_attempts": 6, "max_total_s": 60.0, "initial_wait_s": 0.5, "max_wait_s": 2.0, **policy}
    transport = HttpTransport(
        "http://ledger.test/",
        "tok",
        transport=httpx.MockTransport(recorder.handler),
        retry_policy=RetryPolicy(**policy),
        sleep=recorder.sleep,
    )
    return transport, recorder


async def test_upload_posts_the_body_with_auth_and_idempotency_key() -> None:
    transport, recorder = make([httpx.Response(200, json={"duplicate": False})])
    assert await transport.upload(dict(PAYLOAD)) == {"duplicate": False}
    [request] = recorder.requests
    assert request.method == "POST"
    assert str(request.url) == "http://ledger.test/v1/runs/run%2F1/status"
    assert request.headers["Authorization"] == "Bearer tok"
    assert request.headers["Idempotency-Key"] == f"2:7:{transport.key_id}"
    assert request.headers["Content-Type"] == "application/json"
    assert request.content == encode_body(PAYLOAD)  # the very bytes the uploader measures
    assert json.loads(request.content) == PAYLOAD
    await transport.aclose()


async def test_a_resent_upload_carries_the_key_of_its_first_delivery() -> None:
    # The uploader sends an upload of unknown outcome again by calling upload() again.
    transport, recorder = make([httpx.Response(200, json={}), httpx.Response(200, json={})])
    await transport.upload(dict(PAYLOAD))
    await transport.upload(dict(PAYLOAD))
    assert len({r.headers["Idempotency-Key"] for r in recorder.requests}) == 1
    other, _ = make([])
    assert other.key_id != transport.key_id  # two reporters of one attempt never share a key
    await transport.aclose()


async def test_503_is_retried_honouring_retry_after_as_a_minimum_with_the_same_key() -> None:
    transport, recorder = make(
        [
            httpx.Response(503, headers={"Retry-After": "5"}),
            httpx.Response(429),
            httpx.ConnectError("refused"),
            httpx.Response(200, json={"ok": True}),
        ]
    )
    assert await transport.upload(dict(PAYLOAD)) == {"ok": True, "redelivered": True}
    assert len(recorder.requests) == 4
    assert {r.headers["Idempotency-Key"] for r in recorder.requests} == {f"2:7:{transport.key_id}"}
    assert recorder.sleeps[0] >= 5.0  # Retry-After wins over the (capped at 2 s) backoff
    assert all(0 <= s <= 2.0 for s in recorder.sleeps[1:])
    await transport.aclose()


@pytest.mark.parametrize("status", [408, 429, 502, 503, 504])
async def test_each_transient_status_is_retried(status: int) -> None:
    transport, recorder = make([httpx.Response(status), httpx.Response(200, json={})])
    await transport.upload(dict(PAYLOAD))
    assert len(recorder.requests) == 2
    await transport.aclose()


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, InvalidInput),
        (401, Unauthorized),
        (404, NotFound),
        (413, PayloadTooLarge),
        (422, InvalidInput),
        (500, LedgerError),
    ],
)
async def test_other_errors_are_refusals_never_retried(status: int, expected: type[LedgerError]) -> None:
    transport, recorder = make([httpx.Response(status, json={"error": "bad field x"})])
    with pytest.raises(LedgerError, match="bad field x") as info:
        await transport.upload(dict(PAYLOAD))
    assert type(info.value) is expected
    assert f"HTTP {status}" in "".join(info.value.__notes__)
    assert len(recorder.requests) == 1 and recorder.sleeps == []
    await transport.aclose()


@pytest.mark.parametrize(("named", "limit"), [(1_000, 1_000), (0, None), ("big", None), (None, None)])
async def test_a_413_names_the_limit_when_its_answer_does(named: object, limit: int | None) -> None:
    transport, _ = make([httpx.Response(413, json={"error": "too large", "max_body_bytes": named})])
    with pytest.raises(PayloadTooLarge) as info:
        await transport.upload(dict(PAYLOAD))
    assert info.value.max_body_bytes == limit
    await transport.aclose()


async def test_409_stale_attempt_stops_without_retry() -> None:
    body = {
        "error": "stale producer attempt 2 for run 'run/1': the run is on attempt 3",
        "code": "stale_attempt",
        "producer_attempt": 3,
    }
    transport, recorder = make([httpx.Response(409, json=body)])
    with pytest.raises(StaleAttempt, match="attempt 3") as info:
        await transport.upload(dict(PAYLOAD))
    assert info.value.current == 3 and info.value.run_id == "run/1"
    assert len(recorder.requests) == 1
    await transport.aclose()


async def test_other_409_is_a_refusal_not_a_stale_attempt() -> None:
    body = {"error": "stale producer attempt, says the text only"}
    transport, _ = make([httpx.Response(409, json=body)])
    with pytest.raises(LedgerError) as info:
        await transport.upload(dict(PAYLOAD))
    assert not isinstance(info.value, StaleAttempt)
    await transport.aclose()


async def test_409_terminal_carries_who_ended_the_run_and_how() -> None:
    terminal = {"status": "failed", "error": "run watchdog: no progress; orchestrator presumed dead"}
    body = {"error": "run is terminal", "code": "terminal", "terminal": terminal}
    transport, recorder = make([httpx.Response(409, json=body)])
    with pytest.raises(RunTerminal) as info:
        await transport.upload(dict(PAYLOAD))
    assert info.value.terminal == terminal and len(recorder.requests) == 1
    await transport.aclose()


async def test_attempts_are_capped() -> None:
    transport, recorder = make([httpx.Response(502, json={"error": "bad gateway"})] * 3, max_attempts=3)
    with pytest.raises(LedgerUnavailable, match="bad gateway") as info:
        await transport.upload(dict(PAYLOAD))
    assert info.value.status == 502
    assert len(recorder.requests) == 3 and len(recorder.sleeps) == 2
    await transport.aclose()


async def test_total_time_is_capped_before_a_wait_that_would_pass_it() -> None:
    transport, recorder = make(
        [httpx.Response(503, headers={"Retry-After": "120"}), httpx.Response(200, json={})], max_total_s=60
    )
    with pytest.raises(LedgerUnavailable):
        await transport.upload(dict(PAYLOAD))
    assert len(recorder.requests) == 1 and recorder.sleeps == []
    await transport.aclose()


async def test_connection_errors_after_retries_are_an_outage_naming_the_service() -> None:
    transport, recorder = make([httpx.ConnectError("refused")] * 2, max_attempts=2)
    with pytest.raises(LedgerUnavailable) as info:
        await transport.upload(dict(PAYLOAD))
    assert "cannot reach the ledger service at http://ledger.test" in str(info.value)
    assert isinstance(info.value.__cause__, httpx.ConnectError) and info.value.status is None
    assert len(recorder.requests) == 2
    await transport.aclose()


async def test_the_first_failure_is_heard_once_before_the_retries() -> None:
    heard: list[Exception] = []
    transport, recorder = make(
        [httpx.ConnectError("refused")] * 3 + [httpx.Response(200, json={})], on_first_failure=heard.append
    )
    await transport.upload(dict(PAYLOAD))
    assert len(recorder.requests) == 4
    [first] = heard
    assert isinstance(first, LedgerUnavailable) and isinstance(first.__cause__, httpx.ConnectError)
    await transport.aclose()


async def test_reads_of_outcomes_and_observations() -> None:
    transport, recorder = make(
        [
            httpx.Response(200, json={"outcomes": [{"table_namespace": "t", "completed": 1}, "junk"]}),
            httpx.Response(200, json={"observations": [{"node_id": "d"}]}),
            httpx.Response(404, json={"error": "unknown run"}),
            httpx.Response(404, json={"error": "unknown run"}),
            httpx.Response(200, json={"lines": ["a", 7, "b"]}),
            httpx.Response(404, json={"error": "unknown run"}),
            httpx.Response(404, json={"error": "unknown run"}),
        ]
    )
    assert await transport.sheet_outcomes("r") == [{"table_namespace": "t", "completed": 1}]
    assert await transport.node_observations("r") == [{"node_id": "d"}]
    assert await transport.sheet_outcomes("r") == []
    assert await transport.node_observations("r") == []
    assert await transport.recent_log_lines("r", 5) == ["a", "b"]
    assert await transport.recent_log_lines("r", 5) == []
    assert await transport.run_state("r") is None
    assert [str(r.url) for r in recorder.requests[:2]] == [
        "http://ledger.test/v1/runs/r/sheets",
        "http://ledger.test/v1/runs/r/observations",
    ]
    assert str(recorder.requests[4].url) == "http://ledger.test/v1/runs/r/logs?tail=5"
    assert all(r.headers["Authorization"] == "Bearer tok" for r in recorder.requests)
    await transport.aclose()


@pytest.mark.parametrize(
    ("answer", "limit"),
    [
        (httpx.Response(200, json={"max_body_bytes": 2048}), 2048),
        (httpx.Response(200, json={"max_body_bytes": 0}), None),
        (httpx.Response(404, json={"error": "no such route"}), None),
    ],
)
async def test_body_limit(answer: httpx.Response, limit: int | None) -> None:
    transport, recorder = make([answer])
    assert await transport.body_limit() == limit
    assert str(recorder.requests[0].url) == "http://ledger.test/v1/limits"
    await transport.aclose()


def test_the_default_policy_outlasts_a_longer_outage_than_a_command_does() -> None:
    assert (DEFAULT_RETRY_POLICY.max_attempts, DEFAULT_RETRY_POLICY.max_total_s) == (6, 60.0)
    assert RetryPolicy().max_total_s < DEFAULT_RETRY_POLICY.max_total_s


def test_without_a_token_the_environment_s_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_TOKEN", " from-env ")
    transport = HttpTransport("http://ledger.test")
    assert transport.client.http.headers["Authorization"] == "Bearer from-env"
