"""Three independent `ledger serve` processes (separate ports, one Postgres), as behind a load
balancer: a long-poll waiting in one is woken by an append through another, and the watchdog and
sweeps running in all three at once fail each stalled run exactly once and delete each expired
row once, also when a client's own terminal event races them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import httpx
import psycopg
import pytest

from ledger.runlog.events import WATCHDOG_ERROR
from ledger.testing import Server
from tests.acceptance.conftest import new_id, start_server, stop_server
from tests.faults.invariants import assert_consistent
from tests.own_postgres import OwnPostgres, own_postgres

pytestmark = pytest.mark.own_postgres

PROCESSES = 3
STALLED_RUNS = 30
WAIT_S = 60.0
# Every watchdog passes often, so the three race for the same stalled runs; no run stalls on its
# own during the test (a stalled run is made so by moving its last activity into the past).
WATCHDOG_ENV = {"LEDGER_WATCHDOG_INTERVAL_S": "0.05", "LEDGER_WATCHDOG_STALL_S": "600"}


@pytest.fixture(scope="module")
def shared_pg() -> Iterator[OwnPostgres]:
    """One Postgres and three processes for the module: starting them is most of its time."""
    with own_postgres() as server:
        yield server


@pytest.fixture(scope="module")
def servers(shared_pg: OwnPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    work = tmp_path_factory.mktemp("serve")
    with ThreadPoolExecutor(PROCESSES) as pool:
        started = list(
            pool.map(lambda n: start_server(shared_pg.url, work / str(n), **WATCHDOG_ENV), range(PROCESSES))
        )
    yield started
    for server in started:
        stop_server(server)
    for server in started:
        log = server.log()
        for trouble in ("unhandled error", "watchdog pass failed", "watchdog sweep failed"):
            assert trouble not in log, log[-5000:]


def metric(server: Server, name: str) -> float:
    with server.client() as client:
        text = client.get("/metrics").text
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    return values[0] if values else 0.0


def has_a_waiter(server: Server) -> bool:
    return metric(server, "ledger_waiters") >= 1


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_waiter_in_each_process_is_woken_by_an_append_through_another(
    servers: list[Server], shared_pg: OwnPostgres
) -> None:
    run_ids = [new_id("replica") for _ in servers]
    with servers[0].client() as client:
        for run_id in run_ids:
            assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200

    def wait(n: int) -> httpx.Response:
        with servers[n].client(timeout=60) as own:
            return own.get(f"/v1/runs/{run_ids[n]}/events", params={"after": 0, "timeout_ms": 30_000})

    with ThreadPoolExecutor(PROCESSES) as pool:
        waiters = [pool.submit(wait, n) for n in range(PROCESSES)]
        for n, server in enumerate(servers):
            until(partial(has_a_waiter, server), f"no waiter in process {n}")
        # Each run's event goes through the next process, never the one its waiter is in.
        for n, run_id in enumerate(run_ids):
            with servers[(n + 1) % PROCESSES].client() as other:
                line = {"events": [{"type": "log", "line": f"through {(n + 1) % PROCESSES}"}]}
                assert other.post(f"/v1/runs/{run_id}/events", json=line).status_code == 200
        for n, waiter in enumerate(waiters):
            answer = waiter.result()
            assert answer.status_code == 200, answer.text
            assert [e["line"] for e in answer.json()["events"]] == [f"through {(n + 1) % PROCESSES}"]
    assert_consistent(shared_pg.url)


def test_watchdogs_and_sweeps_on_every_process_act_once(
    servers: list[Server], shared_pg: OwnPostgres
) -> None:
    run_ids = [new_id("stalled") for _ in range(STALLED_RUNS)]
    pool_name = new_id("pool")
    clients = [server.client() for server in servers]
    try:
        for n, run_id in enumerate(run_ids):
            client = clients[n % PROCESSES]
            assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200
            line = {"events": [{"type": "log", "line": "working"}]}
            headers = {"Idempotency-Key": f"work-{run_id}"}
            assert client.post(f"/v1/runs/{run_id}/events", json=line, headers=headers).status_code == 200
        ready_at = time.time() * 1000 - 60_000
        ids = [f"i-{n}" for n in range(STALLED_RUNS)]
        entries = {"version": "v1", "ids": ids, "ready_at": ready_at}
        assert clients[0].post(f"/v1/pools/{pool_name}/entries", json=entries).status_code == 200
        for n, run_id in enumerate(run_ids):
            claim = {"version": "v1", "run_id": run_id, "min_ready_age_ms": 0}
            claimed = clients[n % PROCESSES].post(f"/v1/pools/{pool_name}/claim", json=claim)
            assert claimed.status_code == 200 and claimed.json()["id"] in ids, claimed.text

        with psycopg.connect(shared_pg.url, autocommit=True) as conn:
            conn.execute(
                "UPDATE ledger.run_mappings SET expires_at = now() - interval '1 s',"
                " created_at = now() - interval '1 hour' WHERE run_id = ANY(%s)",
                (run_ids,),
            )
            conn.execute("UPDATE ledger.idempotency_keys SET created_at = now() - interval '2 days'")
            # One run after another goes quiet (as if an hour ago), so each watchdog's passes find
            # some; every other run's own coordinator finishes it at that moment: first terminal wins.
            finished = {}
            for n, run_id in enumerate(run_ids):
                conn.execute(
                    "UPDATE ledger.runs SET updated_at = now() - interval '1 hour' WHERE run_id = %s",
                    (run_id,),
                )
                if n % 2 == 0:
                    end = {"events": [{"type": "terminal", "status": "completed"}]}
                    answer = clients[n % PROCESSES].post(f"/v1/runs/{run_id}/events", json=end)
                    assert answer.status_code in (200, 409), answer.text
                    finished[run_id] = answer.status_code == 200
                else:
                    time.sleep(0.02)

            def settled() -> bool:
                row = conn.execute(
                    "SELECT count(*) FILTER (WHERE terminal_status IS NULL),"
                    " (SELECT count(*) FROM ledger.run_mappings WHERE run_id = ANY(%s)),"
                    " (SELECT count(*) FROM ledger.idempotency_keys)"
                    " FROM ledger.runs WHERE run_id = ANY(%s)",
                    (run_ids, run_ids),
                ).fetchone()
                return row == (0, 0, 0)

            until(settled, "the watchdogs left runs unfailed or the sweeps left expired rows")
            terminals = conn.execute(
                "SELECT run_id, count(*), min(payload ->> 'status'), min(payload ->> 'error')"
                " FROM ledger.run_events WHERE type = 'terminal' AND run_id = ANY(%s) GROUP BY run_id",
                (run_ids,),
            ).fetchall()
        assert len(terminals) == STALLED_RUNS
        failed_by_watchdog = 0
        for run_id, count, status, error in terminals:
            assert count == 1, (run_id, count)
            if finished.get(run_id):
                assert (status, error) == ("completed", None)
            else:
                assert (status, error) == ("failed", WATCHDOG_ERROR), run_id
                failed_by_watchdog += 1
        print("PER", [metric(x, "ledger_watchdog_failures_total") for x in servers], failed_by_watchdog)
        # Each process counts only the runs it failed: together, each stalled run once.
        assert (
            sum(metric(server, "ledger_watchdog_failures_total") for server in servers) == failed_by_watchdog
        )
    finally:
        for client in clients:
            client.close()
    assert_consistent(shared_pg.url)
