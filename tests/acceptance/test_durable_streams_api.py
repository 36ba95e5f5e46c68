"""Durable Streams at /v1/stream/{name} against the real service: create, append, catch-up, long-poll
wake-up and timeout, SSE, close, idempotent producers, forks, auth, and runs read as streams."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.acceptance.conftest import Server, new_id, start_server, stop_server

LONG_POLL_S = 1
ZERO = "0000000000000000_0000000000000000"


@pytest.fixture(scope="module")
def streams_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(
        database_url,
        tmp_path_factory.mktemp("streams-api"),
        LEDGER_STREAM_LONG_POLL_S=str(LONG_POLL_S),
        LEDGER_STREAM_SSE_MAX_S="30",
        LEDGER_WATCHDOG="0",
        # Longer than the clients' own keep-alive (undici 4 s, httpx 5 s), so a loaded machine never
        # has the server close an idle connection just as the client reuses it.
        LEDGER_KEEPALIVE_TIMEOUT_S="30",
    )
    yield running
    stop_server(running)


@pytest.fixture
def http(streams_server: Server) -> Iterator[httpx.Client]:
    with streams_server.client(timeout=30) as client:
        yield client


def url(name: str) -> str:
    return f"/v1/stream/{name}"


def sse_events(text: str) -> list[tuple[str, str]]:
    """(event, data) pairs; multi-line data joined with newlines as EventSource does."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        kind, data = "", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if kind:
            events.append((kind, "\n".join(data)))
    return events


def read_sse_until(client: httpx.Client, path: str, stop: str) -> list[tuple[str, str]]:
    """Read an SSE answer until `stop` has come and a control event after it (then drop the
    connection)."""
    text = ""
    with client.stream("GET", path) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"] == "text/event-stream"
        for chunk in response.iter_text():
            text += chunk
            if text.rfind("event: control") > text.find(stop) >= 0 and text.endswith("\n\n"):
                break
    return sse_events(text)


def test_bytes_round_trip_exactly_without_repair(http: httpx.Client) -> None:
    name = new_id("bytes")
    every_byte = bytes(range(256)) + b"\x00\xff\xfe bad \xed\xa0\x80 surrogate"
    created = http.put(url(name), headers={"Content-Type": "application/octet-stream"}, content=b"head:")
    assert created.status_code == 201
    appended = http.post(url(name), headers={"Content-Type": "application/octet-stream"}, content=every_byte)
    assert appended.status_code == 204
    read = http.get(url(name))
    assert read.status_code == 200
    assert read.content == b"head:" + every_byte
    assert read.headers["Stream-Next-Offset"] == appended.headers["Stream-Next-Offset"]
    assert read.headers["Stream-Up-To-Date"] == "true"
    # Reading from the offset after the first append gives exactly the second.
    rest = http.get(url(name), params={"offset": created.headers["Stream-Next-Offset"]})
    assert rest.content == every_byte


def test_create_is_idempotent_for_the_same_config_and_409_otherwise(http: httpx.Client) -> None:
    name = new_id("cfg")
    assert http.put(url(name), headers={"Content-Type": "text/plain", "Stream-TTL": "600"}).status_code == 201
    assert http.put(url(name), headers={"Content-Type": "text/plain", "Stream-TTL": "600"}).status_code == 200
    assert http.put(url(name), headers={"Content-Type": "text/plain", "Stream-TTL": "60"}).status_code == 409
    assert http.put(url(name), headers={"Content-Type": "application/json"}).status_code == 409
    head = http.head(url(name))
    assert head.status_code == 200
    assert head.headers["Stream-TTL"] == "600"


def test_json_mode_flattens_one_level(http: httpx.Client) -> None:
    name = new_id("json")
    assert http.put(url(name), headers={"Content-Type": "application/json"}).status_code == 201
    headers = {"Content-Type": "application/json"}
    assert http.post(url(name), headers=headers, content=b'{"a":1}').status_code == 204
    assert http.post(url(name), headers=headers, content=b'[[1,2],{"b":2}]').status_code == 204
    assert http.post(url(name), headers=headers, content=b"[]").status_code == 400
    assert http.post(url(name), headers=headers, content=b"{nope").status_code == 400
    assert http.get(url(name)).json() == [{"a": 1}, [1, 2], {"b": 2}]


def test_bad_offsets_are_400_and_unknown_streams_404(http: httpx.Client) -> None:
    name = new_id("offsets")
    http.put(url(name), headers={"Content-Type": "text/plain"}, content=b"x")
    for bad in ("", "abc", "1,2", "0000000000000000_000000000000000x"):
        assert http.get(url(name), params={"offset": bad}).status_code == 400, bad
    assert http.get(url(new_id("missing"))).status_code == 404
    assert (
        http.post(url(new_id("missing")), headers={"Content-Type": "text/plain"}, content=b"x").status_code
        == 404
    )


def test_long_poll_is_woken_by_an_append(http: httpx.Client, streams_server: Server) -> None:
    name = new_id("wake")
    created = http.put(url(name), headers={"Content-Type": "text/plain"}, content=b"before ")
    tail = created.headers["Stream-Next-Offset"]
    answers: list[httpx.Response] = []

    def poll() -> None:
        with streams_server.client(timeout=30) as client:
            # The server's long-poll is short here, so poll again until data comes.
            for _ in range(20):
                answer = client.get(url(name), params={"offset": tail, "live": "long-poll"})
                answers.append(answer)
                if answer.status_code == 200:
                    return

    poller = threading.Thread(target=poll)
    poller.start()
    http.post(url(name), headers={"Content-Type": "text/plain"}, content=b"after")
    poller.join(60)
    assert answers and answers[-1].status_code == 200
    assert answers[-1].content == b"after"
    assert answers[-1].headers["Stream-Cursor"].isdigit()


def test_long_poll_times_out_with_204_and_the_tail(http: httpx.Client) -> None:
    name = new_id("timeout")
    created = http.put(url(name), headers={"Content-Type": "text/plain"}, content=b"data")
    answer = http.get(url(name), params={"offset": "now", "live": "long-poll"})
    assert answer.status_code == 204
    assert answer.headers["Stream-Up-To-Date"] == "true"
    assert answer.headers["Stream-Next-Offset"] == created.headers["Stream-Next-Offset"]


def test_sse_sends_data_then_control_and_follows_appends(http: httpx.Client, streams_server: Server) -> None:
    name = new_id("sse")
    http.put(url(name), headers={"Content-Type": "text/plain"}, content=b"line one\nline two")
    text = ""
    appended = False
    with (
        streams_server.client(timeout=30) as client,
        client.stream("GET", url(name) + "?offset=-1&live=sse") as sse,
    ):
        assert sse.headers["content-type"] == "text/event-stream"
        for chunk in sse.iter_text():
            text += chunk
            if not appended and '"upToDate":true' in text:
                # Caught up: what comes now must arrive live.
                http.post(url(name), headers={"Content-Type": "text/plain"}, content=b"third")
                appended = True
            if (
                appended
                and text.rfind("event: control") > text.find("data:third") >= 0
                and text.endswith("\n\n")
            ):
                break
    events = sse_events(text)
    data = [d for kind, d in events if kind == "data"]
    assert data == ["line one\nline two", "third"]
    controls = [json.loads(d) for kind, d in events if kind == "control"]
    assert controls[0]["streamNextOffset"] > ZERO
    assert controls[-1]["streamNextOffset"] > controls[0]["streamNextOffset"]


def test_sse_of_binary_streams_is_base64(http: httpx.Client, streams_server: Server) -> None:
    name = new_id("sse-bin")
    http.put(url(name), headers={"Content-Type": "application/octet-stream"}, content=b"\x00\x01\xff")
    http.post(url(name), headers={"Stream-Closed": "true"})
    with streams_server.client(timeout=30) as client:
        events = read_sse_until(client, url(name) + "?offset=-1&live=sse", "streamClosed")
    data = [d for kind, d in events if kind == "data"]
    assert base64.b64decode(data[0]) == b"\x00\x01\xff"


def test_close_refuses_appends_and_ends_reads(http: httpx.Client) -> None:
    name = new_id("close")
    http.put(url(name), headers={"Content-Type": "text/plain"}, content=b"all")
    closed = http.post(url(name), headers={"Stream-Closed": "true"})
    assert closed.status_code == 204
    assert closed.headers["Stream-Closed"] == "true"
    refused = http.post(url(name), headers={"Content-Type": "text/plain"}, content=b"more")
    assert refused.status_code == 409
    assert refused.headers["Stream-Closed"] == "true"
    tail = closed.headers["Stream-Next-Offset"]
    at_end = http.get(url(name), params={"offset": tail, "live": "long-poll"})
    assert at_end.status_code == 204
    assert at_end.headers["Stream-Closed"] == "true"
    assert http.get(url(name)).content == b"all"


def test_idempotent_producer_writes_each_batch_once(http: httpx.Client) -> None:
    name = new_id("producer")
    http.put(url(name), headers={"Content-Type": "text/plain"})

    def send(epoch: int, seq: int, body: bytes) -> httpx.Response:
        headers = {
            "Content-Type": "text/plain",
            "Producer-Id": "p1",
            "Producer-Epoch": str(epoch),
            "Producer-Seq": str(seq),
        }
        return http.post(url(name), headers=headers, content=body)

    assert send(0, 0, b"a").status_code == 200
    assert send(0, 1, b"b").status_code == 200
    retry = send(0, 1, b"b")
    assert retry.status_code == 204
    assert retry.headers["Producer-Seq"] == "1"
    gap = send(0, 3, b"d")
    assert gap.status_code == 409
    assert gap.headers["Producer-Expected-Seq"] == "2"
    assert send(1, 0, b"c").status_code == 200
    stale = send(0, 2, b"zombie")
    assert stale.status_code == 403
    assert stale.headers["Producer-Epoch"] == "1"
    assert http.get(url(name)).content == b"abc"


def test_fork_reads_its_source_up_to_the_fork_offset(http: httpx.Client) -> None:
    source, fork = new_id("src"), new_id("fork")
    first = http.put(url(source), headers={"Content-Type": "text/plain"}, content=b"first ")
    http.post(url(source), headers={"Content-Type": "text/plain"}, content=b"second")
    forked = http.put(
        url(fork),
        headers={
            "Content-Type": "text/plain",
            "Stream-Forked-From": url(source),
            "Stream-Fork-Offset": first.headers["Stream-Next-Offset"],
        },
    )
    assert forked.status_code == 201
    http.post(url(fork), headers={"Content-Type": "text/plain"}, content=b"own")
    assert http.get(url(fork)).content == b"first own"
    assert http.get(url(source)).content == b"first second"
    # The source, deleted, stays readable through its fork but is gone itself.
    assert http.delete(url(source)).status_code == 204
    assert http.get(url(source)).status_code == 410
    assert http.get(url(fork)).content == b"first own"


def test_every_stream_request_needs_the_token(streams_server: Server) -> None:
    name = new_id("auth")
    with httpx.Client(base_url=streams_server.base_url) as anonymous:
        assert anonymous.put(url(name), headers={"Content-Type": "text/plain"}).status_code == 401
        assert anonymous.get(url(name)).status_code == 401
        refused = anonymous.get(url("runs/" + name))
        assert refused.status_code == 401
        assert refused.headers["X-Content-Type-Options"] == "nosniff"


# -- runs as streams --------------------------------------------------------------------------


def _run_with_events(http: httpx.Client, count: int) -> str:
    run_id = new_id("run")
    assert http.post("/v1/runs", json={"run_id": run_id}).status_code in (200, 201)
    events: list[dict[str, Any]] = [{"type": "log", "line": f"line {i}"} for i in range(count)]
    assert http.post(f"/v1/runs/{run_id}/events", json={"events": events}).status_code in (200, 201)
    return run_id


def test_a_run_reads_as_a_json_stream_with_offsets_mapping_to_seq(http: httpx.Client) -> None:
    run_id = _run_with_events(http, 3)
    read = http.get(url(f"runs/{run_id}"), params={"offset": "-1"})
    assert read.status_code == 200
    assert read.headers["content-type"] == "application/json"
    events = read.json()
    assert [e["seq"] for e in events] == [1, 2, 3]
    assert [e["line"] for e in events] == ["line 0", "line 1", "line 2"]
    assert read.headers["Stream-Next-Offset"] == f"{0:016d}_{3:016d}"
    assert "Stream-Closed" not in read.headers
    after_one = http.get(url(f"runs/{run_id}"), params={"offset": f"{0:016d}_{1:016d}"})
    assert [e["seq"] for e in after_one.json()] == [2, 3]


def test_a_run_stream_resumes_exactly_after_a_dropped_connection_and_closes_at_terminal(
    http: httpx.Client, streams_server: Server
) -> None:
    run_id = _run_with_events(http, 2)
    stream = url(f"runs/{run_id}")
    # A tail that reads two events, then drops its connection.
    with streams_server.client(timeout=30) as client:
        first = read_sse_until(client, stream + "?offset=-1&live=sse", '"seq":2')
    controls = [json.loads(d) for kind, d in first if kind == "control"]
    resume_at = controls[-1]["streamNextOffset"]
    assert resume_at == f"{0:016d}_{2:016d}"
    more = [{"type": "log", "line": "line 2"}]
    http.post(f"/v1/runs/{run_id}/events", json={"events": more})
    http.put(f"/v1/runs/{run_id}/terminal", json={"status": "completed"})
    with streams_server.client(timeout=30) as client:
        second = read_sse_until(client, f"{stream}?offset={resume_at}&live=sse", "streamClosed")
    seqs = [e["seq"] for kind, d in second if kind == "data" for e in json.loads(d)]
    assert seqs[0] == 3
    assert seqs == sorted(set(seqs))
    types = [e["type"] for kind, d in second if kind == "data" for e in json.loads(d)]
    assert types[-1] == "terminal"
    assert json.loads([d for kind, d in second if kind == "control"][-1])["streamClosed"] is True
    end = http.get(stream, params={"offset": "-1"})
    assert end.headers["Stream-Closed"] == "true"


def test_a_run_stream_long_poll_is_woken_by_the_run_log(http: httpx.Client, streams_server: Server) -> None:
    run_id = _run_with_events(http, 1)
    answers: list[httpx.Response] = []

    def poll() -> None:
        with streams_server.client(timeout=30) as client:
            for _ in range(20):
                answer = client.get(
                    url(f"runs/{run_id}"), params={"offset": f"{0:016d}_{1:016d}", "live": "long-poll"}
                )
                answers.append(answer)
                if answer.status_code == 200:
                    return

    poller = threading.Thread(target=poll)
    poller.start()
    http.post(f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": "woken"}]})
    poller.join(60)
    assert answers[-1].status_code == 200
    assert [e["line"] for e in answers[-1].json()] == ["woken"]


def test_a_run_stream_is_read_only(http: httpx.Client) -> None:
    run_id = _run_with_events(http, 1)
    stream = url(f"runs/{run_id}")
    assert http.post(stream, headers={"Content-Type": "application/json"}, content=b"{}").status_code == 405
    assert http.put(stream, headers={"Content-Type": "application/json"}).status_code == 405
    assert http.delete(stream).status_code == 405
    assert http.get(url(f"runs/{new_id('nope')}")).status_code == 404


def test_stream_payloads_are_bytes_not_checked_as_json(http: httpx.Client) -> None:
    # Brackets nested far past the API's JSON depth limit: for a byte stream they are just bytes.
    name = new_id("deep")
    deep = b"[" * 200 + b"]" * 200
    assert http.put(url(name), headers={"Content-Type": "text/plain"}, content=deep).status_code == 201
    assert http.post(url(name), headers={"Content-Type": "text/plain"}, content=deep).status_code == 204
    assert http.get(url(name)).content == deep * 2
