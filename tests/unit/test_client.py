"""`ledger.client` without a service: error mapping, retries, paging and the resuming SSE tail.

The service is replaced by `httpx.MockTransport` (httpx's test seam) for what a real service does
not do on demand: drop a stream mid-way, answer 503 with `Retry-After`, hang up. Sleeping is
injected, so nothing here waits for real. `tests/acceptance/test_client.py` runs both clients
against the real service.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.client import (
    AsyncLedgerClient,
    LedgerClient,
    RetryPolicy,
    StatusDelivery,
    service_url,
)
from ledger.errors import (
    Conflict,
    CursorExpired,
    InvalidInput,
    LedgerError,
    LedgerUnavailable,
    NotFound,
    PayloadTooLarge,
    RunTerminal,
    StaleAttempt,
    Unauthorized,
)

BASE = "http://ledger.test"
Handler = Callable[[httpx.Request], httpx.Response]


def sse(seq: int, type_: str, **fields: object) -> bytes:
    data = json.dumps({"seq": seq, "type": type_, "ts": 0, **fields})
    return f"id: {seq}\nevent: {type_}\ndata: {data}\n\n".encode()


class Dropping(httpx.SyncByteStream, httpx.AsyncByteStream):
    """An SSE body that sends its chunks and then, if asked, loses the connection."""

    def __init__(self, chunks: list[bytes], *, drop: bool) -> None:
        self.chunks = chunks
        self.drop = drop

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if self.drop:
            raise httpx.ReadError("connection reset by peer")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.drop:
            raise httpx.ReadError("connection reset by peer")


def stream_response(chunks: list[bytes], *, drop: bool = False) -> httpx.Response:
    return httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=Dropping(chunks, drop=drop)
    )


def make_client(handler: Handler, sleeps: list[float] | None = None, **kw: Any) -> LedgerClient:
    record = sleeps if sleeps is not None else []
    kw.setdefault("sleep", record.append)
    return LedgerClient(BASE, "tok", transport=httpx.MockTransport(handler), **kw)


def make_async_client(handler: Handler, sleeps: list[float]) -> AsyncLedgerClient:
    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    return AsyncLedgerClient(BASE, "tok", transport=httpx.MockTransport(handler), sleep=sleep)


def dropping_service(requests: list[httpx.Request]) -> Handler:
    """Drops the stream after seq 2, ends it cleanly (no terminal) after 3, then ends the run."""

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        if len(requests) == 1:
            return stream_response(
                [b": keep-alive\n\n", sse(1, "status", status="running"), sse(2, "log", line="a")], drop=True
            )
        if len(requests) == 2:
            return stream_response([sse(3, "log", line="b")])
        return stream_response([sse(4, "terminal", status="completed"), sse(5, "log", line="never read")])

    return handler


def check_resumed(requests: list[httpx.Request], sleeps: list[float]) -> None:
    assert requests[0].url.raw_path.split(b"?")[0] == b"/v1/runs/run%2F1/events/stream"
    assert requests[0].url.params["after"] == "-1" and "last-event-id" not in requests[0].headers
    assert requests[1].headers["last-event-id"] == "2" and "after" not in requests[1].url.params
    assert requests[2].headers["last-event-id"] == "3"
    assert all(r.headers["authorization"] == "Bearer tok" for r in requests)
    assert len(sleeps) == 2


def test_tail_resumes_after_a_dropped_connection_with_last_event_id() -> None:
    requests: list[httpx.Request] = []
    sleeps: list[float] = []
    with make_client(dropping_service(requests), sleeps) as client:
        assert [e["seq"] for e in client.tail("run/1", after=-1)] == [1, 2, 3, 4]
    check_resumed(requests, sleeps)


async def test_async_tail_resumes_the_same_way() -> None:
    requests: list[httpx.Request] = []
    sleeps: list[float] = []
    async with make_async_client(dropping_service(requests), sleeps) as client:
        assert [e["seq"] async for e in client.tail("run/1")] == [1, 2, 3, 4]
    check_resumed(requests, sleeps)


def test_tail_stops_on_204_for_a_finished_run() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            return stream_response([sse(7, "log", line="x")], drop=True)
        return httpx.Response(204)

    with make_client(handler) as client:
        assert [e["seq"] for e in client.tail("r")] == [7]
    assert len(calls) == 2


def test_tail_waits_out_a_503_for_its_retry_after_and_resumes() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            return stream_response([sse(1, "log", line="x")], drop=True)
        if len(calls) == 2:
            return httpx.Response(
                503, json={"error": "the database is unavailable"}, headers={"Retry-After": "7"}
            )
        return stream_response([sse(2, "terminal", status="failed")])

    sleeps: list[float] = []
    with make_client(handler, sleeps) as client:
        assert [e["seq"] for e in client.tail("r")] == [1, 2]
    assert calls[2].headers["last-event-id"] == "1"
    assert sleeps[1] >= 7


def test_tail_gives_up_after_repeated_failures_with_one_line() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    sleeps: list[float] = []
    with make_client(handler, sleeps, max_reconnects=3) as client, pytest.raises(LedgerUnavailable) as err:
        list(client.tail("r"))
    assert "after 3 reconnects" in str(err.value) and "\n" not in str(err.value)
    # Backoff grows between attempts.
    assert sleeps == sorted(sleeps) and len(sleeps) == 3 and sleeps[0] < sleeps[-1]


def test_tail_reports_an_unknown_run_without_retrying() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(404, json={"error": "unknown run 'nope'"})

    with make_client(handler) as client, pytest.raises(NotFound) as err:
        list(client.tail("nope"))
    assert len(calls) == 1 and str(err.value) == "unknown run 'nope'"
    assert err.value.__notes__ == ["HTTP 404 from GET /v1/runs/nope/events/stream"]


ERROR_ANSWERS: list[tuple[int, dict[str, object], type[Exception]]] = [
    (400, {"error": "body: invalid JSON (EOF)"}, InvalidInput),
    (422, {"error": "events[0].type: must be a non-empty string"}, InvalidInput),
    (401, {"error": "missing or invalid bearer token"}, Unauthorized),
    (403, {"error": "this token may not read other runs"}, Unauthorized),
    (404, {"error": "unknown run 'r'"}, NotFound),
    (409, {"error": "stale producer attempt", "code": "stale_attempt", "producer_attempt": 3}, StaleAttempt),
    (
        409,
        {"error": "run r already ended", "code": "terminal", "terminal": {"status": "failed"}},
        RunTerminal,
    ),
    (409, {"error": "conflicts with stored data"}, Conflict),
    (410, {"error": "cursor expired", "first_seq": 40}, CursorExpired),
    (413, {"error": "body larger than 1048576 bytes"}, PayloadTooLarge),
]


@pytest.mark.parametrize(("status", "body", "expected"), ERROR_ANSWERS)
def test_error_answers_become_the_library_exceptions(
    status: int, body: dict[str, object], expected: type[Exception]
) -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(status, json=body)

    with make_client(handler) as client, pytest.raises(expected) as err:
        client.append_events("r", [{"type": "log", "line": "x"}])
    assert type(err.value) is expected
    assert str(err.value) == body["error"]
    assert len(calls) == 1  # the request's own fault: never retried
    if isinstance(err.value, InvalidInput) and status == 422:
        assert err.value.field == "events[0].type"
    if isinstance(err.value, StaleAttempt):
        assert err.value.current == 3 and err.value.run_id == "r"
    if isinstance(err.value, RunTerminal):
        assert err.value.terminal == {"status": "failed"} and err.value.run_id == "r"
    if isinstance(err.value, CursorExpired):
        assert err.value.first_seq == 40


def test_a_500_is_a_ledger_error_with_its_first_line() -> None:
    with (
        make_client(lambda r: httpx.Response(500, text="Internal Server Error\ntraceback...")) as client,
        pytest.raises(LedgerError) as err,
    ):
        client.get_run("plain")
    assert type(err.value) is LedgerError and str(err.value) == "Internal Server Error"
    assert err.value.__notes__ == ["HTTP 500 from GET /v1/runs/plain"]


def test_a_503_is_retried_after_retry_after_with_the_same_idempotency_key() -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) < 3:
            return httpx.Response(
                503, json={"error": "the database is unavailable"}, headers={"Retry-After": "2"}
            )
        return httpx.Response(200, json={"events": [{"seq": 1, "type": "log", "ts": 0, "line": "x"}]})

    sleeps: list[float] = []
    with make_client(handler, sleeps) as client:
        appended = client.append_events("r", [{"type": "log", "line": "x"}])
    assert [e["seq"] for e in appended] == [1]
    assert len(calls) == 3 and all(s >= 2 for s in sleeps) and len(sleeps) == 2
    keys = {request.headers["idempotency-key"] for request in calls}
    assert len(keys) == 1 and keys != {""}


def test_a_caller_key_is_sent_and_a_status_upload_gets_the_reporters_key() -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200, json={"recorded": 1, "duplicate": False})

    with make_client(handler) as client:
        client.record_sheet_rows("r", [], idempotency_key="mine")
        client.upload_status("r", {"upload_seq": 4, "producer_attempt": 2, "status": "running"})
        client.record_sheet_rows("r", [])
        client.record_sheet_rows("r", [])
    keys = [request.headers["idempotency-key"] for request in calls]
    assert keys[0] == "mine"
    # The reporter's format: the upload's place, then a part of its own (the run is in the path).
    assert re.fullmatch(r"2:4:[0-9a-f]{32}", keys[1])
    assert keys[2] != keys[3]  # two calls are two writes


@pytest.mark.parametrize("status", [408, 429])
def test_a_408_or_429_is_retried_as_an_outage_keeping_its_status(status: int) -> None:
    answers = [httpx.Response(status, json={"error": "slow down"}, headers={"Retry-After": "3"})] * 5
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return (
            answers[len(calls) - 1] if len(calls) <= len(answers) else httpx.Response(200, json={"runs": []})
        )

    sleeps: list[float] = []
    with make_client(handler, sleeps, max_reconnects=5) as client, pytest.raises(LedgerUnavailable) as err:
        client.list_runs()
    assert len(calls) == 4 and all(s >= 3 for s in sleeps)  # the default policy's four tries
    assert err.value.status == status and err.value.retry_after == 3.0


def mint_against(
    answers: list[httpx.Response | Exception],
) -> tuple[list[httpx.Request], BaseException | None]:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        answer = answers[len(calls) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    with make_client(handler) as client:
        try:
            client.mint_token("read")
        except (LedgerError, LedgerUnavailable) as exc:
            return calls, exc
    return calls, None


MINTED = httpx.Response(200, json={"token": "t", "scope": "read"})


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(httpx.Response(503, json={"error": "down"}), id="503"),
        pytest.param(httpx.Response(502, text="bad gateway"), id="502"),
        pytest.param(httpx.ReadTimeout("no answer"), id="read-timeout"),
        pytest.param(httpx.RemoteProtocolError("hung up"), id="hung-up"),
    ],
)
def test_minting_is_not_sent_again_when_the_service_may_have_handled_it(
    failure: httpx.Response | Exception,
) -> None:
    # Without an Idempotency-Key a second request would mint a second token.
    calls, error = mint_against([failure, MINTED])
    assert len(calls) == 1 and isinstance(error, LedgerUnavailable)
    assert "Idempotency-Key" not in calls[0].headers


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(httpx.ConnectError("refused"), id="never-connected"),
        pytest.param(httpx.ConnectTimeout("no route"), id="connect-timeout"),
        pytest.param(httpx.Response(429, json={"error": "slow down"}), id="429"),
        pytest.param(httpx.Response(408, json={"error": "too slow"}), id="408"),
    ],
)
def test_minting_is_sent_again_when_the_service_surely_did_not_handle_it(
    failure: httpx.Response | Exception,
) -> None:
    calls, error = mint_against([failure, MINTED])
    assert len(calls) == 2 and error is None


def test_a_413_names_the_limit_its_answer_gives() -> None:
    body = {"error": "body larger than 1048576 bytes", "max_body_bytes": 1_048_576}
    with (
        make_client(lambda r: httpx.Response(413, json=body)) as client,
        pytest.raises(PayloadTooLarge) as err,
    ):
        client.record_sheet_rows("r", [])
    assert err.value.max_body_bytes == 1_048_576


def test_a_retried_status_delivery_says_it_was_redelivered_and_the_answer_stays_the_service_s() -> None:
    upload = {"upload_seq": 1, "producer_attempt": 1, "status": "running"}

    def after_a_lost_answer() -> Handler:
        answers = [httpx.Response(503, json={"error": "down"}), httpx.Response(200, json={"duplicate": True})]
        return lambda r: answers.pop(0)

    with make_client(after_a_lost_answer()) as client:
        delivery = client.deliver_status("r", upload)
    assert delivery == StatusDelivery({"duplicate": True}, redelivered=True)  # type: ignore[typeddict-item]
    with make_client(lambda r: httpx.Response(200, json={"duplicate": True})) as client:
        assert client.deliver_status("r", upload).redelivered is False
    # The service's JSON as it came, with nothing added, however it was delivered.
    with make_client(after_a_lost_answer()) as client:
        assert client.upload_status("r", upload) == {"duplicate": True}


def test_a_status_upload_keeps_the_callers_key_scope() -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200, json={"duplicate": False})

    upload = {"upload_seq": 9, "producer_attempt": 3, "status": "running"}
    with make_client(handler) as client:
        client.upload_status("r", upload, key_scope="me")
        client.upload_status("r", upload, key_scope="me")
    assert [request.headers["idempotency-key"] for request in calls] == ["3:9:me", "3:9:me"]


def test_the_service_down_is_unavailable_after_the_retries_with_the_url() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("[Errno 111] Connection refused")

    sleeps: list[float] = []
    client = LedgerClient(
        BASE,
        "tok",
        transport=httpx.MockTransport(handler),
        sleep=sleeps.append,
        retry=RetryPolicy(max_attempts=3),
    )
    with client, pytest.raises(LedgerUnavailable) as err:
        client.list_runs()
    assert len(calls) == 3 and len(sleeps) == 2
    assert BASE in str(err.value) and "\n" not in str(err.value) and err.value.retry_after is None


def test_readyz_answers_its_503_body_instead_of_raising() -> None:
    body = {"error": "not ready: database down", "database": False, "listener": True}
    with make_client(lambda r: httpx.Response(503, json=body)) as client:
        assert client.readyz() == body


def test_iter_events_pages_until_latest_seq() -> None:
    seen_after = []

    def handler(request: httpx.Request) -> httpx.Response:
        after = request.url.params["after"]
        seen_after.append(after)
        start = 0 if after == "-1" else int(after)
        events = [
            {"seq": s, "type": "log", "ts": 0, "line": str(s)}
            for s in range(start + 1, min(start + 3, 5) + 1)
        ]
        return httpx.Response(200, json={"events": events, "latest_seq": 5, "first_seq": 1, "terminal": None})

    with make_client(handler) as client:
        assert [e["seq"] for e in client.iter_events("r")] == [1, 2, 3, 4, 5]
    assert seen_after == ["-1", "3"]


def test_a_long_poll_reads_longer_than_it_waits() -> None:
    timeouts = []

    def handler(request: httpx.Request) -> httpx.Response:
        timeouts.append(request.extensions["timeout"]["read"])
        return httpx.Response(200, json={"events": [], "latest_seq": 0, "first_seq": 1, "terminal": None})

    with make_client(handler) as client:
        client.list_events("r", timeout_ms=25_000)
        client.list_events("r")
    assert timeouts[0] > 25 > timeouts[1]


def test_url_and_token_come_from_the_environment(tmp_path: Path) -> None:
    env = {
        "LEDGER_URL": "http://h:9/",
        "LEDGER_API_TOKENS": "first, second",
        "LEDGER_DATA_DIR": str(tmp_path),
    }
    assert service_url(env) == "http://h:9"
    assert service_url({}) == "http://127.0.0.1:8787"
    with LedgerClient.from_env(env) as client:
        assert client.base_url == "http://h:9"
        assert client.http.headers["authorization"] == "Bearer first"
    with LedgerClient.from_env({**env, "LEDGER_TOKEN": "mine"}) as client:
        assert client.http.headers["authorization"] == "Bearer mine"


# -- a deadline instead of a count, and the first failure at once ---------------------------------


def test_a_policy_until_a_deadline_retries_past_the_count_and_tells_the_first_failure_once() -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) <= 6:
            return httpx.Response(503, json={"error": "the database is unavailable", "code": "unavailable"})
        return httpx.Response(200, json={"runs": [], "next_before": None})

    heard: list[Exception] = []
    sleeps: list[float] = []
    policy = RetryPolicy.until(1e9, heard.append)
    with LedgerClient(
        BASE, "tok", transport=httpx.MockTransport(handler), sleep=sleeps.append, retry=policy
    ) as client:
        assert client.runs_page() == {"runs": [], "next_before": None}
    # Seven tries: past the default policy's count of four.
    assert len(calls) == 7 and RetryPolicy().max_attempts == 4
    assert len(heard) == 1 and isinstance(heard[0], LedgerUnavailable)
    assert "database is unavailable" in str(heard[0])


def test_no_time_to_retry_means_one_try_and_no_first_failure_notice() -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("connection refused")

    heard: list[Exception] = []
    with (
        LedgerClient(
            BASE,
            "tok",
            transport=httpx.MockTransport(handler),
            sleep=lambda s: None,
            retry=RetryPolicy.until(0, heard.append),
        ) as client,
        pytest.raises(LedgerUnavailable, match=re.escape(f"cannot reach the ledger service at {BASE}")),
    ):
        client.runs_page()
    assert len(calls) == 1 and heard == []


def test_a_tail_under_a_deadline_reconnects_until_the_deadline_not_the_count() -> None:
    now = [0.0]
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(503, json={"error": "down", "code": "unavailable"})

    def sleep(seconds: float) -> None:
        now[0] += seconds

    # The policy's clock is the tail's too: the deadline counts on it.
    policy = RetryPolicy(max_attempts=None, max_total_s=10.0, clock=lambda: now[0])
    with (
        LedgerClient(
            BASE, "tok", transport=httpx.MockTransport(handler), sleep=sleep, retry=policy, max_reconnects=2
        ) as client,
        pytest.raises(LedgerUnavailable, match="lost the event stream of run r"),
    ):
        list(client.tail("r"))
    assert len(calls) > 2 + 1  # more reconnects than max_reconnects
    assert 0 < now[0] <= 10


def test_a_tail_tells_its_first_failure_once_naming_the_service() -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) <= 2:
            raise httpx.ConnectError("connection refused")
        return stream_response([sse(1, "terminal", status="completed")])

    heard: list[Exception] = []
    policy = RetryPolicy.until(60, heard.append)
    with LedgerClient(
        BASE, "tok", transport=httpx.MockTransport(handler), sleep=lambda s: None, retry=policy
    ) as client:
        assert [e["seq"] for e in client.tail("r")] == [1]
    assert len(heard) == 1 and "cannot reach the ledger service at http://ledger.test" in str(heard[0])


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("7", 7.0),
        (None, None),
        ("soon", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # a date gone by: no wait
    ],
)
def test_retry_after_is_read_as_seconds_or_a_date(header: str | None, seconds: float | None) -> None:
    headers = {} if header is None else {"Retry-After": header}
    answer = httpx.Response(503, json={"error": "busy", "code": "busy"}, headers=headers)
    with (
        make_client(lambda r: answer, retry=RetryPolicy(max_attempts=1)) as client,
        pytest.raises(LedgerUnavailable) as err,
    ):
        client.get_run("r")
    assert err.value.retry_after == seconds


def test_retry_after_as_a_date_to_come_is_the_seconds_until_it() -> None:
    in_an_hour = email.utils.formatdate(time.time() + 3600, usegmt=True)
    answer = httpx.Response(503, json={"error": "busy"}, headers={"Retry-After": in_an_hour})
    with (
        make_client(lambda r: answer, retry=RetryPolicy(max_attempts=1)) as client,
        pytest.raises(LedgerUnavailable) as err,
    ):
        client.get_run("r")
    # The header's resolution is a second; the margin is the test's own time.
    assert err.value.retry_after is not None and 3000 < err.value.retry_after <= 3600


async def test_a_policy_runs_work_that_spans_requests_until_its_deadline_on_its_clock() -> None:
    now = [0.0]
    tries: list[float] = []
    heard: list[tuple[str, float]] = []

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    async def down() -> None:
        tries.append(now[0])
        raise LedgerUnavailable("down")

    policy = RetryPolicy(max_attempts=None, max_total_s=10.0, clock=lambda: now[0])
    with pytest.raises(LedgerUnavailable):
        await policy.run(down, sleep, before_retry=lambda exc, wait: heard.append((str(exc), wait)))
    # Tried again and again, and no wait started that would have ended past the deadline.
    assert len(tries) > 2 and tries[-1] <= 10.0
    assert len(heard) == len(tries) - 1 and all(text == "down" for text, _ in heard)
    assert now[0] == pytest.approx(sum(wait for _, wait in heard))

    async def refused() -> None:
        tries.append(now[0])
        raise Conflict("no")

    tries.clear()
    with pytest.raises(Conflict):
        await policy.run(refused, sleep)
    assert len(tries) == 1  # a refusal is final


async def test_a_policy_run_returns_what_the_work_returns_once_it_succeeds() -> None:
    answers: list[object] = [LedgerUnavailable("blip", 2.0), "done"]
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async def work() -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert await RetryPolicy().run(work, sleep) == "done"
    assert sleeps and sleeps[0] >= 2.0  # the Retry-After is the minimum wait


# -- a caller's deadline, passed down ---------------------------------------------------------------


def test_within_a_deadline_block_a_call_is_tried_past_the_count_until_the_deadline_never_past_it() -> None:
    now = [0.0]
    calls: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(now[0])
        return httpx.Response(503, json={"error": "down", "code": "unavailable"})

    def sleep(seconds: float) -> None:
        now[0] += seconds

    policy = RetryPolicy(max_attempts=2, max_total_s=1.0, clock=lambda: now[0])
    with make_client(handler, sleep=sleep, retry=policy) as client:
        with pytest.raises(LedgerUnavailable):
            client.get_run("r")
        assert len(calls) == 2  # the policy's own count, outside a block
        calls.clear()
        started = now[0]
        with client.deadline(30.0), pytest.raises(LedgerUnavailable):
            client.get_run("r")
        # Neither the count of two nor the total of one second: the caller's 30 s, never past them.
        assert len(calls) > 2 and now[0] - started > 1.0
        assert calls[-1] - started <= 30.0 and now[0] - started <= 30.0
        assert client.retry is policy  # the client's own policy again after the block


def test_a_deadline_block_passes_its_time_down_to_the_calls_made_later_in_it() -> None:
    now = [0.0]
    calls: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(now[0])
        return httpx.Response(503, json={"error": "down"})

    def sleep(seconds: float) -> None:
        now[0] += seconds

    policy = RetryPolicy(clock=lambda: now[0])
    with (
        make_client(handler, sleep=sleep, retry=policy) as client,
        client.deadline(10.0),
    ):
        with pytest.raises(LedgerUnavailable):
            client.get_run("r")
        spent = now[0]
        calls.clear()
        # A second call in the same block has only what the first left of the ten seconds.
        with pytest.raises(LedgerUnavailable):
            client.get_run("r")
        assert now[0] <= 10.0 and len(calls) >= 1
        assert spent > 0


def test_a_refusal_is_final_within_a_deadline_block() -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(409, json={"error": "run r is on attempt 3", "code": "stale_attempt"})

    with make_client(handler) as client, client.deadline(None), pytest.raises(StaleAttempt):
        client.upload_status("r", {"upload_seq": 1, "producer_attempt": 1, "status": "running"})
    assert len(calls) == 1
