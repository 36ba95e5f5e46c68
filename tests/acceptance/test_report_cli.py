"""`ledger report` as a runner would use it: a real subprocess, JSON lines on stdin, the real service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from ledger.runlog.events import WATCHDOG_ERROR
from tests.acceptance.conftest import ROOT, Server, new_id
from tests.acceptance.test_cli import client_env


def report(server: Server, tmp_path: Path, run_id: str, lines: list[dict[str, Any]], *flags: str) -> Any:
    stdin = "".join(json.dumps(line) + "\n" for line in lines)
    return subprocess.run(
        [sys.executable, "-m", "ledger.cli", "report", "--run-id", run_id, *flags],
        cwd=ROOT,
        env={**os.environ, **client_env(server, tmp_path)},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def log_lines(client: httpx.Client, run_id: str) -> list[str]:
    events = client.get(f"/v1/runs/{run_id}/events", params={"after": "-1"}).json()["events"]
    return [e["line"] for e in events if e["type"] == "log"]


def test_a_nul_byte_in_a_log_line_is_repaired_and_the_run_completes(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("report-nul")
    done = report(
        server,
        tmp_path,
        run_id,
        [{"type": "log", "line": "bad \x00 byte"}, {"type": "result", "status": "completed"}],
    )
    assert done.returncode == 0, done.stderr
    assert log_lines(client, run_id) == ["bad \ufffd byte"]
    assert client.get(f"/v1/runs/{run_id}").json()["terminal"]["status"] == "completed"


def test_batches_of_one_attempt_with_no_finalize_then_resume(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("report-batches")
    first = report(
        server,
        tmp_path,
        run_id,
        [{"type": "log", "line": "one"}, {"type": "log", "line": "two"}],
        "--no-finalize",
    )
    assert first.returncode == 0, first.stderr
    assert client.get(f"/v1/runs/{run_id}").json()["terminal"] is None
    second = report(
        server,
        tmp_path,
        run_id,
        [{"type": "log", "line": "three"}, {"type": "result", "status": "completed"}],
        "--resume",
    )
    assert second.returncode == 0, second.stderr
    assert log_lines(client, run_id) == ["one", "two", "three"]
    run = client.get(f"/v1/runs/{run_id}").json()
    assert run["terminal"]["status"] == "completed" and run["live_log_count"] == 3


def test_a_run_someone_else_ended_exits_4_naming_who_and_how(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("report-ended")
    assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200
    ended = client.put(f"/v1/runs/{run_id}/terminal", json={"status": "failed", "error": WATCHDOG_ERROR})
    assert ended.status_code == 200, ended.text
    done = report(
        server, tmp_path, run_id, [{"type": "log", "line": "late"}, {"type": "result", "status": "completed"}]
    )
    assert done.returncode == 4, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"Error: run {run_id} had already ended as failed: {WATCHDOG_ERROR}"
    )
    assert log_lines(client, run_id) == []
