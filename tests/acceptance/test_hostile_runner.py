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
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
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


# -- one caller cannot hurt the others: the same text bounds on every route --------------------------


LINE = validate.MAX_LOG_LINE_BYTES


@pytest.mark.parametrize("size", [LINE - 1, LINE, LINE + 1, 100_000])
def test_a_log_line_appended_as_an_event_is_cut_as_an_upload_s_is(server: Server, size: int) -> None:
    run_id = new_id("hostile-append-line")
    line = "a" * (size - 1) + "z"
    with server.client() as client:
        assert client.post("/v1/runs", json={"run_id": run_id}).status_code in (200, 201)
        answer = client.post(f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": line}]})
        assert answer.status_code in (200, 201), answer.text
        [appended] = answer.json()["events"]
    assert appended["line"] == validate.truncate_line(line)
    assert len(appended["line"].encode()) <= LINE
    assert (size > LINE) == ("bytes cut" in appended["line"]) and appended["line"].endswith("z")
    assert log_lines(server, run_id) == [appended["line"]]


@pytest.mark.parametrize("size", [LINE, LINE + 1, 200_000])
def test_a_terminal_error_is_cut_as_an_upload_s_is(server: Server, size: int) -> None:
    run_id = new_id("hostile-terminal-error")
    error = "e" * (size - 1) + "!"
    with server.client() as client:
        assert client.post("/v1/runs", json={"run_id": run_id}).status_code in (200, 201)
        answer = client.put(f"/v1/runs/{run_id}/terminal", json={"status": "failed", "error": error})
        assert answer.status_code == 200, answer.text
        assert answer.json()["error"] == validate.truncate_line(error)
        # The same request again is the same end (a retry), not a conflict.
        again = client.put(f"/v1/runs/{run_id}/terminal", json={"status": "failed", "error": error})
        assert again.status_code == 200, again.text
    run = run_of(server, run_id)
    assert run is not None and run["terminal"]["error"] == validate.truncate_line(error)
    assert len(run["terminal"]["error"].encode()) <= LINE


# -- ids and claims --------------------------------------------------------------------------------


@pytest.mark.parametrize("dots", [".", ".."])
def test_a_run_id_no_url_can_address_is_refused_on_create(server: Server, dots: str) -> None:
    with server.client() as client:
        answer = client.post("/v1/runs", json={"run_id": dots})
        assert answer.status_code == 422, answer.text
        assert "run_id" in answer.json()["error"] and "'..'" in answer.json()["error"]
        # Nor can an upload or an append create it through an encoded path.
        for path, body in (
            (f"/v1/runs/{'%2E' * len(dots)}/events", {"events": [{"type": "log", "line": "x"}]}),
            (f"/v1/runs/{'%2E' * len(dots)}/status", {"upload_seq": 1, "status": "running"}),
        ):
            assert client.post(path, json=body).status_code in (404, 422)
    with server.client() as client:
        ids = [run["run_id"] for run in client.get("/v1/runs", params={"limit": 1000}).json()["runs"]]
    assert dots not in ids


def test_a_stream_s_location_keeps_dot_segments_addressable(server: Server) -> None:
    tag = new_id("dots")
    with server.client() as client:
        created = client.put(f"/v1/stream/{tag}/a/%2E%2E/b", headers={"Content-Type": "text/plain"})
        assert created.status_code == 201, created.text
        location = created.headers["location"]
        assert location == f"{server.url}/v1/stream/{tag}/a/%2E%2E/b"
        assert (
            client.post(location, content=b"mine", headers={"Content-Type": "text/plain"}).status_code == 204
        )
        # The Location names this stream, not `{tag}/b`, which a client's dot-segment removal made of it.
        assert client.get(location).content == b"mine"
        assert client.head(f"/v1/stream/{tag}/b").status_code == 404


def test_a_claim_for_a_run_that_has_ended_is_409_and_takes_no_instance(server: Server) -> None:
    pool, run_id = new_id("hostile-pool"), new_id("hostile-ended")
    with server.client() as client:
        assert (
            client.post(
                f"/v1/pools/{pool}/entries", json={"version": "v1", "ids": ["i-1"], "ready": True}
            ).status_code
            == 200
        )
        assert client.post("/v1/runs", json={"run_id": run_id}).status_code in (200, 201)
        assert client.put(f"/v1/runs/{run_id}/terminal", json={"status": "cancelled"}).status_code == 200
        answer = client.post(f"/v1/pools/{pool}/claim", json={"version": "v1", "run_id": run_id})
        assert answer.status_code == 409, answer.text
        assert answer.json()["code"] == "terminal" and answer.json()["terminal"]["status"] == "cancelled"
        counts = client.get(f"/v1/pools/{pool}/counts", params={"version": "v1"}).json()
        assert counts == {"available": 1, "warming": 0}


@pytest.mark.parametrize("dots", [".", ".."])
def test_a_run_stored_under_a_dot_id_stays_readable(
    server: Server, database_url: str, tmp_path: Path, dots: str
) -> None:
    # Refused on create since; a run stored so before is still read (the client escapes its id).
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO ledger.runs (run_id, created_at, updated_at) VALUES (%s, now(), now()) "
            "ON CONFLICT DO NOTHING",
            (dots,),
        )
    with server.client() as client:
        answer = client.get(f"/v1/runs/{'%2E' * len(dots)}")
        assert answer.status_code == 200, answer.text
        assert answer.json()["run_id"] == dots
    shown = ledger(server, tmp_path, "run", dots)
    assert shown.returncode == 0, shown.stderr
    assert_no_traceback(shown)
    assert re.search(rf"^run\s+{re.escape(dots)}\s*$", shown.stdout, re.MULTILINE), shown.stdout
