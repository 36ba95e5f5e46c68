"""`ledger demo` as a person runs it (a subprocess, stdout not a terminal), checked through SQL."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ledger.cli.demo.scenario import DEMO_PLAY, DemoPlan
from ledger.embedded import EmbeddedPostgres
from tests.acceptance.conftest import ROOT

ANSI = re.compile(r"\x1b\[")


def run_demo(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    return subprocess.run(
        [sys.executable, "-m", "ledger.cli", "demo", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=100,
    )


def demo_run_id(stdout: str) -> str:
    found = re.search(r"^run (demo-[0-9a-z-]+): completed", stdout, re.MULTILINE)
    assert found, stdout
    return found.group(1)


def ledger_state(url: str, run_id: str) -> dict[str, Any]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        run = conn.execute("SELECT * FROM ledger.runs WHERE run_id = %s", (run_id,)).fetchone()
        steps = conn.execute(
            "SELECT * FROM ledger.step_progress WHERE run_id = %s ORDER BY node_id", (run_id,)
        ).fetchall()
        overview = conn.execute("SELECT * FROM ledger.run_overview WHERE run_id = %s", (run_id,)).fetchone()
        events = conn.execute(
            "SELECT seq, type, payload FROM ledger.run_events WHERE run_id = %s ORDER BY seq", (run_id,)
        ).fetchall()
        sheets = conn.execute(
            "SELECT status, count(*) AS n FROM ledger.sheet_rows WHERE run_id = %s GROUP BY status", (run_id,)
        ).fetchall()
    return {
        "run": run,
        "steps": {s["node_id"]: s for s in steps},
        "overview": overview,
        "events": events,
        "sheets": {s["status"]: s["n"] for s in sheets},
    }


def check_demo_run(state: dict[str, Any], plan: DemoPlan) -> None:
    expected = plan.expected()
    run = state["run"]
    assert run is not None
    assert (run["status"], run["terminal_status"], run["play_name"]) == ("completed", "completed", DEMO_PLAY)
    assert run["terminal_error"] is None

    # The map step ends with the sheet's counts, not the checkpoint's nor the (truncated) live ones.
    enrich = state["steps"]["enrich"]
    assert (enrich["completed"], enrich["failed"], enrich["total"]) == (
        expected["completed"],
        expected["failed"],
        expected["total"],
    )
    assert (enrich["completed"], enrich["failed"]) != (
        expected["checkpoint_completed"],
        expected["checkpoint_failed"],
    )
    assert state["sheets"] == {"completed": expected["completed"], "failed": expected["failed"]}

    # Every executed step started and settled; the untaken branch never ran.
    for node_id in ("load", "validate", "dedupe", "enrich", "notify"):
        step = state["steps"][node_id]
        assert step["started_at"] is not None and step["completed_at"] is not None, node_id
        assert step["started_at"] <= step["completed_at"]
    assert state["steps"].get("on_error") is None or state["steps"]["on_error"]["started_at"] is None
    assert state["steps"]["load"]["completed_at"] <= state["steps"]["enrich"]["started_at"]

    # A gapless log ending in exactly one terminal event; each executed step started once.
    events = state["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)) and run["last_seq"] == len(events)
    assert [e["type"] for e in events].count("terminal") == 1 and events[-1]["type"] == "terminal"
    started = sorted(e["payload"]["node_id"] for e in events if e["type"] == "step.started")
    assert started == ["dedupe", "enrich", "load", "notify", "validate"]
    assert any(e["type"] == "log" for e in events) and any(e["type"] == "dataset.lifecycle" for e in events)

    overview = state["overview"]
    assert (overview["steps_done"], overview["rows_total"]) == (5, expected["total"])
    assert overview["rows_failed"] == expected["failed"]


def test_demo_on_the_configured_database(database_url: str, tmp_path: Path) -> None:
    # The default 6,000 rows, paced faster than a person would watch them.
    result = run_demo(
        {"LEDGER_DATABASE_URL": database_url, "LEDGER_DATA_DIR": str(tmp_path)}, "--rate", "4000"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # Not a terminal: plain lines, no escape codes, and progress as it happened.
    assert not ANSI.search(out)
    assert re.search(r"^\[\s*\d+\.\ds\] progress   enrich [\d,]+ / 6,000", out, re.MULTILINE)
    assert re.search(r"^\[\s*\d+\.\ds\] terminal   completed", out, re.MULTILINE)
    assert "FROM ledger.run_overview" in out and "FROM ledger.step_progress" in out
    plan = DemoPlan()
    assert f"the ledger now holds                  {plan.expected()['completed']:,} / 6,000" in out
    check_demo_run(ledger_state(database_url, demo_run_id(out)), plan)


def test_demo_with_nothing_configured_starts_the_embedded_postgres(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh"
    result = run_demo({"LEDGER_DATA_DIR": str(data_dir)}, "--rows", "1000", "--rate", "5000")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"embedded Postgres: data in {data_dir / 'pgdata'}" in result.stdout
    run_id = demo_run_id(result.stdout)
    # The data stays: the same data dir serves it again after the demo exited.
    server = EmbeddedPostgres(data_dir)
    try:
        check_demo_run(ledger_state(server.url(), run_id), DemoPlan(rows=1000))
    finally:
        server.stop()
