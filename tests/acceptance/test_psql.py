"""`ledger psql`: the wheel's psql on the configured database, the ledger schema on the search path."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg


def run_psql(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LEDGER_DATABASE_URL": url}
    env.pop("PGOPTIONS", None)
    return subprocess.run(
        [sys.executable, "-m", "ledger.cli", "psql", "-At", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_psql_reads_the_views_unqualified(clean_database_url: str) -> None:
    with psycopg.connect(clean_database_url) as conn:
        conn.execute("INSERT INTO ledger.runs (run_id) VALUES ('psql-run')")
    proc = run_psql(clean_database_url, "-c", "SELECT run_id, status FROM run_overview")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "psql-run|running"


def test_psql_error_is_a_non_zero_exit(clean_database_url: str) -> None:
    proc = run_psql(clean_database_url, "-c", "SELECT no_such_column FROM run_overview")
    assert proc.returncode != 0
    assert "no_such_column" in proc.stderr
