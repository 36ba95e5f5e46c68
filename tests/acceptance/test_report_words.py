"""What `ledger report` says to the person who ran it: one summary line at the end (the run, how it
ended, its steps and rows, how many runner lines it could not use), the play it was given, the first
unreadable lines described and the rest only counted, and how an ended run had ended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from ledger.cli.report import EXIT_NO_RESULT, EXIT_OK
from tests.acceptance.conftest import ROOT, Server, new_id
from tests.acceptance.test_cli import client_env, ledger


def report(server: Server, tmp_path: Path, run_id: str, stdin: str, *flags: str) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "ledger.cli", "report", "--run-id", run_id, *flags],
        cwd=ROOT,
        env={**os.environ, **client_env(server, tmp_path)},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def lines_of(*events: dict[str, Any]) -> str:
    return "".join(json.dumps(event) + "\n" for event in events)


TOOL_CONTRACT = {
    "staticPipeline": {
        "substeps": [
            {"type": "tool", "id": "greet", "toolId": "hello"},
            # Never started by this runner: not run.
            {"type": "dataset", "id": "enrich", "field": "leads", "tableNamespace": "leads"},
        ]
    }
}
TOOL_RUN = (
    {"type": "log", "line": "hello"},
    {"type": "execution_event", "event": {"type": "tool.call.started", "toolId": "hello"}},
    {
        "type": "execution_event",
        "event": {"type": "tool.call.settled", "toolId": "hello", "outcome": "succeeded"},
    },
)


def contract_file(tmp_path: Path) -> str:
    path = tmp_path / "contract.json"
    path.write_text(json.dumps(TOOL_CONTRACT))
    return str(path)


def test_a_completed_run_ends_with_one_summary_line_and_its_play(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id, play = new_id("words"), new_id("play")
    stdin = lines_of(*TOOL_RUN, {"type": "result", "status": "completed"})
    done = report(server, tmp_path, run_id, stdin, "--contract", contract_file(tmp_path), "--play", play)
    assert done.returncode == EXIT_OK, done.stderr
    assert done.stderr.splitlines() == [
        f"ledger report: run {run_id} completed: 1 of 2 steps completed (1 not run); every line was used"
    ]
    assert client.get(f"/v1/runs/{run_id}").json()["play_name"] == play
    listed = ledger("runs", "--play", play, "--json", env=client_env(server, tmp_path))
    assert [run["run_id"] for run in json.loads(listed.stdout)["runs"]] == [run_id]


def test_unreadable_lines_are_described_three_times_then_counted(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("words-junk")
    junk = "".join(f"not json {i}\n" for i in range(7))
    stdin = junk + lines_of(*TOOL_RUN, {"type": "result", "status": "completed"})
    done = report(server, tmp_path, run_id, stdin, "--contract", contract_file(tmp_path))
    assert done.returncode == EXIT_OK, done.stderr
    said = done.stderr.splitlines()
    assert len(said) == 4
    assert [line.split(":")[1].strip() for line in said[:3]] == ["line 1", "line 2", "line 3"]
    assert said[2].endswith("; skipped (the others are only counted)")
    assert said[3] == (
        f"ledger report: run {run_id} completed: 1 of 2 steps completed (1 not run); "
        "7 lines could not be used"
    )


def test_a_run_without_a_result_says_why_then_sums_up(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("words-cut")
    done = report(server, tmp_path, run_id, lines_of(*TOOL_RUN[:2]), "--contract", contract_file(tmp_path))
    assert done.returncode == EXIT_NO_RESULT, done.stderr
    said = done.stderr.splitlines()
    assert said == [
        f"Error: no result line: run {run_id} was reported failed",
        f"ledger report: run {run_id} failed: 0 of 2 steps completed (1 failed, 1 not run); "
        "every line was used",
    ]
    run = client.get(f"/v1/runs/{run_id}").json()
    assert run["terminal"]["status"] == "failed"
    assert run["live_node_progress"]["greet"]["state"] == "failed"


def test_rows_processed_counts_the_failed_rows_too(server: Server, tmp_path: Path) -> None:
    # 989 rows completed and 11 failed: all 1,000 were processed, and each face says so the same way.
    run_id = new_id("processed")
    contract = tmp_path / "map-contract.json"
    contract.write_text(
        json.dumps(
            {"staticPipeline": {"substeps": [{"type": "dataset", "id": "enrich", "tableNamespace": "leads"}]}}
        )
    )
    counts = {"artifactTableNamespace": "leads", "totalRows": 1000}
    stdin = lines_of(
        {"type": "execution_event", "event": {"type": "map.started", **counts, "completedRows": 0}},
        {
            "type": "execution_event",
            "event": {"type": "map.progress", **counts, "completedRows": 989, "failedRows": 11},
        },
    )
    # Without a result the batch ends open (--no-finalize): the live counts are what the faces show.
    done = report(server, tmp_path, run_id, stdin, "--contract", str(contract), "--no-finalize")
    assert done.returncode == EXIT_OK, done.stderr
    env = client_env(server, tmp_path)
    as_json = ledger("run", run_id, "--json", env=env)
    step = json.loads(as_json.stdout)["live_node_progress"]["enrich"]
    assert (step["completed"], step["failed"], step["total"]) == (989, 11, 1000)
    assert step["message"] == "1,000 / 1,000 rows processed"
    shown = ledger("run", run_id, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "1,000 / 1,000 rows processed" in shown.stdout
    # The completed ones of the total, the failed ones beside them.
    assert "989 / 1,000 (11 failed)" in shown.stdout
    assert "989 / 1,000 rows processed" not in shown.stdout
