"""The real service stays up under database trouble: a run whose row someone holds locked slows
only requests for that run, and while Postgres is down requests fail fast with 503, `/readyz` says
so, and serving resumes once it is back.

Times are asserted only against the configured timeouts (with a margin); the recovery figures
themselves are measured by `bench/bench_recovery.py`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest

from ledger.service.settings import ServiceSettings
from tests.acceptance.conftest import Server, new_id, start_server, stop_server
from tests.faults.invariants import assert_consistent
from tests.own_postgres import OwnPostgres, own_postgres

LOCK_TIMEOUT_S = 3.0
POOL_TIMEOUT_S = 1.0
BLOCKED_APPENDS = 6
RECOVERY_S = 60.0


def timed(call: httpx.Client, method: str, url: str, **kwargs: object) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    answer = call.request(method, url, **kwargs)  # type: ignore[arg-type]
    return answer, time.monotonic() - started


def assert_unavailable(answer: httpx.Response) -> None:
    assert answer.status_code == 503, (answer.request.method, answer.request.url, answer.text)
    assert int(answer.headers["retry-after"]) >= 1


@pytest.fixture
def tight_server(database_url: str, tmp_path: Path) -> Iterator[Server]:
    """Two pooled connections only: a pool that blocked writes could exhaust at once."""
    running = start_server(
        database_url,
        tmp_path / "serve",
        LEDGER_DB_POOL_SIZE="2",
        LEDGER_DB_POOL_TIMEOUT_S=str(POOL_TIMEOUT_S),
        LEDGER_DB_LOCK_TIMEOUT_S=str(LOCK_TIMEOUT_S),
        LEDGER_WATCHDOG="0",
    )
    try:
        yield running
    finally:
        stop_server(running)
        assert "unhandled error" not in running.log()


def wait_for_a_lock_wait(database_url: str) -> None:
    """Until one of the service's sessions waits on a row lock (the test's timeout bounds it)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND application_name = 'run-ledger' AND datname = current_database()"
            ).fetchone()
            if row is not None and row[0] > 0:
                return
            time.sleep(0.02)


def test_a_run_whose_row_is_held_slows_only_requests_for_that_run(
    tight_server: Server, database_url: str
) -> None:
    held, others = new_id("held"), [new_id("free") for _ in range(3)]
    with tight_server.client() as client, ThreadPoolExecutor(BLOCKED_APPENDS + 10) as pool:
        for run_id in (held, *others):
            assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200
        line = {"events": [{"type": "log", "line": "x"}]}
        with psycopg.connect(database_url) as holder:
            holder.execute("SELECT 1 FROM ledger.runs WHERE run_id = %s FOR UPDATE", (held,))
            blocked = [
                pool.submit(timed, client, "POST", f"/v1/runs/{held}/events", json=line)
                for _ in range(BLOCKED_APPENDS)
            ]
            wait_for_a_lock_wait(database_url)
            # While those wait: other runs, the probes and a write elsewhere are served as usual.
            unrelated = [
                *(pool.submit(timed, client, "GET", f"/v1/runs/{run_id}") for run_id in others),
                pool.submit(timed, client, "POST", f"/v1/runs/{others[0]}/events", json=line),
                pool.submit(timed, client, "GET", f"/v1/runs/{others[1]}/events", params={"after": -1}),
                pool.submit(timed, client, "GET", "/healthz"),
                pool.submit(timed, client, "GET", "/readyz"),
            ]
            for future in unrelated:
                answer, _ = future.result()
                assert answer.status_code == 200, (answer.request.url, answer.status_code, answer.text)
            # The held row is still held: those answers did not wait for it.
            assert (
                not holder.closed and holder.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            )
            for future in blocked:
                answer, took = future.result()
                assert_unavailable(answer)
                # Waited for the lock (or for its turn at it) at most about twice the lock timeout.
                assert took < LOCK_TIMEOUT_S * 4, took
            holder.rollback()
        appended = client.post(f"/v1/runs/{held}/events", json=line)
        assert appended.status_code == 200, appended.text
        # Nothing of the refused appends was written: the run's first event is this one.
        assert [e["seq"] for e in appended.json()["events"]] == [1]


@pytest.fixture
def own_pg() -> Iterator[OwnPostgres]:
    with own_postgres() as server:
        yield server


@pytest.mark.own_postgres
def test_while_postgres_is_down_requests_fail_fast_and_serving_resumes_when_it_returns(
    own_pg: OwnPostgres, tmp_path: Path
) -> None:
    # The default pool timeout: failing fast must not come from a short one.
    running = start_server(own_pg.url, tmp_path / "serve", LEDGER_WATCHDOG="0")
    pool_timeout_s = ServiceSettings().db_pool_timeout_s
    try:
        with running.client() as client:
            run_id = new_id("down")
            assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200
            own_pg.stop()
            try:
                for _ in range(3):
                    for method, url in (
                        ("GET", f"/v1/runs/{run_id}"),
                        ("POST", f"/v1/runs/{run_id}/events"),
                        ("GET", "/v1/runs"),
                    ):
                        body = {"events": [{"type": "log", "line": "lost"}]} if method == "POST" else None
                        answer, took = timed(client, method, url, json=body)
                        assert_unavailable(answer)
                        assert took < pool_timeout_s, (method, url, took)
                ready, took = timed(client, "GET", "/readyz")
                assert ready.status_code == 503 and ready.json()["database"] is False
                assert took < pool_timeout_s
            finally:
                own_pg.start()
            deadline = time.monotonic() + RECOVERY_S
            while client.get(f"/v1/runs/{run_id}").status_code != 200:
                assert time.monotonic() < deadline, "the service never served again"
                time.sleep(0.05)
            while (ready := client.get("/readyz")).status_code != 200:
                assert time.monotonic() < deadline, ready.text
                time.sleep(0.05)
            assert ready.json() == {"status": "ready", "database": True, "listener": True}
            # The append refused while down wrote nothing.
            assert client.get(f"/v1/runs/{run_id}/events", params={"after": -1}).json()["events"] == []
    finally:
        stop_server(running)
        assert "unhandled error" not in running.log()
    assert_consistent(own_pg.url)


def listeners(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'run-ledger-listener'"
            " AND datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.own_postgres
def test_workers_wake_each_others_waiters(own_pg: OwnPostgres, tmp_path: Path) -> None:
    """`--workers 2`: each process has its own listener; a long-poll served by either is woken by
    an append that the other served. The kernel spreads connections over the processes, so with
    many long-polls, some wait in the process that does not take the append."""
    running = start_server(own_pg.url, tmp_path / "serve", LEDGER_WORKERS="2", LEDGER_WATCHDOG="0")
    try:
        # Ready once one worker answers; the other may still be starting.
        deadline = time.monotonic() + 60
        while listeners(own_pg.url) < 2:
            assert time.monotonic() < deadline, "the second worker never listened"
            time.sleep(0.1)
        assert listeners(own_pg.url) == 2
        with running.client() as client, ThreadPoolExecutor(20) as pool:
            run_id = new_id("workers")
            assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200

            def long_poll() -> httpx.Response:
                # A connection of its own each, so they spread over both processes.
                with running.client() as own:
                    return own.get(f"/v1/runs/{run_id}/events", params={"after": 0, "timeout_ms": 60_000})

            polls = [pool.submit(long_poll) for _ in range(16)]
            # Until long-polls wait (a late one finds the event on its first read: no harm done).
            deadline = time.monotonic() + 30
            while waiting(running) < 4:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            appended = client.post(
                f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": "hi"}]}
            )
            assert appended.status_code == 200
            # Each got the event, so each was woken: a long-poll that timed out answers an empty page.
            for future in polls:
                answer = future.result()
                assert answer.status_code == 200 and [e["line"] for e in answer.json()["events"]] == ["hi"]
    finally:
        stop_server(running)
        assert "unhandled error" not in running.log()
    assert_consistent(own_pg.url)


def waiting(server: Server) -> int:
    """Long-polls waiting in whichever process answered this /metrics request."""
    with server.client() as client:
        text = client.get("/metrics").text
    for line in text.splitlines():
        if line.startswith("ledger_waiters"):
            return int(float(line.split()[-1]))
    return 0
