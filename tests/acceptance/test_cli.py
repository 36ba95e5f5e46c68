"""The client commands and `ledger watchdog`, run as real subprocesses against the real service/database."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from ledger.cli.exits import EXIT_CONFIG, EXIT_LEDGER, EXIT_TOKEN
from ledger.runlog.events import WATCHDOG_ERROR
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


# -- ledger watchdog (database direct; the session's service runs no watchdog of its own) ------------


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


def test_watchdog_once_also_sweeps_expired_run_mappings(database_url: str, tmp_path: Path) -> None:
    expired, live = new_id("expired"), new_id("live")
    with psycopg.connect(database_url) as conn:
        for run_id, expires in (
            (expired, "now() - interval '1 minute'"),
            (live, "now() + interval '1 hour'"),
        ):
            conn.execute(
                "INSERT INTO ledger.run_mappings (run_id, pool, instance_id, state, version, created_at,"
                f" expires_at) VALUES (%s, 'p', 'i', 'claimed', 'v1', now(), {expires})",
                (run_id,),
            )
    env = {"LEDGER_DATABASE_URL": database_url, "LEDGER_DATA_DIR": str(tmp_path)}
    result = ledger("watchdog", "--once", env=env)
    assert result.returncode == 0, result.stderr
    assert "expired run mapping(s)" in result.stdout  # other tests may leave some too
    with psycopg.connect(database_url) as conn:
        left = {
            r[0]
            for r in conn.execute(
                "SELECT run_id FROM ledger.run_mappings WHERE run_id IN (%s, %s)", (expired, live)
            )
        }
    assert left == {live}


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


def test_a_refused_token_is_one_line_and_exit_10(server: Server, tmp_path: Path) -> None:
    result = ledger("pool", "v1", env=client_env(server, tmp_path, LEDGER_TOKEN="wrong"))
    assert result.returncode == EXIT_TOKEN
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused the API token" in lines[0]
    assert "needs a read token or an admin token" in lines[0]


def test_service_down_without_a_deadline_is_one_line_and_exit_9(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    env = {"LEDGER_URL": url, "LEDGER_TOKEN": "t", "LEDGER_DATA_DIR": str(tmp_path)}
    result = ledger("runs", "--deadline", "0", env=env)
    assert result.returncode == EXIT_LEDGER
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
    assert result.returncode == EXIT_CONFIG
    assert "no API token" in result.stderr and str(tmp_path) in result.stderr


def test_run_shows_steps_with_their_counts_and_the_terminal_state(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("run")
    assert client.post("/v1/runs", json={"run_id": run_id, "play_name": "enrich"}).status_code == 200
    t0 = 1_767_225_600_000
    upload = {
        "status": "running",
        "upload_seq": 1,
        "producer_attempt": 1,
        "live_node_progress": {
            "load": {"started_at": t0, "completed_at": t0 + 1000},
            "enrich": {
                "started_at": t0 + 1000,
                "completed": 700,
                "failed": 50,
                "total": 1000,
                "message": "700 / 1,000 rows processed",
            },
            "notify": {},
        },
    }
    answer = client.post(f"/v1/runs/{run_id}/status", json=upload)
    assert answer.status_code == 200, answer.text
    env = client_env(server, tmp_path)
    live = ledger("run", run_id, env=env)
    assert live.returncode == 0, live.stderr
    lines = live.stdout.splitlines()
    assert any("running (not terminal)" in line for line in lines)
    # Steps in the order they started; the one that never started comes last.
    rows = [line.strip("│ ") for line in lines]
    positions = [
        next(i for i, row in enumerate(rows) if row.startswith(name)) for name in ("load", "enrich", "notify")
    ]
    assert positions == sorted(positions)
    enrich = next(line for line in lines if "enrich" in line and "/" in line)
    assert "700 / 1,000 (50 failed)" in enrich and "running" in enrich
    assert "━" in enrich  # the progress bar
    terminal = client.put(
        f"/v1/runs/{run_id}/terminal", json={"status": "failed", "error": "tool quota exhausted"}
    )
    assert terminal.status_code == 200, terminal.text
    done = ledger("run", run_id, env=env)
    assert "failed: tool quota exhausted" in done.stdout


def test_run_of_an_unknown_run_is_one_line_and_exit_1(server: Server, tmp_path: Path) -> None:
    result = ledger("run", "no-such-run", env=client_env(server, tmp_path))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no-such-run" in lines[0] and "404" in lines[0]


def test_events_prints_the_log_and_follow_tails_until_the_terminal_event(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("tail")
    client.post("/v1/runs", json={"run_id": run_id})
    first = [{"type": "log", "line": f"line {i}"} for i in range(3)]
    assert client.post(f"/v1/runs/{run_id}/events", json={"events": first}).status_code == 200
    env = client_env(server, tmp_path)
    listed = ledger("events", run_id, env=env)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["#1", "#2", "#3"]
    assert listed.stdout.splitlines()[2].endswith("log line 2")

    follower = subprocess.Popen(
        [sys.executable, "-m", "ledger.cli", "events", run_id, "--follow"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follower.stdout is not None
        # The history first, then what lands while it follows.
        seen = [follower.stdout.readline() for _ in range(3)]
        assert [line.split()[0] for line in seen] == ["#1", "#2", "#3"]
        more = [{"type": "status", "status": "running"}, {"type": "log", "line": "late"}]
        client.post(f"/v1/runs/{run_id}/events", json={"events": more})
        client.put(f"/v1/runs/{run_id}/terminal", json={"status": "completed", "total_rows": 42})
        rest, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode == 0, err
    tail = rest.splitlines()
    assert [line.split()[0] for line in tail] == ["#4", "#5", "#6"]
    assert "terminal completed · 42 rows" in tail[-1]


def test_runs_lists_the_newest_runs(server: Server, client: httpx.Client, tmp_path: Path) -> None:
    run_id = new_id("listed")
    client.post("/v1/runs", json={"run_id": run_id, "play_name": "p"})
    client.post(
        f"/v1/runs/{run_id}/status",
        json={"status": "running", "live_node_progress": {"m": {"completed": 5, "failed": 1, "total": 9}}},
    )
    result = ledger("runs", "--limit", "5", env=client_env(server, tmp_path))
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if run_id in line)
    assert "running" in line and "5 / 9 (1 failed)" in line and "0/1" in line


def test_runs_prints_the_command_for_the_next_page(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    older, newer = new_id("paged"), new_id("paged")
    for run_id in (older, newer):
        assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200
    env = client_env(server, tmp_path)
    first = ledger("runs", "--limit", "1", env=env)
    assert first.returncode == 0, first.stderr
    assert newer in first.stdout and older not in first.stdout
    more = next(line for line in first.stdout.splitlines() if line.startswith("more: ledger runs "))
    second = ledger(*shlex.split(more.removeprefix("more: ledger ")), env=env)
    assert second.returncode == 0, second.stderr
    assert older in second.stdout and newer not in second.stdout
    refused = ledger("runs", "--before", "not-a-cursor", env=env)
    assert refused.returncode != 0 and "before: " in refused.stderr
