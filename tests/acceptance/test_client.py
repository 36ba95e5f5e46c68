"""`ledger.client` against the real service: every route family through both faces, the errors
mapped to the library's exceptions, and the SSE tail resuming after a real dropped connection.

The blocking `LedgerClient` is the plugin's `ledger_client`; each scenario runs through it (on a
thread) and through `AsyncLedgerClient`, by `api("operation", ...)`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.client import AsyncLedgerClient, LedgerClient, RetryPolicy
from ledger.errors import (
    Conflict,
    InvalidInput,
    LedgerUnavailable,
    NotFound,
    RunTerminal,
    StaleAttempt,
    Unauthorized,
)
from tests.acceptance.conftest import Server, new_id, start_server, stop_server
from tests.acceptance.test_events_api import metric_value, wait_for_waiters
from tests.own_postgres import own_postgres

Api = Callable[..., Awaitable[Any]]


async def waiters(server: Server) -> int:
    """How many readers the service counts as waiting now."""
    async with server.async_client() as probe:
        return int(metric_value((await probe.get("/metrics")).text, "ledger_waiters"))


@pytest.fixture(params=["sync", "async"])
async def api(request: pytest.FixtureRequest, server: Server) -> AsyncIterator[Api]:
    """`await api("get_run", run_id)`: the operation through the face the test is parametrized with."""
    if request.param == "sync":
        blocking: LedgerClient = request.getfixturevalue("ledger_client")

        async def call_sync(name: str, *args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(getattr(blocking, name), *args, **kwargs)

        yield call_sync
        return
    async with AsyncLedgerClient(server.url, server.token) as client:

        async def call_async(name: str, *args: Any, **kwargs: Any) -> Any:
            return await getattr(client, name)(*args, **kwargs)

        yield call_async


async def test_runs_events_and_the_terminal_state(api: Api, server: Server) -> None:
    run_id = new_id("client/run")  # a slash: the path segment must be quoted... and refused
    with pytest.raises(InvalidInput) as refused:
        await api("open_run", run_id)
    assert refused.value.field == "run_id"
    run_id = new_id("client-run")
    opened = await api("open_run", run_id, play_name="enrich")
    assert opened["run_id"] == run_id and opened["play_name"] == "enrich" and opened["terminal"] is None
    appended = await api("append_events", run_id, [{"type": "status", "status": "running"}])
    lines = [{"type": "log", "line": f"line {i}"} for i in range(4)]
    appended += await api("append_events", run_id, lines)
    assert [e["seq"] for e in appended] == [1, 2, 3, 4, 5]
    assert await api("recent_log_lines", run_id, 2) == ["line 2", "line 3"]
    page = await api("list_events", run_id, after=3)
    assert [e["seq"] for e in page["events"]] == [4, 5] and page["latest_seq"] == 5
    assert any(r["run_id"] == run_id for r in await api("list_runs", 1000))
    top = await api("runs_page", 1)
    assert top["runs"][0]["run_id"] == run_id and top["next_before"] is not None
    assert run_id not in [r["run_id"] for r in await api("list_runs", 1000, top["next_before"])]

    # A long-poll waits for what comes next.
    # The append comes once the service counts the poll among its waiters: an answer before it
    # could only come from a poll that never waited.
    waiting = await waiters(server)
    poll = asyncio.ensure_future(api("list_events", run_id, after=5, timeout_ms=20_000))
    await wait_for_waiters(server, waiting + 1)
    assert not poll.done()
    await api("append_events", run_id, [{"type": "log", "line": "late"}])
    assert [e["line"] for e in (await poll)["events"]] == ["late"]

    assert await api("get_terminal", run_id) is None
    state = await api("set_terminal", run_id, "completed", total_rows=7)
    assert state["status"] == "completed" and state["total_rows"] == 7
    assert (await api("get_terminal", run_id))["status"] == "completed"
    assert (await api("get_run", run_id))["terminal"]["total_rows"] == 7
    with pytest.raises(RunTerminal) as ended:
        await api("set_terminal", run_id, "failed", error="too late")
    assert ended.value.run_id == run_id and ended.value.terminal["status"] == "completed"
    assert ended.value.__notes__ == [f"HTTP 409 from PUT /v1/runs/{run_id}/terminal"]


async def test_paging_and_the_tail_until_the_terminal_event(api: Api, ledger_client: LedgerClient) -> None:
    run_id = new_id("client-tail")
    await api("open_run", run_id)
    await api("append_events", run_id, [{"type": "log", "line": str(i)} for i in range(5)])
    # Pages of two: all five, once each.
    seqs = [e["seq"] for e in ledger_client.iter_events(run_id, limit=2)]
    assert seqs == [1, 2, 3, 4, 5]
    await api("set_terminal", run_id, "failed", error="boom")
    tailed = await asyncio.to_thread(lambda: list(ledger_client.tail(run_id, after=3)))
    assert [e["seq"] for e in tailed] == [4, 5, 6] and tailed[-1]["type"] == "terminal"


async def test_ingestion(api: Api) -> None:
    run_id = new_id("client-ingest")
    upload = {"run_id": run_id, "upload_seq": 1, "producer_attempt": 2, "status": "running"}
    first = await api("upload_status", run_id, upload)
    # Another call (a key of its own, as another caller's would be): a late duplicate, applied once.
    again = await api("upload_status", run_id, upload)
    assert first["duplicate"] is False and again == {**first, "duplicate": True}
    assert first["producer_attempt"] == 2 and first["last_upload_seq"] == 1
    with pytest.raises(StaleAttempt) as stale:
        await api("upload_status", run_id, {**upload, "producer_attempt": 1, "upload_seq": 2})
    assert stale.value.current == 2 and stale.value.run_id == run_id
    rows = [
        {"table_namespace": "leads", "row_key": "a", "status": "completed"},
        {"table_namespace": "leads", "row_key": "b", "status": "failed"},
    ]
    assert await api("record_sheet_rows", run_id, rows) == 2
    assert await api("sheet_outcomes", run_id) == [
        {"table_namespace": "leads", "completed": 1, "failed": 1, "total": 2}
    ]
    observation = {"node_id": "n1", "attempt": 1, "status": "completed", "outputs": {"x": 1}}
    assert await api("record_observations", run_id, [observation]) == 1
    [stored] = await api("list_observations", run_id)
    assert stored["node_id"] == "n1" and stored["outputs"] == {"x": 1}


async def test_warm_pool_and_run_mappings(api: Api) -> None:
    pool, run_id = new_id("client pool?"), new_id("client-mapped")  # "?" and " " are quoted
    # An instance id names one instance in every pool: these are this test's own.
    warm, ready_a, ready_b = (new_id(name) for name in ("warm", "ready-a", "ready-b"))
    assert await api("add_entries", pool, "v1", [warm]) == 1
    assert await api("add_entries", pool, "v1", [ready_a, ready_b], ready=True) == 2
    assert await api("counts", pool, "v1") == {"available": 2, "warming": 1}
    assert sorted(e["id"] for e in await api("list_entries", pool, "v1")) == sorted([ready_a, ready_b, warm])
    claimed = await api("claim", pool, "v1", run_id)
    assert claimed["id"] in (ready_a, ready_b) and claimed["available"] == 1
    assert await api("mark_ready", pool, "v1", warm) is True
    assert await api("promote", pool, "v1", [warm]) == 1
    assert await api("delete_entries", pool, "v1", [warm]) == 1
    assert await api("clear_pool", pool) == 1

    instance = new_id("inst")
    assert await api("map_run", run_id, instance, "v1", started=True) is True
    assert (await api("resolve_run", run_id, "v1"))["instance_id"] == instance
    assert await api("block_run", run_id, instance, "v1") == {"blocked": False, "started": True}
    with pytest.raises(Conflict) as taken:  # a 409 without a code
        await api("map_run", new_id("client-other"), instance, "v1")
    assert type(taken.value) is Conflict and "mapped to another live run" in str(taken.value)


async def test_operations_and_errors(api: Api, server: Server) -> None:
    assert await api("healthz") == {"status": "ok"}
    assert (await api("readyz"))["status"] == "ready"
    assert "ledger_waiters" in await api("metrics")
    with pytest.raises(NotFound) as missing:
        await api("get_run", "no-such-run")
    assert "no-such-run" in str(missing.value)
    assert missing.value.__notes__ == ["HTTP 404 from GET /v1/runs/no-such-run"]
    with pytest.raises(InvalidInput) as bad:
        await api("append_events", new_id("r"), [{"type": "log", "line": "x", "seq": 9}])
    assert bad.value.field == "events[0].seq"
    with LedgerClient(server.url, "not-a-token") as stranger, pytest.raises(Unauthorized):
        stranger.list_runs()


# -- the tail resumes after a real dropped connection -------------------------------------------


class CuttingProxy:
    """A TCP proxy to the service that cuts its first connection right after the SSE message
    carrying `id: <cut_after>` has passed; later connections pass whole. Keeps each connection's
    first request head."""

    def __init__(self, upstream_port: int, cut_after: int) -> None:
        self.upstream_port = upstream_port
        self.marker = f"id: {cut_after}\n".encode()
        self.heads: list[bytes] = []

    async def serve(self) -> asyncio.Server:
        return await asyncio.start_server(self._connection, "127.0.0.1", 0)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = not self.heads
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        up_writer.write(head)
        try:
            if first:
                await self._cut(up_reader, writer)
            else:
                await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                w.close()

    async def _cut(self, upstream: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        seen = b""
        while chunk := await upstream.read(65536):
            start = len(seen)
            seen += chunk
            at = seen.find(self.marker)
            end = seen.find(b"\n\n", at) if at >= 0 else -1
            if end >= 0:
                client.write(seen[start : end + 2])
                await client.drain()
                return  # mid-response: the client sees the connection break
            client.write(chunk)
            await client.drain()

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()
        sink.close()


async def test_the_tail_resumes_after_a_dropped_connection(server: Server) -> None:
    run_id = new_id("client-resume")
    async with AsyncLedgerClient(server.url, server.token) as direct:
        await direct.open_run(run_id)
        await direct.append_events(run_id, [{"type": "log", "line": str(i)} for i in range(3)])
        await direct.set_terminal(run_id, "completed")
    proxy = CuttingProxy(int(server.url.rsplit(":", 1)[1]), cut_after=2)
    listening = await proxy.serve()
    port = listening.sockets[0].getsockname()[1]
    try:
        async with AsyncLedgerClient(f"http://127.0.0.1:{port}", server.token) as client:
            seqs = [event["seq"] async for event in client.tail(run_id)]
    finally:
        listening.close()
    assert seqs == [1, 2, 3, 4]  # nothing lost, nothing twice
    assert len(proxy.heads) == 2
    assert b"last-event-id: 2\r\n" in proxy.heads[1].lower()


# -- 503 while the service's database is down ---------------------------------------------------


@pytest.fixture
def service_without_database(tmp_path: Path) -> Iterator[Server]:
    with own_postgres() as own:
        running = start_server(own.url, tmp_path / "serve", LEDGER_DB_POOL_TIMEOUT_S="1", LEDGER_WATCHDOG="0")
        try:
            own.stop()
            yield running
        finally:
            stop_server(running)


@pytest.mark.own_postgres
def test_a_database_outage_is_ledger_unavailable_after_retries(service_without_database: Server) -> None:
    sleeps: list[float] = []
    retry = RetryPolicy(max_attempts=2)
    server = service_without_database
    with (
        LedgerClient(server.url, server.token, retry=retry, sleep=sleeps.append) as client,
        pytest.raises(LedgerUnavailable) as down,
    ):
        client.get_run("any-run")
    assert down.value.retry_after is not None and down.value.retry_after >= 1
    assert len(sleeps) == 1 and sleeps[0] >= down.value.retry_after  # waited as told, then gave up
    assert down.value.__notes__ == ["HTTP 503 from GET /v1/runs/any-run"]
