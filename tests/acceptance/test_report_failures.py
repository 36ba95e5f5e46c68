"""`ledger report` when things go wrong, as a runner's operator meets it: real `ledger report`
processes fed through a pipe, real signals, the real service. Interruption and resume, a refused
token, a contract of the wrong shape, the runner's order in the log, the result's logs filling
what the live tail lost, steps outside the contract, and fields a line leaves out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.cli.exits import EXIT_INTERRUPTED, EXIT_NEEDS_RESUME, EXIT_REPORT_INTERRUPTED, EXIT_TOKEN
from tests.acceptance.conftest import ROOT, Server, free_port, new_id
from tests.acceptance.test_cli import client_env
from tests.acceptance.test_report_cli import log_lines, report

CONTRACT = {"staticPipeline": {"substeps": [{"id": "enrich", "type": "dataset", "tableNamespace": "leads"}]}}
# Generous: a condition that never comes fails the test here, one that comes ends the wait at once.
WAIT_S = 60.0


def contract_file(tmp_path: Path, contract: object = CONTRACT) -> Path:
    path = tmp_path / "contract.json"
    path.write_text(json.dumps(contract))
    return path


def execution(**event: Any) -> dict[str, Any]:
    return {"type": "execution_event", "event": event}


def events(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"/v1/runs/{run_id}/events", params={"after": "-1", "limit": 10_000})
    assert answer.status_code == 200, answer.text
    return list(answer.json()["events"])


def run_of(client: httpx.Client, run_id: str) -> dict[str, Any]:
    answer = client.get(f"/v1/runs/{run_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {WAIT_S:g} s for {what}")
        time.sleep(0.05)


def delivered(process: subprocess.Popen[str], kind: signal.Signals) -> bool:
    """Whether `kind` sent to `process` is no longer pending: its handler has received it."""
    bit = 1 << (kind - 1)
    with open(f"/proc/{process.pid}/status", encoding="ascii") as status:
        pending = [int(line.split()[1], 16) for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    return not any(mask & bit for mask in pending)


def stored(client: httpx.Client, run_id: str) -> dict[str, Any] | None:
    answer = client.get(f"/v1/runs/{run_id}")
    return dict(answer.json()) if answer.status_code == 200 else None


@contextmanager
def reporter(
    server: Server, tmp_path: Path, run_id: str, *flags: str, **env: str
) -> Iterator[subprocess.Popen[str]]:
    """A `ledger report` whose stdin stays open (the runner still writing) until the test ends."""
    process = subprocess.Popen(
        [sys.executable, "-m", "ledger.cli", "report", "--run-id", run_id, *flags],
        cwd=ROOT,
        env={**os.environ, **client_env(server, tmp_path), **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=WAIT_S)
        for stream in (process.stdin, process.stdout, process.stderr):
            assert stream is not None
            stream.close()


def write(process: subprocess.Popen[str], *lines: dict[str, Any]) -> None:
    assert process.stdin is not None
    process.stdin.write("".join(json.dumps(line) + "\n" for line in lines))
    process.stdin.flush()


def ended(process: subprocess.Popen[str]) -> tuple[int, list[str]]:
    """Its exit code and its stderr lines, once it exits (its stdin still open)."""
    code = process.wait(timeout=WAIT_S)
    assert process.stderr is not None
    return code, [line for line in process.stderr.read().splitlines() if line.strip()]


def map_at_90(client: httpx.Client, run_id: str) -> bool:
    run = stored(client, run_id)
    return run is not None and run["live_node_progress"].get("enrich", {}).get("completed") == 90


MAP_AT_90 = (
    {"type": "log", "line": "starting"},
    execution(type="map.started", mapNodeId="enrich", totalRows=1000, completedRows=0),
    execution(type="map.progress", mapNodeId="enrich", totalRows=1000, completedRows=90),
)


# -- interruption ------------------------------------------------------------------------------------


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_lands_what_arrived_leaves_the_run_interrupted_and_resume_ends_it_with_no_step_open(
    server: Server, client: httpx.Client, tmp_path: Path, sent: signal.Signals
) -> None:
    run_id = new_id("interrupt")
    contract = contract_file(tmp_path)
    with reporter(server, tmp_path, run_id, "--contract", str(contract)) as process:
        write(process, *MAP_AT_90)
        wait_for(lambda: map_at_90(client, run_id), "the map's progress to land")
        write(process, {"type": "log", "line": "the last line before the signal"})
        process.send_signal(sent)
        code, said = ended(process)
    command = f"ledger report --run-id {run_id} --resume --contract {contract}"
    assert code == EXIT_REPORT_INTERRUPTED, said
    # One line: what happened, and the exact command that continues it. No "Aborted!".
    assert len(said) == 1, said
    assert said[0].startswith(f"ledger report: interrupted ({sent.name}): run {run_id} is left interrupted")
    assert said[0].endswith(f"continue it with: {command}")
    run = run_of(client, run_id)
    assert run["status"] == "interrupted" and run["terminal"] is None
    [mark] = [e for e in events(client, run_id) if e["type"] == "reporter.interrupted"]
    assert mark["signal"] == sent.name and mark["reason"] == f"the reporter was interrupted ({sent.name})"
    # What had been read landed (a line still in the pipe when the signal came is not read).
    assert log_lines(client, run_id) in (["starting"], ["starting", "the last line before the signal"])
    assert run["live_node_progress"]["enrich"]["completed"] == 90
    assert "completed_at" not in run["live_node_progress"]["enrich"]  # its step as it was: running

    resumed = report(
        server,
        tmp_path,
        run_id,
        [{"type": "result", "status": "completed"}],
        "--resume",
        "--contract",
        str(contract),
    )
    assert resumed.returncode == 0, resumed.stderr
    run = run_of(client, run_id)
    assert run["status"] == "completed" and run["terminal"]["status"] == "completed"
    kinds = [e["type"] for e in events(client, run_id)]
    assert kinds.index("reporter.interrupted") < kinds.index("reporter.resumed") < kinds.index("terminal")
    # No step is left running: the map settled with the run, its counts reconciled.
    enrich = run["live_node_progress"]["enrich"]
    assert enrich["completed_at"] is not None
    assert (enrich["active_rows"], enrich["waiting_rows"]) == (0, 0)
    assert [e["outcome"] for e in events(client, run_id) if e["type"] == "step.completed"] == ["completed"]


def test_reporting_an_interrupted_run_again_without_resume_says_how_to_continue_it(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("interrupt-again")
    with reporter(server, tmp_path, run_id) as process:
        write(process, {"type": "log", "line": "one"})
        wait_for(lambda: (stored(client, run_id) or {}).get("live_log_count") == 1, "the first line to land")
        process.send_signal(signal.SIGTERM)
        assert ended(process)[0] == EXIT_REPORT_INTERRUPTED
    again = report(
        server, tmp_path, run_id, [{"type": "log", "line": "two"}, {"type": "result", "status": "completed"}]
    )
    assert again.returncode == EXIT_NEEDS_RESUME, again.stderr
    assert again.stderr.strip().splitlines() == [
        f"Error: run {run_id} was interrupted and waits for a reporter that resumes it; "
        f"continue it with: ledger report --run-id {run_id} --resume"
    ]
    assert "another reporter" not in again.stderr
    assert run_of(client, run_id)["status"] == "interrupted" and log_lines(client, run_id) == ["one"]


@pytest.mark.parametrize(("choice", "status"), [("fail", "failed"), ("cancel", "cancelled")])
def test_on_interrupt_fail_or_cancel_ends_the_run_with_the_reason(
    server: Server, client: httpx.Client, tmp_path: Path, choice: str, status: str
) -> None:
    run_id = new_id(f"interrupt-{choice}")
    contract = contract_file(tmp_path)
    with reporter(server, tmp_path, run_id, "--contract", str(contract), "--on-interrupt", choice) as process:
        write(process, *MAP_AT_90)
        wait_for(lambda: map_at_90(client, run_id), "the map's progress to land")
        process.send_signal(signal.SIGINT)
        code, said = ended(process)
    assert code == EXIT_REPORT_INTERRUPTED
    assert said == [
        f"ledger report: interrupted (SIGINT): run {run_id} was reported {status} (--on-interrupt {choice})"
    ]
    run = run_of(client, run_id)
    assert run["terminal"]["status"] == status
    assert run["terminal"]["error"] == "the reporter was interrupted (SIGINT)"
    assert run["live_node_progress"]["enrich"]["completed_at"] is not None  # no step left running


def test_a_second_signal_exits_at_once(server: Server, client: httpx.Client, tmp_path: Path) -> None:
    # A ledger nobody answers: the first signal's landing would wait out its grace.
    unreachable = f"http://127.0.0.1:{free_port()}"
    with reporter(server, tmp_path, new_id("twice"), LEDGER_URL=unreachable) as process:
        write(process, {"type": "log", "line": "one"})
        assert process.stderr is not None
        # Its first upload failed: it is running, its signal handlers in place.
        assert "cannot reach the ledger" in process.stderr.readline()
        process.send_signal(signal.SIGTERM)
        # Two signals pending at once may reach the handler in either order (a thread of the
        # process takes the lowest-numbered pending one): the second is sent once the first has
        # left the pending set (seen once on a loaded machine: "a second signal (SIGTERM)").
        wait_for(lambda: delivered(process, signal.SIGTERM), "SIGTERM to reach the reporter")
        process.send_signal(signal.SIGINT)
        code, said = ended(process)
    assert code == EXIT_INTERRUPTED
    assert said[-1].startswith("ledger report: a second signal (SIGINT): exiting at once")
    assert not any("Aborted" in line or "Traceback" in line for line in said)


# -- mistakes before the run -------------------------------------------------------------------------


def test_a_refused_token_stops_the_reporter_while_the_runner_still_writes(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("bad-token")
    with reporter(server, tmp_path, run_id, LEDGER_TOKEN="not-a-token") as process:
        write(process, {"type": "log", "line": "one"})
        code, said = ended(process)  # stdin is still open: the runner has not finished
    assert code == EXIT_TOKEN
    assert len(said) == 1 and said[0].startswith("Error: the ledger service at http://127.0.0.1:"), said
    assert "LEDGER_TOKEN" in said[0]
    assert client.get(f"/v1/runs/{run_id}").status_code == 404


@pytest.mark.parametrize(
    ("contract", "said"),
    [
        (
            {"staticPipeline": {"steps": []}},
            "staticPipeline has no substeps (the list of steps); it holds steps",
        ),
        (
            [{"id": "enrich", "type": "dataset"}],
            "must be a JSON object holding staticPipeline.substeps, not a list",
        ),
        (
            {"staticPipeline": {"substeps": [{"id": "a", "type": "code"}, {"id": "a", "type": "tool"}]}},
            "staticPipeline.substeps[0] and substeps[1] have the same node id 'a' "
            "(give each step an id of its own)",
        ),
        ({"staticPipeline": {"substeps": [{"id": "a"}]}}, "staticPipeline.substeps[0] has no type"),
    ],
)
def test_a_contract_of_the_wrong_shape_is_refused_before_any_input_is_read(
    server: Server, client: httpx.Client, tmp_path: Path, contract: object, said: str
) -> None:
    run_id = new_id("bad-contract")
    path = contract_file(tmp_path, contract)
    done = report(
        server, tmp_path, run_id, [{"type": "result", "status": "completed"}], "--contract", str(path)
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"Error: --contract {path}: the contract {said}"]
    assert client.get(f"/v1/runs/{run_id}").status_code == 404


# -- the runner's order, the result's logs, the contract's steps, absent fields ----------------------


def test_log_lines_and_step_transitions_are_stored_in_the_order_the_runner_wrote_them(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("order")
    contract = {
        "staticPipeline": {
            "substeps": [
                {"id": "fetch", "type": "tool", "toolId": "fetcher"},
                {"id": "enrich", "type": "dataset", "tableNamespace": "leads"},
                {"id": "notify", "type": "tool", "toolId": "slack"},
            ]
        }
    }
    stream = [
        {"type": "log", "line": "begin"},
        execution(type="tool.call.started", toolId="fetcher"),
        {"type": "log", "line": "fetching"},
        execution(type="tool.call.settled", toolId="fetcher", outcome="succeeded"),
        {"type": "log", "line": "fetched"},
        execution(type="map.started", mapNodeId="enrich", totalRows=2, completedRows=0),
        {"type": "log", "line": "enriching"},
        execution(type="map.completed", mapNodeId="enrich", totalRows=2, completedRows=2),
        {"type": "log", "line": "enriched"},
        execution(type="tool.call.started", toolId="slack"),
        {"type": "log", "line": "notifying"},
        {"type": "result", "status": "completed"},
    ]
    done = report(server, tmp_path, run_id, stream, "--contract", str(contract_file(tmp_path, contract)))
    assert done.returncode == 0, done.stderr
    story = [
        e["line"] if e["type"] == "log" else f"{e['type']} {e['node_id']}"
        for e in events(client, run_id)
        if e["type"] in ("log", "step.started", "step.completed")
    ]
    # The steps before the first dataset start with the run, before its first line.
    assert story == [
        "step.started fetch",
        "begin",
        "fetching",
        "step.completed fetch",
        "fetched",
        "step.started enrich",
        "enriching",
        "step.completed enrich",
        "enriched",
        "step.started notify",
        "notifying",
        "step.completed notify",
    ]


def test_the_results_logs_fill_every_line_the_live_tail_dropped_once_in_order(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("result-logs")
    lines = [f"line {i:04d}" for i in range(1, 5001)]
    stream = [
        *({"type": "log", "line": line} for line in lines),
        {"type": "result", "status": "completed", "logs": lines},
    ]
    done = report(server, tmp_path, run_id, stream)
    assert done.returncode == 0, done.stderr
    stored_events = events(client, run_id)
    assert [e["line"] for e in stored_events if e["type"] == "log"] == lines
    assert not [e for e in stored_events if e["type"] == "log.gap"]
    assert run_of(client, run_id)["live_log_count"] == 5000


def test_steps_outside_the_contract_are_junk_named_in_a_warning_never_steps(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("outside")
    frame = {"mapNodeId": "phantom", "status": "completed", "completedRowsCount": 7, "totalRows": 7}
    stream = [
        execution(type="map.started", mapNodeId="enrich", totalRows=2, completedRows=0),
        execution(type="map.progress", mapNodeId="ghost", totalRows=500, completedRows=40),
        execution(type="map.completed", mapNodeId="enrich", totalRows=2, completedRows=2),
        {"type": "result", "status": "completed", "checkpoint": {"mapFrames": {"p": frame}}},
    ]
    done = report(server, tmp_path, run_id, stream, "--contract", str(contract_file(tmp_path)))
    assert done.returncode == 0, done.stderr
    assert set(run_of(client, run_id)["live_node_progress"]) == {"enrich"}
    assert "'ghost', which the contract does not list" in done.stderr
    assert "'phantom', which the contract does not list" in done.stderr
    assert not [e for e in events(client, run_id) if e.get("node_id") in ("ghost", "phantom")]


def test_fields_a_line_leaves_out_never_erase_what_the_ledger_holds(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("absent")
    stream = [
        execution(type="map.started", mapNodeId="enrich", totalRows=1000, completedRows=0),
        execution(type="map.progress", mapNodeId="enrich", totalRows=1000, completedRows=400, failedRows=2),
        execution(type="map.suspended", mapNodeId="enrich", completedRows=400),
        execution(type="map.resumed", mapNodeId="enrich", totalRows=1000),
        execution(
            type="docflow.node.started",
            nodeId="doc",
            attempt=1,
            invocationId="i:1",
            inputs={"q": 1},
            inputsTruncated=True,
        ),
        execution(
            type="docflow.node.completed", nodeId="doc", attempt=1, invocationId="i:1", outputs={"a": 2}
        ),
    ]
    done = report(server, tmp_path, run_id, stream, "--no-finalize")
    assert done.returncode == 0, done.stderr
    nodes = run_of(client, run_id)["live_node_progress"]
    assert (nodes["enrich"]["completed"], nodes["enrich"]["failed"]) == (400, 2)
    assert nodes["doc"]["node_io"] == {
        "attempt": 1,
        "invocation_id": "i:1",
        "inputs": {"q": 1},
        "inputs_truncated": True,
        "outputs": {"a": 2},
        "error": None,
    }
    # The progress bar never went back.
    completed = [
        e["completed"] for e in events(client, run_id) if e["type"] == "step.progress" and "completed" in e
    ]
    assert completed == sorted(completed)
