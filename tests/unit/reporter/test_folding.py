"""Folding runner events into node progress: every event type, logs, modes and junk."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest

from ledger.validate import LIVE_LOG_TAIL_LIMIT
from reporter.folding import EventFolder
from reporter.lifecycle import StepState
from reporter.pipeline import StaticPipeline
from reporter.state import ProgressState
from reporter.wire import LogMode

CONTRACT = {
    "staticPipeline": {
        "substeps": [
            {"type": "code", "id": "load"},
            {"type": "dataset", "id": "enrich", "field": "rows", "tableNamespace": "leads"},
            {"type": "tool", "id": "notify", "toolId": "slack.post"},
            {"type": "dataset", "field": "scores"},
        ]
    }
}


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000

    def __call__(self) -> int:
        return self.ms


def make(mode: LogMode = "progress_reporter") -> tuple[EventFolder, list[bool], Clock]:
    clock = Clock()
    scheduled: list[bool] = []
    folder = EventFolder(
        ProgressState(now_ms=clock), StaticPipeline(CONTRACT), mode=mode, schedule=scheduled.append
    )
    return folder, scheduled, clock


def ex(**event: Any) -> dict[str, Any]:
    return {"type": "execution_event", "event": event}


def node(folder: EventFolder, node_id: str) -> dict[str, Any]:
    return folder.state.nodes[node_id].to_wire()


# -- logs ------------------------------------------------------------------------------------------


def test_log_lines_fill_a_bounded_tail_and_keep_the_total_count() -> None:
    folder, scheduled, _ = make()
    for i in range(LIVE_LOG_TAIL_LIMIT + 5):
        folder.on_runner_event({"type": "log", "line": f"  line {i}  ", "source": "runner"})
    folder.on_runner_event({"type": "log", "line": "   ", "source": "runner"})  # blank: not counted
    assert folder.state.log_total_count == LIVE_LOG_TAIL_LIMIT + 5
    assert len(folder.state.logs) == LIVE_LOG_TAIL_LIMIT
    assert folder.state.logs[0] == "line 5"
    assert folder.state.logs[-1] == f"line {LIVE_LOG_TAIL_LIMIT + 4}"
    # Log lines ask for throttled flushes until half a tail waits unsent, then for one at once.
    half = LIVE_LOG_TAIL_LIMIT // 2
    assert not any(scheduled[: half - 1]) and all(scheduled[half - 1 : LIVE_LOG_TAIL_LIMIT])
    # Once the tail dropped an unsent line (a hole), only the batch's last upload carries lines:
    # asking for more uploads before it is useless.
    assert not any(scheduled[LIVE_LOG_TAIL_LIMIT:])
    assert folder.state.log_hole_after == 0
    folder.on_runner_event({"type": "log", "line": "past the hole", "source": "runner"})
    assert scheduled[-1] is False
    folder.state.snapshot(whole_tail=True)
    assert folder.state.log_hole_after is None and folder.state.unsent_log_lines == 0


def test_initial_live_log_total_count_continues_the_channel() -> None:
    state = ProgressState(now_ms=lambda: 0, initial_live_log_total_count=40)
    folder = EventFolder(state, StaticPipeline(None))
    folder.on_runner_event({"type": "log", "line": "x"})
    assert state.log_total_count == 41


def test_direct_worker_mode_keeps_worker_lines_out_except_perf_trace() -> None:
    folder, _, _ = make("direct_worker")
    for line, source in [
        ("sandbox created", "worker"),
        ("[perf-trace] phase=run ms=3", "worker"),
        ("[2026-01-01T00:00:00.000Z] play says hi", "runner"),
        ("no source at all", None),
    ]:
        folder.on_runner_event({"type": "log", "line": line, "source": source})
    assert list(folder.state.logs) == [
        "[perf-trace] phase=run ms=3",
        "[2026-01-01T00:00:00.000Z] play says hi",
        "no source at all",
    ]


def test_progress_reporter_mode_keeps_worker_lines() -> None:
    folder, _, _ = make()
    folder.on_runner_event({"type": "log", "line": "sandbox created", "source": "worker"})
    assert list(folder.state.logs) == ["sandbox created"]


def test_worker_lines_are_still_parsed_in_direct_worker_mode() -> None:
    folder, _, _ = make("direct_worker")
    folder.on_runner_event(
        {"type": "log", "line": "[perf] runtime map setup table=leads_r1 rows=40", "source": "worker"}
    )
    assert not folder.state.logs
    assert node(folder, "enrich")["total"] == 40


def test_map_start_log_starts_the_step_and_sets_totals() -> None:
    folder, _, clock = make()
    folder.on_runner_event(
        {
            "type": "log",
            "line": "Starting map over 10000 items in pages (table namespace: leads_r1; 1234 already "
            "satisfied; 8766 pending)",
        }
    )
    assert node(folder, "enrich") == {
        "completed": 1234,
        "failed": 0,
        "total": 10000,
        "started_rows": 1234,
        "active_rows": 0,
        "waiting_rows": 8766,
        "completed_rows": 1234,
        "message": "1,234 / 10,000 rows processed",
        "artifact_table_namespace": "leads_r1",
        "started_at": clock.ms,
        "updated_at": clock.ms,
        "state": "running",
    }
    assert folder.lifecycle.state("enrich") is StepState.STARTED
    assert folder.lifecycle.state("load") is StepState.COMPLETED
    assert folder.state.total_rows == 10000
    assert folder.active_map_node_id == "enrich"


def test_page_local_duplicate_counts_never_reset_cumulative_progress() -> None:
    folder, _, clock = make()
    page = "Starting map over 500 items in page (table namespace: leads; {n} already satisfied; 1 pending)"
    folder.on_runner_event({"type": "log", "line": page.format(n=3)})
    first_start = node(folder, "enrich")["started_at"]
    folder.on_runner_event(
        ex(
            type="map.progress",
            artifactTableNamespace="leads",
            totalRows=2000,
            completedRows=700,
            failedRows=20,
        )
    )
    clock.ms += 50
    folder.on_runner_event({"type": "log", "line": page.format(n=5)})  # the next page: page-local 5
    wire = node(folder, "enrich")
    assert wire["completed"] == 700
    assert wire["failed"] == 20
    assert wire["total"] == 2000  # the larger known total stays
    assert wire["waiting_rows"] == 2000 - 720
    assert wire["started_at"] == first_start


def test_map_start_for_an_unknown_namespace_changes_nothing() -> None:
    folder, _, _ = make()
    folder.on_runner_event(
        {
            "type": "log",
            "line": "Starting map over 5 items now (table namespace: leadsX; 0 already satisfied; 5 pending)",
        }
    )
    assert "enrich" not in folder.state.nodes
    assert folder.active_map_node_id is None


def test_perf_setup_resolves_the_field_namespace_of_an_unnamed_dataset_step() -> None:
    folder, _, _ = make()
    folder.on_runner_event(
        {"type": "log", "line": "[2026-01-01T00:00:00.000Z] [perf] runtime map setup table=scores_9 rows=12"}
    )
    wire = node(folder, "dataset-3")
    assert wire["total"] == 12
    assert wire["waiting_rows"] == 12
    assert wire["message"] == "0 / 12 rows processed"


@pytest.mark.parametrize("sent_as", [dict, MappingProxyType], ids=["written-out fold", "general fold"])
def test_tool_batch_marks_calls_in_flight_on_the_active_map_only(sent_as: type[Mapping[str, Any]]) -> None:
    folder, _, _ = make()
    folder.on_runner_event(sent_as({"type": "log", "line": "Executing tool batch b:1: 25 calls"}))
    assert folder.state.nodes.get("enrich") is None  # no active map yet
    folder.on_runner_event(
        ex(type="map.progress", artifactTableNamespace="leads", totalRows=100, completedRows=80, failedRows=5)
    )
    folder.on_runner_event(sent_as({"type": "log", "line": "Executing tool batch b:2: 25 calls"}))
    wire = node(folder, "enrich")
    assert wire["active_rows"] == 15  # capped by what is left
    assert wire["started_rows"] == 100
    assert wire["waiting_rows"] == 0
    assert wire["message"] == "15 calls in flight · 85 / 100 rows processed"
    folder.on_runner_event({"type": "log", "line": "Executing tool batch b:3: 0 calls"})
    assert node(folder, "enrich")["active_rows"] == 15


# -- execution events ------------------------------------------------------------------------------


def test_map_started_by_node_id_and_progress_then_completed() -> None:
    folder, scheduled, clock = make()
    folder.on_runner_event(ex(type="map.started", mapNodeId="enrich", totalRows=10, completedRows=2))
    assert node(folder, "enrich")["message"] == "2 / 10 rows processed"
    assert node(folder, "enrich")["waiting_rows"] == 8
    folder.on_runner_event(ex(type="map.progress", mapNodeId="enrich", completedRows=6, failedRows=1))
    wire = node(folder, "enrich")
    assert (wire["completed"], wire["failed"], wire["total"]) == (6, 1, 10)
    assert (wire["started_rows"], wire["active_rows"], wire["waiting_rows"]) == (7, 0, 3)
    clock.ms = 5_000
    folder.on_runner_event(
        ex(type="map.completed", mapNodeId="enrich", totalRows=10, completedRows=9, failedRows=1)
    )
    wire = node(folder, "enrich")
    assert wire["completed_at"] == 5_000
    assert (wire["started_rows"], wire["active_rows"], wire["waiting_rows"]) == (10, 0, 0)
    assert folder.lifecycle.state("enrich") is StepState.COMPLETED
    assert folder.active_map_node_id is None
    assert scheduled and not any(scheduled)


def test_map_progress_keeps_started_rows_monotonic() -> None:
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="map.progress", mapNodeId="enrich", totalRows=100, completedRows=10, failedRows=0)
    )
    folder.on_runner_event({"type": "log", "line": "Executing tool batch b: 30 calls"})
    folder.on_runner_event(
        ex(type="map.progress", mapNodeId="enrich", totalRows=100, completedRows=20, failedRows=0)
    )
    wire = node(folder, "enrich")
    assert wire["started_rows"] == 40
    assert wire["active_rows"] == 20
    assert wire["waiting_rows"] == 60


def test_map_preparing_and_resumed() -> None:
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="map.preparing", artifactTableNamespace="leads_a", totalRows=50, completedRows=0)
    )
    assert node(folder, "enrich")["message"] == "Preparing durable table..."
    folder.on_runner_event(ex(type="map.progress", mapNodeId="enrich", completedRows=10, failedRows=4))
    folder.on_runner_event(ex(type="map.resumed", logicalNamespace="leads", totalRows=50, completedRows=10))
    wire = node(folder, "enrich")
    # The resume leaves the failed rows it does not mention as they were.
    assert (wire["completed"], wire["failed"], wire["waiting_rows"]) == (10, 4, 36)
    assert wire["artifact_table_namespace"] == "leads_a"


def test_map_failed_fails_the_step() -> None:
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="map.failed", mapNodeId="enrich", totalRows=10, completedRows=3, failedRows=7)
    )
    assert folder.lifecycle.state("enrich") is StepState.FAILED
    wire = node(folder, "enrich")
    assert wire["failed"] == 7 and "completed_at" in wire and "started_at" in wire
    assert wire["node_io"] == {"error": "map failed"}  # how the ledger tells failed from completed


def test_map_suspended_updates_counts_without_settling() -> None:
    folder, _, _ = make()
    folder.on_runner_event(ex(type="map.started", mapNodeId="enrich", totalRows=10, completedRows=0))
    folder.on_runner_event(
        ex(type="map.suspended", mapNodeId="enrich", totalRows=10, completedRows=4, failedRows=1)
    )
    wire = node(folder, "enrich")
    assert (wire["completed"], wire["failed"], wire["message"]) == (4, 1, "5 / 10 rows processed")
    assert "completed_at" not in wire
    assert folder.lifecycle.state("enrich") is StepState.STARTED


def test_map_event_for_an_unresolvable_node_is_ignored() -> None:
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="map.progress", mapNodeId=None, artifactTableNamespace="other", completedRows=1)
    )
    folder.on_runner_event(ex(type="map.progress", mapNodeId="  ", completedRows=1, failedRows=0))
    assert set(folder.state.nodes) == {"load"}


def test_map_events_and_frames_naming_a_step_outside_the_contract_are_junk_named_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    folder, _, _ = make()
    for kind in ("map.started", "map.progress", "map.completed"):
        folder.on_runner_event(ex(type=kind, mapNodeId="inner-map", totalRows=4, completedRows=1))
    frame = {"mapNodeId": "ghost", "status": "completed", "completedRowsCount": 3, "totalRows": 3}
    folder.reconcile({"checkpoint": {"mapFrames": {"f": frame}}}, [])
    assert set(folder.state.nodes) == {"load"}
    assert folder.sanitizer.counts["line or frame naming a step outside the contract"] == 4
    named = [r.getMessage() for r in caplog.records if "does not list" in r.getMessage()]
    assert len(named) == 2
    assert "'inner-map'" in named[0] and "a map.started event" in named[0]
    assert "'ghost'" in named[1] and "a checkpoint frame" in named[1]


def test_without_a_contract_a_map_names_its_own_step() -> None:
    folder = EventFolder(ProgressState(now_ms=lambda: 1), StaticPipeline(None))
    folder.on_runner_event(
        ex(type="map.progress", mapNodeId="inner-map", totalRows=4, completedRows=1, failedRows=0)
    )
    assert node(folder, "inner-map")["completed"] == 1


def test_tool_call_events_start_and_fail_the_tool_step() -> None:
    folder, scheduled, _ = make()
    folder.on_runner_event(ex(type="tool.call.started", toolId="slack.post"))
    assert folder.lifecycle.state("notify") is StepState.STARTED
    assert "started_at" in node(folder, "notify")
    scheduled.clear()
    folder.on_runner_event(ex(type="tool.call.settled", toolId="slack.post", outcome="failed"))
    assert folder.lifecycle.state("notify") is StepState.FAILED
    assert node(folder, "notify")["node_io"] == {"error": "tool slack.post failed"}
    assert True in scheduled  # a failure is flushed at once


@pytest.mark.parametrize("outcome", ["succeeded", "completed"])
def test_a_settled_tool_step_stays_completed_when_the_run_fails_later(outcome: str) -> None:
    folder, _, _ = make()
    folder.on_runner_event(ex(type="tool.call.started", toolId="slack.post"))
    folder.on_runner_event(ex(type="tool.call.settled", toolId="slack.post", outcome=outcome))
    assert folder.step_states()["notify"] is StepState.COMPLETED
    folder.on_runner_event(ex(type="tool.call.settled", toolId="slack.post", outcome="failed"))
    folder.finish("failed")
    assert folder.step_states()["notify"] is StepState.COMPLETED
    assert "error" not in (node(folder, "notify").get("node_io") or {})


def test_a_map_start_completes_every_open_step_before_it_and_none_after() -> None:
    folder, _, _ = make()
    folder.on_runner_event(ex(type="map.started", mapNodeId="enrich", totalRows=3, completedRows=0))
    folder.on_runner_event(ex(type="tool.call.started", toolId="slack.post"))
    folder.on_runner_event(ex(type="map.started", mapNodeId="scores_ns", totalRows=1, completedRows=0))
    assert folder.step_states()["notify"] is StepState.STARTED  # "scores_ns" is no step: nothing closes
    folder.on_runner_event(ex(type="map.started", mapNodeId="enrich", totalRows=3, completedRows=0))
    folder.on_runner_event(
        ex(type="map.started", artifactTableNamespace="scores", totalRows=1, completedRows=0)
    )
    states = folder.step_states()
    assert [states[n] for n in ("load", "enrich", "notify")] == [StepState.COMPLETED] * 3
    folder.finish("failed")
    assert list(folder.step_states().values())[-1] is StepState.FAILED


def test_a_map_settles_with_one_patch_from_its_event_or_from_reconciliation() -> None:
    by_event, _, _ = make()
    by_event.on_runner_event(ex(type="map.started", mapNodeId="enrich", totalRows=10, completedRows=0))
    by_event.on_runner_event(
        ex(type="map.completed", mapNodeId="enrich", totalRows=10, completedRows=6, failedRows=1)
    )
    by_frames, _, _ = make()
    by_frames.on_runner_event(ex(type="map.started", mapNodeId="enrich", totalRows=10, completedRows=0))
    frame = {"mapNodeId": "enrich", "status": "completed", "totalRows": 10, "completedRowsCount": 6}
    by_frames.reconcile({"checkpoint": {"mapFrames": {"f": {**frame, "failedRowsCount": 1}}}}, [])
    keys = ("completed", "failed", "total", "active_rows", "waiting_rows", "message")
    assert [node(by_event, "enrich")[k] for k in keys] == [node(by_frames, "enrich")[k] for k in keys]
    # The map's own end says which rows it settled (6 + 1 of 10); reconciliation keeps the total.
    assert node(by_event, "enrich")["started_rows"] == 7
    assert node(by_frames, "enrich")["started_rows"] == 10
    assert by_frames.step_states()["enrich"] is StepState.COMPLETED


def test_activity_observed_and_dataset_lifecycle_are_one_shot_and_forced() -> None:
    folder, scheduled, _ = make()
    folder.on_runner_event(ex(type="activity.observed", observation={"activityId": "a", "observedAt": 1}))
    folder.on_runner_event(ex(type="activity.observed", observation={"activityId": "a", "observedAt": 2}))
    folder.on_runner_event(ex(type="dataset.lifecycle", tableNamespace="leads", phase="created"))
    folder.on_runner_event(ex(type="activity.observed", observation={"observedAt": 3}))  # no activityId
    assert scheduled.count(True) == 3
    snap = folder.state.snapshot()
    assert snap.activity_observations == [{"activityId": "a", "observedAt": 2}]
    assert snap.dataset_lifecycle_events == [
        {"type": "dataset.lifecycle", "tableNamespace": "leads", "phase": "created"}
    ]


def test_docflow_hit_sets_start_and_completion() -> None:
    folder, scheduled, _ = make()
    folder.on_runner_event(ex(type="docflow.node.hit", nodeId="d1", at=77))
    assert node(folder, "d1") == {"started_at": 77, "completed_at": 77, "updated_at": 1_000}
    assert scheduled[-2:] == [True, False]


def test_docflow_started_completed_and_failed() -> None:
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="docflow.node.started", nodeId="d1", attempt=1, invocationId="inv:1", inputs={"a": 1}, at=10)
    )
    assert node(folder, "d1") == {
        "started_at": 10,
        "node_io": {"attempt": 1, "invocation_id": "inv:1", "inputs": {"a": 1}},
        "updated_at": 10,
    }
    folder.on_runner_event(
        ex(
            type="docflow.node.completed",
            nodeId="d1",
            attempt=1,
            invocationId="inv:1",
            inputs={"a": 1},
            outputs={"b": 2},
            outputsTruncated=True,
            at=20,
        )
    )
    wire = node(folder, "d1")
    assert wire["started_at"] == 10 and wire["completed_at"] == 20
    assert wire["node_io"] == {
        "attempt": 1,
        "invocation_id": "inv:1",
        "inputs": {"a": 1},
        "outputs": {"b": 2},
        "outputs_truncated": True,
        "error": None,
    }
    folder.on_runner_event(
        ex(type="docflow.node.failed", nodeId="d1", attempt=2, invocationId="inv:0", error="boom", at=30)
    )
    assert node(folder, "d1")["node_io"]["error"] == "boom"
    assert node(folder, "d1")["completed_at"] == 30


def test_docflow_started_of_a_new_invocation_replaces_the_node() -> None:
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="docflow.node.completed", nodeId="d1", attempt=1, invocationId="i:1", outputs=1, at=20)
    )
    folder.on_runner_event(ex(type="docflow.node.started", nodeId="d1", attempt=1, invocationId="i:2", at=30))
    assert node(folder, "d1") == {
        "started_at": 30,
        "node_io": {"attempt": 1, "invocation_id": "i:2"},
        "updated_at": 30,
    }


@pytest.mark.parametrize(
    ("attempt", "invocation", "applied"),
    [
        (0, "i:9", False),
        (1, "i:2", False),
        (1, "i:3", True),
        (1, "i:4", True),
        (2, "i:0", True),
        (1, None, False),
    ],
)
def test_docflow_ordering_by_attempt_then_invocation(
    attempt: int, invocation: str | None, applied: bool
) -> None:
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="docflow.node.completed", nodeId="d", attempt=1, invocationId="i:3", outputs="old", at=5)
    )
    folder.on_runner_event(
        ex(
            type="docflow.node.completed",
            nodeId="d",
            attempt=attempt,
            invocationId=invocation,
            outputs="new",
            at=6,
        )
    )
    assert (node(folder, "d")["node_io"]["outputs"] == "new") is applied


def test_row_update_is_ignored() -> None:
    folder, scheduled, _ = make()
    scheduled.clear()
    before = {k: v.to_wire() for k, v in folder.state.nodes.items()}
    folder.on_runner_event(
        {"type": "row_update", "tableNamespace": "leads", "rowKey": "1", "status": "completed"}
    )
    assert (
        {k: v.to_wire() for k, v in folder.state.nodes.items()} == before
        and not scheduled
        and folder.state.log_total_count == 0
    )


@pytest.mark.parametrize(
    "junk",
    [
        None,
        3,
        "log",
        [],
        {},
        {"type": 5},
        {"type": "log"},
        {"type": "log", "line": 5},
        {"type": "execution_event"},
        {"type": "execution_event", "event": "x"},
        {"type": "execution_event", "event": {"type": None}},
        ex(type="map.progress", mapNodeId="enrich", completedRows="many"),
        ex(type="map.progress", mapNodeId="enrich", completedRows=1, failedRows=0, totalRows=float("nan")),
        ex(type="map.started", mapNodeId=["x"]),
        ex(type="map.started", mapNodeId="enrich", totalRows="x"),
        ex(type="docflow.node.started", nodeId="d", attempt="1"),
        ex(type="docflow.node.started", nodeId=3, attempt=1),
        ex(type="activity.observed", observation=[1]),
        ex(type="tool.call.started", toolId=None),
        ex(type="docflow.node.completed", nodeId="d", attempt=True),
        {"type": "result"},
        {"type": "mystery", "line": "x"},
    ],
)
def test_malformed_events_are_ignored_without_raising(junk: object) -> None:
    folder, _, _ = make()
    folder.on_runner_event(junk)
    assert set(folder.state.nodes) - {"load", "enrich"} == set()
    assert "d" not in folder.state.nodes
