"""`bench/append_floor.py --quick --json` (both shapes) on a database of its own, and its floor's
honesty.

The psycopg side runs the baseline's statement (`baselines.append_statement`) in place of pgbench;
it is worth measuring only while it does the baseline's work: its events a call at the run's next
seqs, the run advanced, one NOTIFY with the run and the last seq. That is checked here against a real
listener. The bench run is checked for its shape only; timings are never asserted (the machine is
shared).
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from bench import baselines
from ledger.runlog.events import parse_notify_payload
from ledger.runlog.listener import CHANNEL
from tests.integration.bench_runs import database_of_its_own, quick_json

APPEND_SIDES = {"pgbench", "psycopg, the statement", "psycopg, the function", "ours, the append"}


@pytest.fixture
def bench_database_url(pg_admin_url: str) -> Iterator[str]:
    with database_of_its_own(pg_admin_url, "ledger_bench_append_floor") as url:
        yield url


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("options", "batch", "sides"),
    [([], 1, APPEND_SIDES), (["--upload"], 50, APPEND_SIDES | {"ours, the upload"})],
    ids=["append", "upload"],
)
def test_quick_append_floor_measures_every_side(
    bench_database_url: str, options: list[str], batch: int, sides: set[str]
) -> None:
    document = quick_json(bench_database_url, ["bench/append_floor.py", *options], timeout_s=160)
    assert document["batch"] == batch
    assert set(document["rates"]) == sides
    for side, by_runs in document["rates"].items():
        assert set(by_runs) == {"1", "8"}, side
        assert all(rate > 0 for rate in by_runs.values()), (side, by_runs)
    assert set(document["cpu"]) == sides - {"pgbench"}
    assert all(cpu["client_us"] > 0 for cpu in document["cpu"].values()), document["cpu"]
    # The server's CPU is read when its backends are processes of this machine (the embedded
    # server), and left out for every side alike when they are not (a server in a container).
    servers = [cpu["server_us"] for cpu in document["cpu"].values()]
    assert all(s is None for s in servers) or all(s is not None and s > 0 for s in servers), servers
    assert len(document["rounds"]) == 1


@pytest.mark.parametrize("batch", [1, 50])
def test_the_python_floor_appends_as_the_baseline_does(bench_database_url: str, batch: int) -> None:
    run_id = 'floor "honest" run'
    with (
        psycopg.connect(bench_database_url, autocommit=True) as conn,
        psycopg.connect(bench_database_url, autocommit=True) as listener,
    ):
        listener.execute(f"LISTEN {CHANNEL}")
        conn.execute("INSERT INTO ledger.runs (run_id) VALUES (%s)", (run_id,))
        for _ in range(3):
            conn.execute(baselines.append_statement(batch), {"run_id": run_id}).fetchall()
        stored = conn.execute(
            "SELECT seq, type, payload FROM ledger.run_events WHERE run_id = %s ORDER BY seq", (run_id,)
        ).fetchall()
        last_seq = conn.execute("SELECT last_seq FROM ledger.runs WHERE run_id = %s", (run_id,)).fetchone()
        notified = [parse_notify_payload(n.payload) for n in listener.notifies(timeout=5, stop_after=3)]
    assert stored == [(seq, "log", {"line": "x"}) for seq in range(1, 3 * batch + 1)]
    assert last_seq == (3 * batch,)
    assert notified == [(run_id, call * batch) for call in (1, 2, 3)]
