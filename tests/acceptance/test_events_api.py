"""Long-poll and SSE tail through the real service: wake-ups, cursors, retention, resume."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from tests.acceptance import rawhttp, sse
from tests.acceptance.conftest import Server, new_id, start_server, stop_server

RETAINED = 20
POOL_SIZE = 4


@pytest.fixture(scope="module")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """This module's service keeps only a few events per run, so cursors can expire."""
    running = start_server(
        database_url,
        tmp_path_factory.mktemp("serve-events"),
        LEDGER_MAX_EVENTS_PER_RUN=str(RETAINED),
        LEDGER_DB_POOL_SIZE=str(POOL_SIZE),
    )
    yield running
    stop_server(running)


def open_run(client: httpx.Client) -> str:
    run_id = new_id("run")
    assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200
    return run_id


def append(client: httpx.Client, run_id: str, *lines: str) -> list[int]:
    answer = client.post(
        f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": x} for x in lines]}
    )
    assert answer.status_code == 200, answer.text
    return [e["seq"] for e in answer.json()["events"]]


def test_list_pages_from_a_cursor(client: httpx.Client) -> None:
    run_id = open_run(client)
    append(client, run_id, "a", "b", "c")
    page = client.get(f"/v1/runs/{run_id}/events", params={"after": 1}).json()
    assert [e["line"] for e in page["events"]] == ["b", "c"]
    assert (page["latest_seq"], page["first_seq"], page["terminal"]) == (3, 1, None)
    everything = client.get(f"/v1/runs/{run_id}/events", params={"after": -1, "limit": 2}).json()
    assert [e["seq"] for e in everything["events"]] == [1, 2]
    assert client.get(f"/v1/runs/{run_id}/events", params={"after": "now"}).json()["events"] == []


def test_bad_cursors_and_unknown_runs(client: httpx.Client) -> None:
    run_id = open_run(client)
    bad = client.get(f"/v1/runs/{run_id}/events", params={"after": "yesterday"})
    assert bad.status_code == 422
    assert bad.json()["error"].startswith("after: ")
    assert client.get(f"/v1/runs/{run_id}/events", params={"timeout_ms": "soon"}).status_code == 422
    assert client.get(f"/v1/runs/{new_id('none')}/events").status_code == 404
    assert client.get(f"/v1/runs/{new_id('none')}/events/stream").status_code == 404


def test_a_cursor_behind_retention_is_410_with_first_seq(client: httpx.Client) -> None:
    run_id = open_run(client)
    append(client, run_id, *[f"line {n}" for n in range(RETAINED + 5)])
    expired = client.get(f"/v1/runs/{run_id}/events", params={"after": 1})
    assert expired.status_code == 410
    assert expired.json()["first_seq"] == 6
    assert "first_seq=6" in expired.json()["error"]
    resumed = client.get(f"/v1/runs/{run_id}/events", params={"after": 5}).json()
    assert resumed["events"][0]["seq"] == 6
    stream = client.get(f"/v1/runs/{run_id}/events/stream", headers={"Last-Event-ID": "2"})
    assert stream.status_code == 410


async def test_long_poll_wakes_on_an_append_by_another_client(server: Server, client: httpx.Client) -> None:
    run_id = open_run(client)
    append(client, run_id, "before")
    async with server.async_client() as reader:
        waiting = asyncio.create_task(
            reader.get(f"/v1/runs/{run_id}/events", params={"after": 1, "timeout_ms": 25_000})
        )
        await wait_for_waiters(server, 1)
        assert not waiting.done()
        async with server.async_client() as writer:
            await writer.post(f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": "wake"}]})
        page = (await waiting).json()
    # A timeout would answer an empty page: the event proves the append woke the reader.
    assert [e["line"] for e in page["events"]] == ["wake"]


def metric_value(text: str, name: str) -> float:
    """The value of an unlabelled sample in a /metrics body."""
    return float(next(x for x in text.splitlines() if x.startswith(name + " ")).split()[1])


async def wait_for_waiters(server: Server, count: int, *, at_most: bool = False) -> None:
    """Until the service reports at least (or with `at_most`, at most) `count` waiting readers."""
    async with server.async_client() as probe:
        for _ in range(600):
            waiting = metric_value((await probe.get("/metrics")).text, "ledger_waiters")
            if (waiting <= count) if at_most else (waiting >= count):
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"the waiter count never reached {'at most' if at_most else 'at least'} {count}")


def server_connections(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name LIKE 'run-ledger%%' AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_thousand_long_polls_hold_no_database_connection(
    server: Server, client: httpx.Client, database_url: str
) -> None:
    run_id = open_run(client)
    readers = 1000
    before = server_connections(database_url)
    path = f"/v1/runs/{run_id}/events?after=0&timeout_ms=30000"
    unavailable: list[Any] = []

    async def poll() -> tuple[int, Any]:
        # A client of ours retries a 503 (the answer to a fault or an overload, such as this
        # burst on a loaded machine) with the same cursor; the event is there for the retry too.
        while True:
            status, body = await rawhttp.get_json(server.base_url, path, server.token)
            if status != 503:
                return status, body
            unavailable.append(body)
            await asyncio.sleep(0.1)

    polls = [asyncio.create_task(poll()) for _ in range(readers)]
    await wait_for_waiters(server, readers)
    # At most the pool's size more than before (other servers may share this database), however many
    # wait: waiting holds no connection.
    assert server_connections(database_url) <= before + POOL_SIZE
    async with server.async_client() as writer:
        await writer.post(
            f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": "everyone wakes"}]}
        )
    answers = await asyncio.gather(*polls)
    refused = sorted({(status, str(body)[:200]) for status, body in answers if status != 200})
    assert not refused
    assert all([e["line"] for e in body["events"]] == ["everyone wakes"] for _, body in answers)
    assert all(body["code"] == "unavailable" for body in unavailable)


async def read_stream(
    http: httpx.AsyncClient,
    url: str,
    received: list[sse.Message],
    *,
    stop_after: int | None = None,
    **kw: object,
) -> int:
    """Read messages into `received` until the stream ends (or `stop_after` events); the status."""
    async with http.stream("GET", url, **kw) as response:  # type: ignore[arg-type]
        if response.status_code != 200:
            return response.status_code
        assert response.headers["content-type"].startswith("text/event-stream")
        count = 0
        async for message in sse.messages(response):
            received.append(message)
            if message.id is not None:
                count += 1
                if stop_after is not None and count >= stop_after:
                    break
        return response.status_code


async def test_sse_replays_then_ends_after_the_terminal_event(server: Server, client: httpx.Client) -> None:
    run_id = open_run(client)
    append(client, run_id, "one", "two")
    received: list[sse.Message] = []
    async with server.async_client() as http:
        await http.put(f"/v1/runs/{run_id}/terminal", json={"status": "completed"})
        assert await read_stream(http, f"/v1/runs/{run_id}/events/stream", received) == 200
        events = [m for m in received if m.id is not None]
        assert [(m.id, m.event) for m in events] == [("1", "log"), ("2", "log"), ("3", "terminal")]
        assert events[0].json == {**events[0].json, "seq": 1, "type": "log", "line": "one"}
        # Reconnecting to a finished run with nothing newer: 204 stops an EventSource.
        finished = await http.get(f"/v1/runs/{run_id}/events/stream", headers={"Last-Event-ID": "3"})
        assert finished.status_code == 204


async def event_reads(server: Server) -> float:
    async with server.async_client() as probe:
        return metric_value((await probe.get("/metrics")).text, "ledger_event_reads_total")


@pytest.fixture(scope="module")
def quiet_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A service whose idle tails send no keep-alive during a test: each keep-alive ends a tail's
    wait, and the read before its next wait would count among the reads a wake-up made (the tails'
    keep-alives fall apart in time on a loaded machine, so those reads are not shared)."""
    running = start_server(database_url, tmp_path_factory.mktemp("serve-quiet"), LEDGER_SSE_KEEPALIVE_S="600")
    yield running
    stop_server(running)


async def test_sse_tails_of_one_run_share_their_reads_after_a_wake_up(quiet_server: Server) -> None:
    # Every tail of a run wakes at the same cursor, so the read that follows a wake-up is the same
    # for all: it is made once per wake-up, not once per tail.
    server = quiet_server
    with server.client() as client:
        run_id = open_run(client)
    tails = 40
    woken: list[asyncio.Event] = [asyncio.Event() for _ in range(tails)]

    async def tail(index: int) -> None:
        async for message in sse.messages(streams[index]):
            if message.event == "log":
                woken[index].set()

    limits = httpx.Limits(max_connections=tails + 5)
    async with server.async_client(limits=limits, timeout=60) as http, contextlib.AsyncExitStack() as stack:
        streams = [
            await stack.enter_async_context(http.stream("GET", f"/v1/runs/{run_id}/events/stream?after=0"))
            for _ in range(tails)
        ]
        readers = [asyncio.create_task(tail(index)) for index in range(tails)]
        await wait_for_waiters(server, tails)
        before = await event_reads(server)
        with server.client() as client:
            append(client, run_id, "everyone wakes")
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in woken)), 60)
        await wait_for_waiters(server, tails)  # every tail waits again, past its read
        reads = await event_reads(server) - before
        for reader in readers:
            reader.cancel()
    assert 1 <= reads <= tails / 4


async def test_sse_sends_keep_alive_comments_while_idle(server: Server, client: httpx.Client) -> None:
    run_id = open_run(client)
    received: list[sse.Message] = []
    async with (
        server.async_client() as http,
        http.stream("GET", f"/v1/runs/{run_id}/events/stream") as response,
    ):
        async for message in sse.messages(response):
            received.append(message)
            if sum("keep-alive" in m.comments for m in received) >= 2:
                break
    # Two keep-alives arrived (the loop also ends if the stream closes first), and nothing else.
    assert sum("keep-alive" in m.comments for m in received) >= 2, received
    assert all(m.id is None and m.event is None for m in received), received
    # The client went away: its waiter is released, not kept until some timeout.
    await wait_for_waiters(server, 0, at_most=True)


async def test_sse_resume_after_a_disconnect_delivers_every_event_exactly_once(
    server: Server, client: httpx.Client
) -> None:
    run_id = open_run(client)
    total_batches = 12

    async def produce() -> None:
        async with server.async_client() as writer:
            for batch in range(total_batches):
                lines = [{"type": "log", "line": f"b{batch}-{n}"} for n in range(3)]
                answer = await writer.post(f"/v1/runs/{run_id}/events", json={"events": lines})
                assert answer.status_code == 200
                await asyncio.sleep(0.02)
            await writer.put(f"/v1/runs/{run_id}/terminal", json={"status": "completed"})

    received: list[sse.Message] = []
    async with server.async_client() as http:
        producer = asyncio.create_task(produce())
        # First connection: drop it in the middle of the run.
        await read_stream(http, f"/v1/runs/{run_id}/events/stream?after=-1", received, stop_after=7)
        resumes = 0
        while not any(m.event == "terminal" for m in received):
            last_id = [m.id for m in received if m.id is not None][-1]
            # Like a browser EventSource: same URL (after=-1), Last-Event-ID must win.
            status = await read_stream(
                http,
                f"/v1/runs/{run_id}/events/stream?after=-1",
                received,
                stop_after=9,
                headers={"Last-Event-ID": last_id},
            )
            assert status == 200
            resumes += 1
        await producer
    ids = [int(m.id) for m in received if m.id is not None]
    expected_last = total_batches * 3 + 1
    assert ids == list(range(1, expected_last + 1)), "every event exactly once, in order"
    assert resumes >= 1
    lines = [m.json["line"] for m in received if m.event == "log"]
    assert len(lines) == len(set(lines)) == total_batches * 3
