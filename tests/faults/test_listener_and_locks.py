"""The listener's backend terminated under waiting readers, and one run's row held locked under
concurrent writers: readers are still woken and see every event exactly once, and the other runs'
appends go through while the held run's are refused (503) until the lock is gone, then applied
once through their Idempotency-Key."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest

from ledger.testing import Server
from tests.acceptance.conftest import new_id
from tests.faults.conftest import serving
from tests.faults.invariants import assert_consistent
from tests.faults.readers import GIVE_UP_S, LongPollReader, Reader, SseReader, append
from tests.own_postgres import OwnPostgres, own_postgres

pytestmark = pytest.mark.own_postgres

RUNS = 3
APPENDS = 10


@pytest.fixture(scope="module")
def shared_pg() -> Iterator[OwnPostgres]:
    with own_postgres() as server:
        yield server


@pytest.fixture(scope="module")
def server(shared_pg: OwnPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = {"LEDGER_WATCHDOG": "0", "LEDGER_DB_LOCK_TIMEOUT_S": "1"}
    with serving(shared_pg.url, tmp_path_factory.mktemp("serve"), **env) as running:
        yield running


def metric(server: Server, name: str) -> float:
    with server.client() as client:
        text = client.get("/metrics").text
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    return values[0] if values else 0.0


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + GIVE_UP_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def listener_pid(database_url: str) -> int | None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'run-ledger-listener'"
            " AND datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else None


def start_readers(server: Server, run_ids: list[str]) -> list[Reader]:
    readers: list[Reader] = [cls(server, r) for r in run_ids for cls in (LongPollReader, SseReader)]
    for reader in readers:
        reader.start()
    return readers


def finish_and_check(client: httpx.Client, run_ids: list[str], readers: list[Reader]) -> dict[str, list[str]]:
    """End every run; each reader saw exactly the run's stored events. The runs' log lines."""
    lines = {}
    for run_id in run_ids:
        append(client, run_id, [{"type": "terminal", "status": "completed"}], f"end-{run_id}")
        stored = client.get(f"/v1/runs/{run_id}/events", params={"after": -1}).json()["events"]
        for reader in readers:
            if reader.run_id == run_id:
                assert [(e["seq"], e.get("line")) for e in reader.result()] == [
                    (e["seq"], e.get("line")) for e in stored
                ], reader.name
        lines[run_id] = [e["line"] for e in stored if e["type"] == "log"]
    return lines


def test_waiters_are_woken_after_the_listeners_backend_is_terminated(
    server: Server, shared_pg: OwnPostgres
) -> None:
    run_ids = [new_id("listener") for _ in range(RUNS)]
    with server.client() as client:
        for run_id in run_ids:
            assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200
        readers = start_readers(server, run_ids)
        until(lambda: metric(server, "ledger_waiters") >= len(readers), "the readers never waited")
        reconnects = metric(server, "ledger_listener_reconnects_total")
        killed = listener_pid(shared_pg.url)
        assert killed is not None
        with psycopg.connect(shared_pg.url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (killed,))
        # At once, while the listener is gone or reconnecting: these must still wake the readers.
        for run_id in run_ids:
            append(client, run_id, [{"type": "log", "line": "while down"}], f"down-{run_id}")
        until(lambda: listener_pid(shared_pg.url) not in (None, killed), "the listener never came back")
        until(lambda: metric(server, "ledger_listener_reconnects_total") > reconnects, "no reconnect counted")
        for run_id in run_ids:
            append(client, run_id, [{"type": "log", "line": "after"}], f"after-{run_id}")
        lines = finish_and_check(client, run_ids, readers)
    assert all(found == ["while down", "after"] for found in lines.values()), lines
    assert_consistent(shared_pg.url)


def test_a_run_whose_row_is_held_leaves_other_runs_writing_and_applies_its_append_once_later(
    server: Server, shared_pg: OwnPostgres
) -> None:
    held, *others = [new_id("locked") for _ in range(RUNS + 1)]
    with server.client() as client, ThreadPoolExecutor(RUNS + 1) as pool:
        for run_id in (held, *others):
            assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200
        readers = start_readers(server, [held, *others])

        def write(run_id: str) -> int:
            """Appends one by one; how many attempts were refused or cut."""
            with server.client() as own:
                failed = 0
                for i in range(APPENDS):
                    failed += append(own, run_id, [{"type": "log", "line": str(i)}], f"{run_id}-{i}")[1]
                return failed

        def append_held() -> tuple[dict[str, object], int]:
            with server.client() as own:
                return append(own, held, [{"type": "log", "line": "held"}], "held")

        refused_before = metric_refusals(server)
        with psycopg.connect(shared_pg.url) as holder:
            holder.execute("SELECT 1 FROM ledger.runs WHERE run_id = %s FOR UPDATE", (held,))
            blocked = pool.submit(append_held)
            writers = [pool.submit(write, run_id) for run_id in others]
            # Every other run's appends went through at the first attempt while the row was held.
            assert [writer.result() for writer in writers] == [0] * len(others)
            assert not blocked.done()
            assert holder.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            # Held past the lock timeout: the held run's append was refused at least once.
            until(lambda: metric_refusals(server) > refused_before, "the held run's append was never refused")
            holder.rollback()
        _, refused = blocked.result()
        assert refused > 0
        lines = finish_and_check(client, [held, *others], readers)
    assert lines[held] == ["held"]
    assert all(lines[run_id] == [str(i) for i in range(APPENDS)] for run_id in others), lines
    assert_consistent(shared_pg.url)


def metric_refusals(server: Server) -> float:
    """503 answers to appends so far."""
    with server.client() as client:
        text = client.get("/metrics").text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("ledger_http_requests_total{")
        and 'status="503"' in line
        and 'method="POST"' in line
        and "/events" in line
    )
