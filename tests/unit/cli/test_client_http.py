"""The CLI's HTTP client: one-line errors, paging, and the SSE tail that resumes after a drop.

The service is replaced by `httpx.MockTransport` (the transport is httpx's test seam); sleeping is
injected, so nothing here waits for real.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import httpx
import pytest

from ledger.cli.client_http import ServiceClient, ServiceError, client_from_env, service_url

BASE = "http://ledger.test"


def sse(seq: int, type_: str, **fields: object) -> bytes:
    data = json.dumps({"seq": seq, "type": type_, "ts": 0, **fields})
    return f"id: {seq}\nevent: {type_}\ndata: {data}\n\n".encode()


class Dropping(httpx.SyncByteStream):
    """An SSE body that sends its chunks and then loses the connection."""

    def __init__(self, chunks: list[bytes], *, drop: bool) -> None:
        self.chunks = chunks
        self.drop = drop

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if self.drop:
            raise httpx.ReadError("connection reset by peer")


def stream_response(chunks: list[bytes], *, drop: bool = False) -> httpx.Response:
    return httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=Dropping(chunks, drop=drop)
    )


def make_client(
    handler: Callable[[httpx.Request], httpx.Response], sleeps: list[float] | None = None, **kw: int
) -> ServiceClient:
    record = sleeps if sleeps is not None else []
    return ServiceClient(BASE, "tok", transport=httpx.MockTransport(handler), sleep=record.append, **kw)


def test_tail_resumes_after_a_dropped_connection_with_last_event_id() -> None:
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        if len(requests) == 1:
            return stream_response(
                [b": keep-alive\n\n", sse(1, "status", status="running"), sse(2, "log", line="a")], drop=True
            )
        if len(requests) == 2:
            return stream_response([sse(3, "log", line="b")])  # ends cleanly, yet no terminal: resume
        return stream_response([sse(4, "terminal", status="completed"), sse(5, "log", line="never read")])

    sleeps: list[float] = []
    with make_client(handler, sleeps) as client:
        seqs = [e["seq"] for e in client.tail("run/1", after="-1")]
    assert seqs == [1, 2, 3, 4]
    assert requests[0].url.raw_path.split(b"?")[0] == b"/v1/runs/run%2F1/events/stream"
    assert requests[0].url.params["after"] == "-1" and "last-event-id" not in requests[0].headers
    assert requests[1].headers["last-event-id"] == "2" and "after" not in requests[1].url.params
    assert requests[2].headers["last-event-id"] == "3"
    assert all(r.headers["authorization"] == "Bearer tok" for r in requests)
    assert len(sleeps) == 2


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


def test_tail_gives_up_after_repeated_failures_with_one_line() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    sleeps: list[float] = []
    with make_client(handler, sleeps, max_reconnects=3) as client, pytest.raises(ServiceError) as err:
        list(client.tail("r"))
    assert "after 3 reconnects" in str(err.value) and "\n" not in str(err.value)
    # Backoff grows between attempts.
    assert sleeps == sorted(sleeps) and len(sleeps) == 3 and sleeps[0] < sleeps[-1]


def test_tail_reports_an_unknown_run_without_retrying() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(404, json={"error": "unknown run 'nope'"})

    with (
        make_client(handler) as client,
        pytest.raises(ServiceError, match=r"unknown run 'nope' \(HTTP 404\)"),
    ):
        list(client.tail("nope"))
    assert len(calls) == 1


def test_errors_are_one_line_naming_the_cause() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/runs/missing":
            return httpx.Response(404, json={"error": "unknown run 'missing'"})
        if request.url.path == "/v1/runs/plain":
            return httpx.Response(500, text="Internal Server Error\ntraceback...")
        return httpx.Response(401, json={"error": "missing or invalid bearer token"})

    with make_client(handler) as client:
        with pytest.raises(ServiceError, match=r"^unknown run 'missing' \(HTTP 404\)$"):
            client.get("/v1/runs/missing")
        with pytest.raises(ServiceError, match=r"^Internal Server Error \(HTTP 500\)$"):
            client.get("/v1/runs/plain")
        with pytest.raises(ServiceError, match="refused the API token"):
            client.get("/v1/runs")


def test_service_down_is_one_line_with_the_url() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused")

    with make_client(handler) as client, pytest.raises(ServiceError) as err:
        client.get("/v1/runs")
    message = str(err.value)
    assert BASE in message and "ledger serve" in message and "\n" not in message


def test_events_pages_until_latest_seq() -> None:
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
        assert [e["seq"] for e in client.events("r")] == [1, 2, 3, 4, 5]
    assert seen_after == ["-1", "3"]


def test_url_and_token_come_from_the_environment(tmp_path: object) -> None:
    env = {
        "LEDGER_URL": "http://h:9/",
        "LEDGER_API_TOKENS": "first, second",
        "LEDGER_DATA_DIR": str(tmp_path),
    }
    assert service_url(env) == "http://h:9"
    assert service_url({}) == "http://127.0.0.1:8787"
    with client_from_env(environ=env) as client:
        assert client.base_url == "http://h:9"
        assert client._client.headers["authorization"] == "Bearer first"
    with client_from_env(environ={**env, "LEDGER_TOKEN": "mine"}) as client:
        assert client._client.headers["authorization"] == "Bearer mine"
