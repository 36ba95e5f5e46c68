"""`ledger report` at the edges of its contract, against the real service: bodies past the service's
limit, values nested at the depth bound, every result status, a failed run's lost map end, an
ended run reported again, and late uploads to an ended run over HTTP."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger import validate
from tests.acceptance.conftest import Server, new_id, start_server, stop_server
from tests.acceptance.test_report_cli import log_lines, report

CONTRACT = {
    "staticPipeline": {
        "substeps": [
            {"id": "load", "type": "tool", "toolId": "loader"},
            {"id": "enrich", "type": "dataset", "tableNamespace": "leads"},
        ]
    }
}


MAP_STARTED = {
    "type": "execution_event",
    "event": {
        "type": "map.started",
        "mapNodeId": "enrich",
        "artifactTableNamespace": "leads",
        "totalRows": 10,
        "completedRows": 0,
    },
}


def contract_file(tmp_path: Path) -> str:
    path = tmp_path / "contract.json"
    path.write_text(json.dumps(CONTRACT))
    return str(path)


def events(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"/v1/runs/{run_id}/events", params={"after": "-1", "limit": 1000})
    assert answer.status_code == 200, answer.text
    return list(answer.json()["events"])


def run_of(client: httpx.Client, run_id: str) -> dict[str, Any]:
    answer = client.get(f"/v1/runs/{run_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def execution(**event: Any) -> dict[str, Any]:
    return {"type": "execution_event", "event": event}


def completed() -> dict[str, Any]:
    return {"type": "result", "status": "completed"}


def stderr_lines(done: Any) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.strip()]


# -- uploads never exceed what the service takes ----------------------------------------------------


def test_a_log_line_past_the_body_limit_lands_truncated_keeping_both_ends(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("edge-long-line")
    line = "begin " + "é" * 600_000 + " end"  # 1.2 MB of UTF-8
    done = report(server, tmp_path, run_id, [{"type": "log", "line": line}, completed()])
    assert done.returncode == 0, done.stderr
    [stored] = log_lines(client, run_id)
    assert stored == validate.truncate_line(line)
    assert stored.startswith("begin é") and stored.endswith("é end")
    assert len(stored.encode()) <= validate.MAX_LOG_LINE_BYTES
    marker = re.search(r"\[…(\d+) bytes cut…\]", stored)
    assert marker is not None  # and it says exactly how many bytes are missing
    assert len(stored.encode()) - len(marker[0].encode()) + int(marker[1]) == len(line.encode())
    assert run_of(client, run_id)["terminal"]["status"] == "completed"


def test_a_tail_of_long_lines_past_the_body_limit_lands_line_for_line(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("edge-tail")
    lines = [f"{i:04d} " + "x" * 1_100 for i in range(1_000)]  # 1.1 MB in all
    done = report(server, tmp_path, run_id, [*({"type": "log", "line": x} for x in lines), completed()])
    assert done.returncode == 0, done.stderr
    assert log_lines(client, run_id) == lines
    assert not [e for e in events(client, run_id) if e["type"] == "log.gap"]
    assert run_of(client, run_id)["terminal"]["status"] == "completed"


def test_a_node_output_past_the_body_limit_is_dropped_and_the_step_still_completes(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("edge-node-io")
    big = {"text": "y" * 1_200_000}
    stream = [
        execution(
            type="docflow.node.started", nodeId="summarize", attempt=1, invocationId="i:1", inputs={"a": 1}
        ),
        execution(
            type="docflow.node.completed",
            nodeId="summarize",
            attempt=1,
            invocationId="i:1",
            inputs={"a": 1},
            outputs=big,
        ),
        completed(),
    ]
    done = report(server, tmp_path, run_id, stream)
    assert done.returncode == 0, done.stderr
    run = run_of(client, run_id)
    node_io = run["live_node_progress"]["summarize"]["node_io"]
    assert "outputs" not in node_io and node_io["inputs"] == {"a": 1}
    [step] = [e for e in events(client, run_id) if e["type"] == "step.completed"]
    assert step["node_id"] == "summarize" and step["outcome"] == "completed"
    assert run["terminal"]["status"] == "completed"


@pytest.fixture(scope="module")
def small_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A service that takes bodies of at most 64 KiB."""
    server = start_server(database_url, tmp_path_factory.mktemp("small-body"), LEDGER_MAX_BODY_BYTES="65536")
    try:
        yield server
    finally:
        stop_server(server)


def test_the_reporter_learns_a_smaller_limit_and_splits_losing_no_line(
    small_server: Server, tmp_path: Path
) -> None:
    assert httpx.get(f"{small_server.url}/v1/limits").json()["max_body_bytes"] == 65_536
    run_id = new_id("edge-split")
    # 90 KB: two bodies at least, within the live tail's bound for this limit (128 KiB).
    lines = [f"{i:03d} " + "z" * 900 for i in range(100)]
    replay = [f"replayed {i}" for i in range(50)]
    stream = [
        *({"type": "log", "line": x} for x in lines),
        execution(type="dataset.lifecycle", phase="ready", blob="b" * 10_000),
        {"type": "result", "status": "completed", "logs": [*lines, *replay]},
    ]
    done = report(small_server, tmp_path, run_id, stream)
    assert done.returncode == 0, done.stderr
    with small_server.client() as client:
        assert log_lines(client, run_id) == [*lines, *replay]
        stored = events(client, run_id)
        assert [e["event"]["phase"] for e in stored if e["type"] == "dataset.lifecycle"] == ["ready"]
        # The run ended once, after every line: the terminal event is the last.
        assert stored[-1]["type"] == "terminal" and stored[-1]["status"] == "completed"
        assert run_of(client, run_id)["last_upload_seq"] >= 3


# -- depth at the bound -----------------------------------------------------------------------------


def nested(depth: int) -> Any:
    """A JSON value nesting exactly `depth` levels."""
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("kind", ["dataset.lifecycle", "activity.observed"])
def test_values_at_the_reporters_depth_bound_land_and_one_deeper_is_dropped(
    server: Server, client: httpx.Client, tmp_path: Path, kind: str
) -> None:
    bound = validate.MAX_WRAPPED_VALUE_DEPTH
    run_id = new_id("edge-depth")
    stream = []
    for depth in (bound - 1, bound, bound + 1):
        # The object itself is one level: its field nests one less.
        if kind == "dataset.lifecycle":
            stream.append(execution(type=kind, depth=depth, deep=nested(depth - 1)))
        else:
            observation = {"activityId": f"a{depth}", "observedAt": depth, "deep": nested(depth - 1)}
            stream.append(execution(type=kind, observation=observation))
    done = report(server, tmp_path, run_id, [*stream, completed()])
    assert done.returncode == 0, done.stderr
    stored = [e for e in events(client, run_id) if e["type"] == kind]
    if kind == "dataset.lifecycle":
        assert [e["event"]["depth"] for e in stored] == [bound - 1, bound]
        assert validate.json_depth(stored[-1]["event"]) == bound
    else:
        assert [e["observation"]["observedAt"] for e in stored] == [bound - 1, bound]
    assert run_of(client, run_id)["terminal"]["status"] == "completed"


# -- result statuses --------------------------------------------------------------------------------


def test_a_cancelled_result_ends_the_run_cancelled_cancelling_its_open_steps(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("edge-cancelled")
    stream = [{"type": "log", "line": "working"}, {"type": "result", "status": "cancelled"}]
    done = report(server, tmp_path, run_id, stream, "--contract", contract_file(tmp_path))
    assert done.returncode == 0, done.stderr
    assert run_of(client, run_id)["terminal"]["status"] == "cancelled"
    settled = {
        e["node_id"]: e for e in events(client, run_id) if e["type"] in ("step.cancelled", "step.skipped")
    }
    # The step under way is cancelled, the one never reached skipped: neither reads "completed".
    assert (settled["load"]["state"], settled["load"]["reason"]) == ("cancelled", "run cancelled")
    assert settled["enrich"]["state"] == "skipped"
    assert not [e for e in events(client, run_id) if e["type"] == "step.completed"]


def test_a_suspended_result_ends_the_batch_and_leaves_the_run_in_flight(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("edge-suspended")
    done = report(
        server,
        tmp_path,
        run_id,
        [{"type": "log", "line": "parked"}, {"type": "result", "status": "suspended"}],
    )
    assert done.returncode == 0, done.stderr
    run = run_of(client, run_id)
    assert run["terminal"] is None and run["live_log_count"] == 1


@pytest.mark.parametrize(("result", "named"), [({"status": "succeeded"}, "'succeeded'"), ({}, "None")])
def test_a_result_status_the_ledger_does_not_take_fails_the_run_naming_it(
    server: Server, client: httpx.Client, tmp_path: Path, result: dict[str, Any], named: str
) -> None:
    run_id = new_id("edge-bad-status")
    done = report(server, tmp_path, run_id, [{"type": "log", "line": "x"}, {"type": "result", **result}])
    assert done.returncode == 1, done.stderr
    line, summary = stderr_lines(done)
    assert summary.startswith(f"ledger report: run {run_id} failed: ")
    assert named in line and "completed, failed, cancelled, suspended" in line and run_id in line
    terminal = run_of(client, run_id)["terminal"]
    assert terminal["status"] == "failed"
    assert terminal["error"] == f"the runner reported status {named}, which the ledger does not take"


# -- finalize in order ------------------------------------------------------------------------------


@pytest.mark.parametrize("truth", ["checkpoint", "sheets"])
def test_a_failed_run_whose_map_end_was_lost_records_the_map_failed_with_reconciled_counts(
    server: Server, client: httpx.Client, tmp_path: Path, truth: str
) -> None:
    run_id = new_id("edge-order")
    result: dict[str, Any] = {"type": "result", "status": "failed"}
    if truth == "checkpoint":
        frame = {
            "mapNodeId": "enrich",
            "status": "failed",
            "totalRows": 10,
            "completedRowsCount": 6,
            "failedRowsCount": 1,
        }
        result["checkpoint"] = {"mapFrames": {"enrich": frame}}
    else:
        rows = [
            {"table_namespace": "leads", "row_key": f"k{i}", "status": status}
            for i, status in enumerate(["completed"] * 6 + ["failed"] + ["pending"] * 3)
        ]
        assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200
        assert client.post(f"/v1/runs/{run_id}/sheets", json={"rows": rows}).status_code == 200
    stream = [
        execution(
            type="map.started",
            mapNodeId="enrich",
            artifactTableNamespace="leads",
            totalRows=10,
            completedRows=0,
        ),
        execution(type="map.progress", mapNodeId="enrich", totalRows=10, completedRows=3, failedRows=0),
        result,  # the worker died: no map.failed
    ]
    done = report(server, tmp_path, run_id, stream, "--contract", contract_file(tmp_path))
    assert done.returncode == 0, done.stderr
    stored = events(client, run_id)
    [enrich] = [e for e in stored if e["type"] == "step.failed" and e["node_id"] == "enrich"]
    assert enrich["outcome"] == enrich["state"] == "failed" and enrich["reason"].startswith("run failed")
    node = run_of(client, run_id)["live_node_progress"]["enrich"]
    assert (node["completed"], node["failed"], node["total"]) == (6, 1, 10)
    progress = [e for e in stored if e["type"] == "step.progress" and e["node_id"] == "enrich"]
    assert (progress[-1]["completed"], progress[-1]["failed"]) == (6, 1)
    assert stored[-1]["type"] == "terminal" and stored[-1]["status"] == "failed"


# -- settled maps -----------------------------------------------------------------------------------


@pytest.mark.parametrize("end", ["map.completed", "map.failed"])
def test_a_settled_map_started_the_rows_it_settled(
    server: Server, client: httpx.Client, tmp_path: Path, end: str
) -> None:
    run_id = new_id("edge-settled")
    stream = [
        execution(
            type="map.started",
            mapNodeId="enrich",
            artifactTableNamespace="leads",
            totalRows=10,
            completedRows=0,
        ),
        execution(type=end, mapNodeId="enrich", totalRows=10, completedRows=6, failedRows=1),
        completed(),
    ]
    done = report(server, tmp_path, run_id, stream, "--contract", contract_file(tmp_path))
    assert done.returncode == 0, done.stderr
    node = run_of(client, run_id)["live_node_progress"]["enrich"]
    assert (node["started_rows"], node["total"], node["active_rows"]) == (7, 10, 0)


# -- ended runs stay ended --------------------------------------------------------------------------


def test_reporting_an_ended_run_again_exits_4_with_one_line_saying_how_it_ended(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("edge-twice")
    stream = [{"type": "log", "line": f"line {i}"} for i in range(3)] + [completed()]
    first = report(server, tmp_path, run_id, stream)
    assert first.returncode == 0, first.stderr
    before = run_of(client, run_id)
    again = report(server, tmp_path, run_id, stream)
    assert again.returncode == 4, again.stderr
    assert stderr_lines(again) == [f"Error: run {run_id} had already ended as completed"]
    assert "Idempotency-Key" not in again.stderr
    after = run_of(client, run_id)
    assert (after["last_upload_seq"], after["last_seq"]) == (before["last_upload_seq"], before["last_seq"])


def test_a_longer_stream_reported_to_an_ended_run_exits_4_and_changes_nothing(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("edge-longer")
    first = report(server, tmp_path, run_id, [{"type": "log", "line": "one"}, completed()])
    assert first.returncode == 0, first.stderr
    before = run_of(client, run_id)
    stream = [{"type": "log", "line": f"late {i}"} for i in range(5)] + [
        {"type": "result", "status": "failed"}
    ]
    again = report(server, tmp_path, run_id, stream)
    assert again.returncode == 4, again.stderr
    assert stderr_lines(again)[-1].startswith(f"Error: run {run_id} had already ended as completed")
    assert run_of(client, run_id) == before


def test_a_late_running_upload_to_an_ended_run_is_409_terminal_and_changes_nothing(
    client: httpx.Client,
) -> None:
    run_id = new_id("edge-late")
    node = {"completed": 5, "total": 5, "started_at": 1, "completed_at": 2}
    first = {"upload_seq": 1, "producer_attempt": 1, "status": "completed", "live_node_progress": {"n": node}}
    assert client.post(f"/v1/runs/{run_id}/status", json=first).status_code == 200
    before = run_of(client, run_id)
    late = {
        "upload_seq": 2,
        "producer_attempt": 1,
        "status": "running",
        # No count changes (no event would be appended), only what the node's progress says.
        "live_node_progress": {"n": {**node, "message": "late", "node_io": {"outputs": {"late": True}}}},
        "last_checkpoint_at": 3,
    }
    answer = client.post(f"/v1/runs/{run_id}/status", json=late)
    assert answer.status_code == 409, answer.text
    assert answer.json()["code"] == "terminal" and answer.json()["terminal"]["status"] == "completed"
    assert run_of(client, run_id) == before
    # A late duplicate changes nothing either, and says how the run ended.
    duplicate = client.post(f"/v1/runs/{run_id}/status", json={**first, "last_checkpoint_at": 4})
    assert duplicate.status_code == 200, duplicate.text
    assert duplicate.json()["duplicate"] is True and duplicate.json()["terminal"]["status"] == "completed"
