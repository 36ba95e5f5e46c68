"""The HTTP transport against httpx.MockTransport: retries, final answers, stale attempt."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from ledger.validate import encode_body
from reporter.transports.http import HttpTransport, RetryPolicy, parse_retry_after
from reporter.transports.protocol import RunTerminalError, StaleAttemptError, TransportError, UploadRejected

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


def make(
    answers: list[httpx.Response | Exception], **policy: Any
) -> tuple[HttpTransport, Recorder, Callable[[], Any]]:
    recorder = Recorder(answers)
    client = httpx.AsyncClient(transport=httpx.MockTransport(recorder.handler))
    policy.setdefault("max_wait_s", 2.0)
    transport = HttpTransport(
        "http://ledger.test/", "tok", client=client, retry_policy=RetryPolicy(sleep=recorder.sleep, **policy)
    )
    return transport, recorder, client.aclose


async def test_upload_posts_the_body_with_auth_and_idempotency_key() -> None:
    transport, recorder, close = make([httpx.Response(200, json={"duplicate": False})])
    assert await transport.upload(dict(PAYLOAD)) == {"duplicate": False}
    [request] = recorder.requests
    assert request.method == "POST"
    assert str(request.url) == "http://ledger.test/v1/runs/run%2F1/status"
    assert request.headers["Authorization"] == "Bearer tok"
    assert request.headers["Idempotency-Key"] == f"2:7:{transport.key_id}"
    assert request.headers["Content-Type"] == "application/json"
    assert request.content == encode_body(PAYLOAD)  # the very bytes the uploader measures
    assert json.loads(request.content) == PAYLOAD
    await close()


async def test_503_is_retried_honouring_retry_after_as_a_minimum_with_the_same_key() -> None:
    transport, recorder, close = make(
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
    await close()


@pytest.mark.parametrize("status", [408, 429, 502, 503, 504])
async def test_each_transient_status_is_retried(status: int) -> None:
    transport, recorder, close = make([httpx.Response(status), httpx.Response(200, json={})])
    await transport.upload(dict(PAYLOAD))
    assert len(recorder.requests) == 2
    await close()


@pytest.mark.parametrize("status", [400, 401, 404, 413, 422, 500])
async def test_other_errors_are_not_retried(status: int) -> None:
    transport, recorder, close = make([httpx.Response(status, json={"error": "bad field x"})])
    with pytest.raises(UploadRejected, match="bad field x") as info:
        await transport.upload(dict(PAYLOAD))
    assert info.value.status_code == status
    assert len(recorder.requests) == 1 and recorder.sleeps == []
    await close()


async def test_409_stale_attempt_stops_without_retry() -> None:
    body = {
        "error": "stale producer attempt 2 for run 'run/1': the run is on attempt 3",
        "code": "stale_attempt",
    }
    transport, recorder, close = make([httpx.Response(409, json=body)])
    with pytest.raises(StaleAttemptError, match="attempt 3"):
        await transport.upload(dict(PAYLOAD))
    assert len(recorder.requests) == 1
    await close()


async def test_other_409_is_a_rejection_not_a_stale_attempt() -> None:
    body = {"error": "stale producer attempt, says the text only"}
    transport, _, close = make([httpx.Response(409, json=body)])
    with pytest.raises(UploadRejected) as info:
        await transport.upload(dict(PAYLOAD))
    assert not isinstance(info.value, StaleAttemptError)
    await close()


async def test_409_terminal_names_who_ended_the_run_and_how() -> None:
    terminal = {"status": "failed", "error": "run watchdog: no progress; orchestrator presumed dead"}
    body = {"error": "run is terminal", "code": "terminal", "terminal": terminal}
    transport, recorder, close = make([httpx.Response(409, json=body)])
    with pytest.raises(RunTerminalError, match="ended as failed by someone else: run watchdog") as info:
        await transport.upload(dict(PAYLOAD))
    assert info.value.terminal == terminal and len(recorder.requests) == 1
    await close()


async def test_attempts_are_capped() -> None:
    transport, recorder, close = make([httpx.Response(502)] * 3, max_attempts=3)
    with pytest.raises(TransportError, match="502"):
        await transport.upload(dict(PAYLOAD))
    assert len(recorder.requests) == 3 and len(recorder.sleeps) == 2
    await close()


async def test_total_time_is_capped_before_a_wait_that_would_pass_it() -> None:
    transport, recorder, close = make(
        [httpx.Response(503, headers={"Retry-After": "120"}), httpx.Response(200, json={})], max_total_s=60
    )
    with pytest.raises(TransportError):
        await transport.upload(dict(PAYLOAD))
    assert len(recorder.requests) == 1 and recorder.sleeps == []
    await close()


async def test_connection_errors_after_retries_become_transport_errors() -> None:
    transport, recorder, close = make([httpx.ConnectError("refused")] * 2, max_attempts=2)
    with pytest.raises(TransportError, match="cannot reach the ledger"):
        await transport.upload(dict(PAYLOAD))
    assert len(recorder.requests) == 2
    await close()


async def test_reads_of_outcomes_and_observations() -> None:
    transport, recorder, close = make(
        [
            httpx.Response(200, json={"outcomes": [{"table_namespace": "t", "completed": 1}, "junk"]}),
            httpx.Response(200, json={"observations": [{"node_id": "d"}]}),
            httpx.Response(404, json={"error": "unknown run"}),
            httpx.Response(404, json={"error": "unknown run"}),
        ]
    )
    assert await transport.sheet_outcomes("r") == [{"table_namespace": "t", "completed": 1}]
    assert await transport.node_observations("r") == [{"node_id": "d"}]
    assert await transport.sheet_outcomes("r") == []
    assert await transport.node_observations("r") == []
    assert [str(r.url) for r in recorder.requests[:2]] == [
        "http://ledger.test/v1/runs/r/sheets",
        "http://ledger.test/v1/runs/r/observations",
    ]
    assert all(r.headers["Authorization"] == "Bearer tok" for r in recorder.requests)
    await close()


def test_parse_retry_after() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0
