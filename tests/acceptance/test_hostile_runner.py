"""A runner cannot hurt the worker, the service or the person at the terminal: each way a runner's
output (or a run token's request) once hung `ledger report`, crashed a command with a traceback,
wrote to the operator's terminal, made an exit code lie or broke a route for other callers, tried
through the real `ledger report`, the real CLI and HTTP against a real `ledger serve`.

A command here must end within its own deadline plus `MARGIN_S` (a slow machine's start-up and
the service's answers); nothing asserts a tighter wall-clock figure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger import validate
from tests.acceptance.conftest import ROOT, Server, new_id, start_server, stop_server
from tests.acceptance.test_cli import client_env

# What a command may take past its configured deadline: interpreter start-up, the service's
# answers on a loaded machine. Generous: the bugs these pin took minutes, or forever.
MARGIN_S = 45.0
DEADLINE_S = 5.0


def report(
    server: Server,
    tmp_path: Path,
    run_id: str,
    stdin: str,
    *flags: str,
    deadline_s: float = DEADLINE_S,
) -> tuple[subprocess.CompletedProcess[str], float]:
    """`ledger report` fed `stdin`; its outcome and how long it took."""
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ledger.cli",
            "report",
            "--run-id",
            run_id,
            "--deadline",
            str(deadline_s),
            *flags,
        ],
        cwd=ROOT,
        env={**os.environ, **client_env(server, tmp_path)},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=deadline_s + 4 * MARGIN_S,
    )
    return done, time.monotonic() - started


def ledger(server: Server, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ledger.cli", *args],
        cwd=ROOT,
        env={**os.environ, **client_env(server, tmp_path), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def lines(*events: dict[str, Any]) -> str:
    return "".join(json.dumps(event) + "\n" for event in events)


def result(status: str = "completed") -> dict[str, Any]:
    return {"type": "result", "status": status}


def run_of(server: Server, run_id: str) -> dict[str, Any] | None:
    with server.client() as client:
        answer = client.get(f"/v1/runs/{run_id}")
    if answer.status_code == 404:
        return None
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def log_lines(server: Server, run_id: str) -> list[str]:
    with server.client() as client:
        answer = client.get(f"/v1/runs/{run_id}/events", params={"after": "-1", "limit": 1000})
    assert answer.status_code == 200, answer.text
    return [e["line"] for e in answer.json()["events"] if e["type"] == "log"]


def assert_no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr[-3000:]


def assert_exit_agrees(
    server: Server, run_id: str, done: subprocess.CompletedProcess[str], status: str
) -> None:
    """The exit code says what the ledger holds: 0 when the run ended as reported; any failure
    exit only when it did not (and then with a reason on its line)."""
    assert_no_traceback(done)
    run = run_of(server, run_id)
    ended = None if run is None or run["terminal"] is None else run["terminal"]["status"]
    if done.returncode == 0:
        assert ended == status, (done.stderr, run)
    else:
        assert ended != status, (done.returncode, done.stderr)
        assert not any(line.rstrip().endswith(("failed:", ": ")) for line in done.stderr.splitlines()), (
            done.stderr
        )


# -- linear time ----------------------------------------------------------------------------------


def test_a_line_repeating_the_map_start_head_is_read_in_time(server: Server, tmp_path: Path) -> None:
    # 3 MB of it once took about ten minutes of a quadratic search before anything was uploaded.
    run_id = new_id("hostile-regex")
    hostile = "Starting map over 1 items " * (3_000_000 // 26)
    done, took = report(server, tmp_path, run_id, lines({"type": "log", "line": hostile}, result()))
    assert done.returncode == 0, done.stderr
    assert took < DEADLINE_S + MARGIN_S
    [stored] = log_lines(server, run_id)
    assert stored == validate.truncate_line(hostile.strip())


# -- no traceback ---------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_a_line_nested_deep_is_junk_and_the_run_still_ends(
    server: Server, tmp_path: Path, depth: int
) -> None:
    run_id = new_id("hostile-deep")
    deep = '{"type": "log", "line": "x", "nested": ' + "[" * depth + "]" * depth + "}\n"
    stdin = (
        lines({"type": "log", "line": "before"}) + deep + lines({"type": "log", "line": "after"}, result())
    )
    done, _ = report(server, tmp_path, run_id, stdin)
    assert done.returncode == 0, done.stderr
    assert_no_traceback(done)
    assert "line 2: nests deeper than" in done.stderr
    assert log_lines(server, run_id) == ["before", "after"]
    run = run_of(server, run_id)
    assert run is not None and run["terminal"]["status"] == "completed"


def test_a_contract_nested_deep_is_refused_with_one_line(server: Server, tmp_path: Path) -> None:
    contract = tmp_path / "deep.json"
    contract.write_text('{"staticPipeline": ' + "[" * 5_000 + "]" * 5_000 + "}")
    done, _ = report(
        server, tmp_path, new_id("hostile-deep-contract"), lines(result()), "--contract", str(contract)
    )
    assert done.returncode == 2, done.stderr
    assert_no_traceback(done)
    [line] = done.stderr.strip().splitlines()
    assert "--contract" in line and "nests deeper than" in line


def test_a_step_named_like_markup_is_shown_as_written(server: Server, tmp_path: Path) -> None:
    run_id = new_id("hostile-markup")
    contract = tmp_path / "contract.json"
    contract.write_text(json.dumps({"staticPipeline": {"substeps": [{"id": "[/bold]n", "type": "tool"}]}}))
    stdin = lines(
        {
            "type": "execution_event",
            "event": {"type": "docflow.node.started", "nodeId": "[/bold]n", "attempt": 1},
        },
        result(),
    )
    done, _ = report(server, tmp_path, run_id, stdin, "--contract", str(contract))
    assert done.returncode == 0, done.stderr
    shown = ledger(server, tmp_path, "run", run_id)
    assert shown.returncode == 0, shown.stderr
    assert_no_traceback(shown)
    assert "[/bold]n" in shown.stdout


def test_escape_sequences_in_a_log_line_never_reach_the_terminal(server: Server, tmp_path: Path) -> None:
    run_id = new_id("hostile-escape")
    line = "title\x1b]0;pwned\x07 clear\x1b[2J\x1b[H bell\x07 c1\x9b31m end"
    done, _ = report(server, tmp_path, run_id, lines({"type": "log", "line": line}, result("failed")))
    assert done.returncode == 0, done.stderr
    assert log_lines(server, run_id) == [line]  # the data stays exact
    for args in (("events", run_id), ("run", run_id), ("runs", "--limit", "1000")):
        shown = ledger(server, tmp_path, *args)
        assert shown.returncode == 0, shown.stderr
        for control in ("\x1b", "\x07", "\x9b"):
            assert control not in shown.stdout and control not in shown.stderr, args
    events = ledger(server, tmp_path, "events", run_id).stdout
    assert "title clear bell c131m end" in events


# -- every loop obeys the deadline, and the exit code is what the ledger holds --------------------------


def contract_of(step_ids: list[str], path: Path) -> str:
    path.write_text(
        json.dumps({"staticPipeline": {"substeps": [{"id": i, "type": "tool"} for i in step_ids]}})
    )
    return str(path)


@pytest.mark.parametrize(
    "step_ids",
    [
        pytest.param([f"{i:04d}" + "s" * 1_100 for i in range(1_000)], id="1000-steps-of-1.1kB"),
        pytest.param(["s" * 2_000_000], id="one-2MB-step"),
    ],
)
def test_steps_past_the_body_limit_end_in_time_with_the_truth(
    server: Server, tmp_path: Path, step_ids: list[str]
) -> None:
    run_id = new_id("hostile-steps")
    contract = contract_of(step_ids, tmp_path / "contract.json")
    done, took = report(
        server, tmp_path, run_id, lines({"type": "log", "line": "x"}, result()), "--contract", contract
    )
    assert took < DEADLINE_S + MARGIN_S, done.stderr
    assert_exit_agrees(server, run_id, done, "completed")
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def small_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A service that takes bodies of at most 64 KiB."""
    server = start_server(
        database_url, tmp_path_factory.mktemp("hostile-small"), LEDGER_MAX_BODY_BYTES="65536"
    )
    try:
        yield server
    finally:
        stop_server(server)


def test_steps_past_a_small_body_limit_end_in_time_with_the_truth(
    small_server: Server, tmp_path: Path
) -> None:
    run_id = new_id("hostile-small-steps")
    contract = contract_of([f"{i:04d}" + "s" * 66 for i in range(1_000)], tmp_path / "contract.json")
    done, took = report(
        small_server, tmp_path, run_id, lines({"type": "log", "line": "x"}, result()), "--contract", contract
    )
    assert took < DEADLINE_S + MARGIN_S, done.stderr
    assert_exit_agrees(small_server, run_id, done, "completed")
    assert done.returncode == 0, done.stderr


def test_a_huge_contract_with_a_short_deadline_exits_with_what_the_ledger_holds(
    server: Server, tmp_path: Path
) -> None:
    run_id = new_id("hostile-huge-contract")
    contract = contract_of([f"step-{i}" for i in range(30_000)], tmp_path / "contract.json")
    done, took = report(server, tmp_path, run_id, lines(result()), "--contract", contract, deadline_s=1)
    assert took < 1 + MARGIN_S, done.stderr
    assert_exit_agrees(server, run_id, done, "completed")
