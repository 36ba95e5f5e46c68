"""Postgres restarted under load: concurrent appenders (retrying 503s with their Idempotency-Keys),
long-poll readers and SSE readers all ride it out. Every acknowledged append is stored exactly once
in its writer's order, and every reader sees every event exactly once, in seq order."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.acceptance.conftest import new_id
from tests.faults.conftest import serving
from tests.faults.invariants import assert_consistent
from tests.faults.readers import GIVE_UP_S, LongPollReader, Reader, SseReader, append
from tests.own_postgres import OwnPostgres

pytestmark = pytest.mark.own_postgres

RUNS = 2
WRITERS_PER_RUN = 2
# Each writer appends at least this many, and goes on until both restarts are done: fast appends
# could otherwise all be acknowledged before a restart lands, and the test would prove nothing.
APPENDS_PER_WRITER = 25
# Restart once this many appends are acknowledged, and again at the second mark.
RESTART_AT = (10, 40)


def test_appends_long_polls_and_streams_survive_postgres_restarts(
    own_pg: OwnPostgres, tmp_path: Path
) -> None:
    with serving(own_pg.url, tmp_path / "serve", LEDGER_DB_POOL_TIMEOUT_S="1", LEDGER_WATCHDOG="0") as server:
        run_ids = [new_id("restart") for _ in range(RUNS)]
        with server.client() as client:
            for run_id in run_ids:
                assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200
        readers: list[Reader] = [cls(server, r) for r in run_ids for cls in (LongPollReader, SseReader)]
        for reader in readers:
            reader.start()

        acknowledged = 0
        retried = 0
        lock = threading.Lock()
        restarted = threading.Event()
        written: dict[tuple[str, str], int] = {}

        def write(run_id: str, writer: str) -> None:
            nonlocal acknowledged, retried
            with server.client() as own:
                i = 0
                while i < APPENDS_PER_WRITER or not restarted.is_set():
                    _, failed = append(
                        own, run_id, [{"type": "log", "line": f"{writer} {i}"}], f"{writer}-{i}"
                    )
                    i += 1
                    with lock:
                        acknowledged += 1
                        retried += failed
            written[run_id, writer] = i

        writers = [(run_id, f"w{n}") for run_id in run_ids for n in range(WRITERS_PER_RUN)]
        with ThreadPoolExecutor(len(writers)) as pool:
            futures = [pool.submit(write, run_id, writer) for run_id, writer in writers]
            for mark in RESTART_AT:
                deadline = time.monotonic() + GIVE_UP_S
                while acknowledged < mark:
                    assert time.monotonic() < deadline, f"only {acknowledged} appends acknowledged"
                    time.sleep(0.01)
                own_pg.restart()
            restarted.set()
            for future in futures:
                future.result()
        assert acknowledged == sum(written.values())
        # The restarts hit the stream: some appends were refused or cut and retried.
        assert retried > 0

        with server.client() as client:
            for run_id in run_ids:
                append(client, run_id, [{"type": "terminal", "status": "completed"}], f"end-{run_id}")
            for run_id in run_ids:
                page = client.get(f"/v1/runs/{run_id}/events", params={"after": -1, "limit": 10_000}).json()
                stored = page["events"]
                assert [e["seq"] for e in stored] == list(range(1, len(stored) + 1))
                assert stored[-1]["type"] == "terminal"
                lines = [e["line"] for e in stored[:-1]]
                # Each writer's lines exactly once, in the order it appended them.
                for owner, writer in writers:
                    if owner == run_id:
                        mine = [line for line in lines if line.split()[0] == writer]
                        assert mine == [f"{writer} {i}" for i in range(written[run_id, writer])]
                assert len(lines) == sum(n for (owner, _), n in written.items() if owner == run_id)
                for reader in readers:
                    if reader.run_id == run_id:
                        seen = reader.result()
                        assert [(e["seq"], e["type"], e.get("line")) for e in seen] == [
                            (e["seq"], e["type"], e.get("line")) for e in stored
                        ], reader.name
    assert_consistent(own_pg.url)
