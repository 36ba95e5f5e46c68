"""`bench/peers.py --quick --json` on a database of its own: every peer row beside ours.

The peers (DBOS, Procrastinate, pgmq) are the optional `bench` extra, which CI does not install
(it would add minutes for figures no test may assert): the bench test runs where they are
importable and is skipped, saying so, where they are not. Timings are never asserted (the machine
is shared); the shape is: every row is there, with a positive figure for ours and for the peer and
a ratio that reads "how many times ours" the same way for rates and latencies. Without the extra,
`python -m bench --peers` refuses before it starts anything, with the install line and exit code 2.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest

from tests.integration.bench_runs import ROOT, database_of_its_own, quick_json
from tests.prerequisites import missing_module

PEERS = ("dbos", "procrastinate", "pgmq")
ABSENT = [name for name in PEERS if importlib.util.find_spec(name) is None]

EXPECTED = (
    "stream append, 1 writer",
    "stream append, 8 writers",
    "stream read wake, 1 reader, p50",
    "stream read wake, 1 reader, p99",
    "stream read wake, 1 reader, DBOS coalescing 1 ms, p50",
    "stream read wake, 1 reader, DBOS coalescing 1 ms, p99",
    "job start (ours: stream read wake), p50",
    "job start (ours: stream read wake), p99",
    "jobs drained, 1 worker (ours: pool claims)",
    "message wake, pgmq read_with_poll (ours: stream read wake), p50",
    "message wake, pgmq read_with_poll (ours: stream read wake), p99",
    "message wake, pgmq LISTEN + read (ours: stream read wake), p50",
    "message wake, pgmq LISTEN + read (ours: stream read wake), p99",
    "queue claim, 1 consumer (ours: pool claim)",
    "queue claim, 8 consumers (ours: pool claim)",
)


@pytest.fixture
def bench_database_url(pg_admin_url: str) -> Iterator[str]:
    with database_of_its_own(pg_admin_url, "ledger_peers") as url:
        yield url
    # The bench drops the peers' databases itself; none may be left behind.
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        left = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'peers\\_%'").fetchall()
    assert left == []


# Named as a missing module, the skip is kept under CI, which never installs the `bench` extra.
@pytest.mark.skipif(bool(ABSENT), reason=missing_module(", ".join(ABSENT)) + " (the `bench` extra)")
@pytest.mark.timeout(600)
def test_quick_peers_bench_prints_every_peer_row_beside_ours(bench_database_url: str) -> None:
    document = quick_json(bench_database_url, ["bench/peers.py"], timeout_s=540)
    assert sorted(document["peers"]) == sorted(PEERS)
    rows = document["measures"]
    assert [row["measure"] for row in rows] == list(EXPECTED)
    for row in rows:
        assert row["kind"] in ("rate", "latency"), row
        assert row["ours"] > 0 and row["baseline"] > 0, row
        assert row["baseline_is"].split()[0] in ("DBOS", "Procrastinate", "pgmq"), row
        ahead = row["ours"] / row["baseline"] if row["kind"] == "rate" else row["baseline"] / row["ours"]
        assert row["ratio"] == pytest.approx(ahead, rel=1e-3, abs=1e-4), row
        assert (row["unit"] == "ms") == (row["kind"] == "latency"), row


def test_peers_flag_without_the_extra_says_how_to_install_it() -> None:
    # A module set to None in sys.modules cannot be imported or found: the extra looks absent.
    hide = (
        "import runpy, sys; sys.modules['procrastinate'] = None;"
        " runpy.run_module('bench', run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", hide, "--peers", "--quick"],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "LEDGER_DATABASE_URL"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "procrastinate" in done.stderr
    assert 'pip install -e ".[bench]"' in done.stderr
    assert done.stdout == ""
