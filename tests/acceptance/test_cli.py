"""The client commands and `ledger watchdog`, run as real subprocesses against the real service/database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from ledger.events import WATCHDOG_ERROR
from tests.acceptance.conftest import ROOT, Server, free_port, new_id


def ledger(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    # A wide virtual terminal so rich does not wrap table cells in non-tty output.
    full_env = {**os.environ, "COLUMNS": "200", **env}
    return subprocess.run(
        [sys.executable, "-m", "ledger.cli", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def client_env(server: Server, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {"LEDGER_URL": server.base_url, "LEDGER_TOKEN": server.token, "LEDGER_DATA_DIR": str(tmp_path)}
    env.pop("LEDGER_API_TOKENS", None)
    return {**env, **extra}


# -- ledger watchdog (database direct; first in the module, before the service's own watchdog) --------


def add_run(url: str, run_id: str, idle: str) -> None:
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO ledger.runs (run_id, created_at, updated_at) "
            "VALUES (%s, now() - interval '1 day', now() - %s::interval)",
            (run_id, idle),
        )


def run_row(url: str, run_id: str) -> dict[str, Any]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        row = conn.execute(
            "SELECT status, terminal_status, terminal_error, last_seq FROM ledger.runs WHERE run_id = %s",
            (run_id,),
        ).fetchone()
    assert row is not None
    return row


def test_watchdog_once_fails_only_the_stalled_runs(database_url: str, tmp_path: Path) -> None:
    stalled, busy = new_id("stalled"), new_id("busy")
    add_run(database_url, stalled, "2 hours")
    add_run(database_url, busy, "10 seconds")
    env = {"LEDGER_DATABASE_URL": database_url, "LEDGER_DATA_DIR": str(tmp_path)}
    # A limit of 1 hour: the 2-hour-idle run stalls, the busy one does not.
    result = ledger("watchdog", "--once", "--stall-after", "3600", env=env)
    assert result.returncode == 0, result.stderr
    assert stalled in result.stdout and busy not in result.stdout
    assert run_row(database_url, stalled) == {
        "status": "failed",
        "terminal_status": "failed",
        "terminal_error": WATCHDOG_ERROR,
        "last_seq": 1,
    }
    assert run_row(database_url, busy)["terminal_status"] is None
    # A second pass finds nothing left to do and appends nothing.
    again = ledger("watchdog", "--once", "--stall-after", "3600", env=env)
    assert again.returncode == 0 and stalled not in again.stdout
    assert run_row(database_url, stalled)["last_seq"] == 1


def test_watchdog_on_an_unmigrated_database_says_what_to_do(pg_admin_url: str, tmp_path: Path) -> None:
    result = ledger(
        "watchdog", "--once", env={"LEDGER_DATABASE_URL": pg_admin_url, "LEDGER_DATA_DIR": str(tmp_path)}
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "Error: the database has no ledger schema yet; run `ledger db upgrade` first"
    ]


# -- client commands over HTTP ----------------------------------------------------------------------


def test_pool_shows_availability_and_entries(server: Server, client: httpx.Client, tmp_path: Path) -> None:
    pool = new_id("pool")
    added = client.post(f"/v1/pools/{pool}/entries", json={"version": "v9", "ids": ["warm-a"]})
    assert added.status_code == 200, added.text
    client.post(
        f"/v1/pools/{pool}/entries", json={"version": "v9", "ids": ["ready-b", "ready-c"], "ready": True}
    )
    result = ledger("pool", "v9", "--pool", pool, env=client_env(server, tmp_path))
    assert result.returncode == 0, result.stderr
    assert f"pool {pool}, version v9: 2 available, 1 warming" in result.stdout
    for entry in ("warm-a", "ready-b", "ready-c"):
        assert entry in result.stdout


def test_a_refused_token_is_one_line_and_exit_1(server: Server, tmp_path: Path) -> None:
    result = ledger("pool", "v1", env=client_env(server, tmp_path, LEDGER_TOKEN="wrong"))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused the API token" in lines[0]


def test_service_down_is_one_line_and_exit_1(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = ledger("runs", env={"LEDGER_URL": url, "LEDGER_TOKEN": "t", "LEDGER_DATA_DIR": str(tmp_path)})
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the ledger service at " + url in lines[0]


def test_no_token_anywhere_says_where_it_looked(tmp_path: Path) -> None:
    env = {"LEDGER_URL": "http://127.0.0.1:1", "LEDGER_DATA_DIR": str(tmp_path), "LEDGER_TOKEN": ""}
    env_full = {k: v for k, v in os.environ.items() if k not in ("LEDGER_TOKEN", "LEDGER_API_TOKENS")}
    result = subprocess.run(
        [sys.executable, "-m", "ledger.cli", "runs"],
        cwd=ROOT,
        env={**env_full, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "no API token" in result.stderr and str(tmp_path) in result.stderr
