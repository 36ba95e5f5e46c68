"""Folding at its edges: maps without a total or with a total of one row, one call in flight, more
rows settled than the total says, failed steps keeping their I/O, junk counted per kind.

Each test names the rule it checks; with test_folding.py they are what the mutation run
(`python -m tests.mutation reporter/folding.py`) measures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import pytest

from ledger.validate import LIVE_LOG_TAIL_LIMIT
from reporter.folding import EventFolder
from reporter.lifecycle import StepState
from reporter.pipeline import StaticPipeline
from reporter.state import ProgressState
from tests.unit.reporter.test_folding import Clock, ex, make, node

Batch = Callable[[int], Mapping[str, Any]]


@pytest.fixture(params=[dict, MappingProxyType], ids=["written-out fold", "general fold"])
def batch(request: pytest.FixtureRequest) -> Batch:
    """A tool-batch line of `calls` calls, as decoded JSON (a dict: the fold's written-out path
    takes it) and as another mapping (its general path does): both must fold alike."""
    return lambda calls: request.param({"type": "log", "line": f"Executing tool batch b:1: {calls} calls"})


def start_log(total: int, satisfied: int) -> dict[str, Any]:
    return {
        "type": "log",
        "line": f"Starting map over {total} items in pages (table namespace: leads_r1; {satisfied} already "
        f"satisfied; {total - satisfied} pending)",
    }


# -- map.progress ------------------------------------------------------------------------------------


def test_map_progress_without_a_total_names_no_total_and_no_waiting_rows() -> None:
    """Until a total is known a map has none: no `total`, no `waiting_rows`, no message; nothing has
    started before a row settles."""
    folder, _, _ = make()
    folder.on_runner_event(ex(type="map.progress", mapNodeId="enrich", completedRows=0, failedRows=0))
    wire = node(folder, "enrich")
    assert "total" not in wire and "waiting_rows" not in wire and "message" not in wire
    assert (wire["completed"], wire["started_rows"], wire["active_rows"], wire["completed_rows"]) == (
        0,
        0,
        0,
        0,
    )


def test_map_progress_of_a_one_row_map() -> None:
    """A total of one row is a total: named, with its waiting row and its message."""
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="map.progress", mapNodeId="enrich", totalRows=1, completedRows=0, failedRows=0)
    )
    wire = node(folder, "enrich")
    assert (wire["total"], wire["waiting_rows"], wire["message"]) == (1, 1, "0 / 1 rows processed")


def test_map_progress_records_counts_namespace_and_message() -> None:
    """Each progress event sets the completed rows, the table namespace it names and the message."""
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="map.progress", artifactTableNamespace="leads_7", totalRows=10, completedRows=6, failedRows=1)
    )
    wire = node(folder, "enrich")
    assert (wire["completed_rows"], wire["artifact_table_namespace"]) == (6, "leads_7")
    assert wire["message"] == "7 / 10 rows processed"
    folder.on_runner_event(
        ex(type="map.progress", mapNodeId="enrich", totalRows=10, completedRows=10, failedRows=0)
    )
    wire = node(folder, "enrich")
    assert (wire["waiting_rows"], wire["message"]) == (0, "10 / 10 rows processed")


def test_waiting_rows_never_go_below_zero_when_more_rows_settle_than_the_total() -> None:
    """A runner may report more settled rows than its total: nothing is waiting then."""
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="map.progress", mapNodeId="enrich", totalRows=2, completedRows=3, failedRows=0)
    )
    assert node(folder, "enrich")["waiting_rows"] == 0


# -- map starts, suspensions, settlements -----------------------------------------------------------


def test_a_map_started_without_counts_starts_from_zero() -> None:
    """`map.started` without `completedRows` or `totalRows`: nothing completed, nothing active, no
    total and no waiting rows, and the step starts."""
    folder, _, _ = make()
    folder.on_runner_event(ex(type="map.started", mapNodeId="enrich"))
    wire = node(folder, "enrich")
    assert (wire["completed"], wire["active_rows"], wire["started_rows"]) == (0, 0, 0)
    assert "total" not in wire and "waiting_rows" not in wire
    assert folder.lifecycle.state("enrich") is StepState.STARTED


def test_a_map_started_with_every_row_done_waits_for_none() -> None:
    """Resumed with every row already done, a map has no waiting rows."""
    folder, _, _ = make()
    folder.on_runner_event(ex(type="map.resumed", mapNodeId="enrich", totalRows=5, completedRows=5))
    assert node(folder, "enrich")["waiting_rows"] == 0


def test_a_suspended_map_with_nothing_completed_reports_zero() -> None:
    """`map.suspended` with `completedRows: 0` completed nothing."""
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="map.suspended", mapNodeId="enrich", totalRows=4, completedRows=0, failedRows=1)
    )
    assert (node(folder, "enrich")["completed"], node(folder, "enrich")["completed_rows"]) == (0, 0)


def test_a_map_completed_event_alone_completes_its_step_with_its_counts() -> None:
    """`map.completed` settles the step even without a start event before it: its counts as given
    (0 completed is 0; no total is none) and its table namespace."""
    folder, _, _ = make()
    folder.on_runner_event(
        ex(
            type="map.completed",
            mapNodeId="enrich",
            artifactTableNamespace="leads_9",
            completedRows=0,
            failedRows=3,
        )
    )
    wire = node(folder, "enrich")
    assert (wire["completed"], wire["failed"], wire.get("total")) == (0, 3, None)
    assert wire["artifact_table_namespace"] == "leads_9"
    assert folder.lifecycle.state("enrich") is StepState.COMPLETED
    assert "started_at" in wire  # a step that settles without a start event starts as it settles


# -- the map-start log line --------------------------------------------------------------------------


def test_map_start_log_of_one_item_and_of_none() -> None:
    """A map over one item has a total of 1; a map over 0 items has no total and no waiting rows,
    and nothing started."""
    folder, _, _ = make()
    folder.on_runner_event(start_log(1, 0))
    wire = node(folder, "enrich")
    assert (wire["total"], wire["waiting_rows"], wire["started_rows"]) == (1, 1, 0)
    folder, _, _ = make()
    folder.on_runner_event(start_log(0, 0))
    wire = node(folder, "enrich")
    assert "total" not in wire and "waiting_rows" not in wire
    assert wire["started_rows"] == 0


def test_map_start_log_with_every_item_satisfied_waits_for_none() -> None:
    """Every item already satisfied: no waiting rows."""
    folder, _, _ = make()
    folder.on_runner_event(start_log(5, 5))
    assert node(folder, "enrich")["waiting_rows"] == 0


# -- tool batches -------------------------------------------------------------------------------------


def test_one_call_in_flight_is_one_active_row(batch: Batch) -> None:
    """A batch of exactly one call puts one row in flight."""
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="map.progress", mapNodeId="enrich", totalRows=10, completedRows=0, failedRows=0)
    )
    folder.on_runner_event(batch(1))
    wire = node(folder, "enrich")
    assert (wire["active_rows"], wire["started_rows"], wire["waiting_rows"]) == (1, 1, 9)
    assert wire["message"] == "1 calls in flight · 0 / 10 rows processed"
    assert wire["completed_rows"] == 0


def test_calls_in_flight_on_a_map_without_a_total_are_all_active(batch: Batch) -> None:
    """Without a total every call is an active row; no waiting rows, and the message names only the
    calls."""
    folder, _, _ = make()
    folder.on_runner_event(ex(type="map.progress", mapNodeId="enrich", completedRows=0, failedRows=0))
    folder.on_runner_event(batch(4))
    wire = node(folder, "enrich")
    assert (wire["active_rows"], wire["started_rows"]) == (4, 4)
    assert "waiting_rows" not in wire
    assert wire["message"] == "4 calls in flight"


def test_calls_in_flight_are_capped_by_the_rows_left_at_a_one_row_total(batch: Batch) -> None:
    """With a total of one row, five calls put one row in flight."""
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="map.progress", mapNodeId="enrich", totalRows=1, completedRows=0, failedRows=0)
    )
    folder.on_runner_event(batch(5))
    wire = node(folder, "enrich")
    assert (wire["active_rows"], wire["started_rows"], wire["waiting_rows"]) == (1, 1, 0)


def test_calls_in_flight_on_a_settled_map_put_no_row_in_flight(batch: Batch) -> None:
    """When every row settled (or more than the total did), a batch puts no row in flight, the rows
    started stay at most the total and nothing waits."""
    for total, completed in ((10, 10), (10, 12), (1, 2)):
        folder, _, _ = make()
        folder.on_runner_event(
            ex(
                type="map.progress",
                mapNodeId="enrich",
                totalRows=total,
                completedRows=completed,
                failedRows=0,
            )
        )
        folder.on_runner_event(batch(3))
        wire = node(folder, "enrich")
        assert (wire["active_rows"], wire["started_rows"], wire["waiting_rows"]) == (0, total, 0)


def test_waiting_rows_after_a_batch_count_the_rows_not_started(batch: Batch) -> None:
    """total - settled - in flight rows wait: 100 - 10 - 5 = 85, and exactly 1 when one is left."""
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="map.progress", mapNodeId="enrich", totalRows=100, completedRows=10, failedRows=0)
    )
    folder.on_runner_event(batch(5))
    assert node(folder, "enrich")["waiting_rows"] == 85
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="map.progress", mapNodeId="enrich", totalRows=10, completedRows=4, failedRows=0)
    )
    folder.on_runner_event(batch(5))
    assert node(folder, "enrich")["waiting_rows"] == 1


def test_rows_started_never_go_down_with_a_smaller_batch(batch: Batch) -> None:
    """Started rows are monotonic: a batch of 5 after one of 30 leaves 30 started."""
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="map.progress", mapNodeId="enrich", totalRows=100, completedRows=0, failedRows=0)
    )
    folder.on_runner_event(batch(30))
    folder.on_runner_event(batch(5))
    assert node(folder, "enrich")["started_rows"] == 30


def test_a_tool_batch_with_no_active_map_changes_no_node(batch: Batch) -> None:
    """A batch line before any map started, or after the map settled, touches no node."""
    folder, _, _ = make()
    before = {k: v.to_wire() for k, v in folder.state.nodes.items()}
    folder.on_runner_event(batch(3))
    assert {k: v.to_wire() for k, v in folder.state.nodes.items()} == before


# -- steps that fail ---------------------------------------------------------------------------------


def test_a_failed_step_keeps_its_node_io_and_gets_an_error() -> None:
    """A step that fails keeps the I/O it already had, keeps its own error if it has one, and else
    gets the failure's reason or a generic text."""
    folder, _, _ = make()
    folder.on_runner_event(ex(type="tool.call.started", toolId="slack.post"))
    folder.state.set_node_progress("notify", {"node_io": {"attempt": 2, "inputs": {"q": 1}}})
    folder.on_runner_event(ex(type="tool.call.settled", toolId="slack.post", outcome="failed"))
    assert node(folder, "notify")["node_io"] == {
        "attempt": 2,
        "inputs": {"q": 1},
        "error": "tool slack.post failed",
    }

    folder, _, _ = make()
    folder.on_runner_event(ex(type="tool.call.started", toolId="slack.post"))
    folder.state.set_node_progress("notify", {"node_io": {"error": "rate limited"}})
    folder.finish("failed")
    assert node(folder, "notify")["node_io"] == {"error": "rate limited"}


# -- docflow -----------------------------------------------------------------------------------------


def test_docflow_event_with_a_blank_node_id_is_ignored() -> None:
    """A node id of only spaces names no node."""
    folder, _, _ = make()
    nodes = set(folder.state.nodes)
    folder.on_runner_event(ex(type="docflow.node.started", nodeId="   ", attempt=0, at=5))
    assert set(folder.state.nodes) == nodes


def test_docflow_event_without_a_time_is_stamped_now() -> None:
    """An event without `at` happened now."""
    folder, _, clock = make()
    folder.on_runner_event(ex(type="docflow.node.started", nodeId="d1", attempt=0))
    assert node(folder, "d1")["started_at"] == clock.ms


def test_docflow_attempt_zero_applies_to_a_node_whose_io_names_no_attempt() -> None:
    """Stored I/O without an attempt orders before attempt 0: the event applies."""
    folder, _, _ = make()
    folder.state.set_node_progress("d1", {"node_io": {"inputs": "old"}})
    folder.on_runner_event(ex(type="docflow.node.completed", nodeId="d1", attempt=0, outputs="new", at=5))
    assert node(folder, "d1")["node_io"]["outputs"] == "new"


def test_docflow_truncated_inputs_are_flagged() -> None:
    """`inputsTruncated` from the runner is kept as `inputs_truncated: true` in the node's I/O."""
    folder, _, _ = make()
    folder.on_runner_event(
        ex(type="docflow.node.started", nodeId="d1", attempt=0, inputs={"a": 1}, inputsTruncated=True, at=5)
    )
    assert node(folder, "d1")["node_io"]["inputs_truncated"] is True


def test_docflow_settlement_is_flushed_at_once() -> None:
    """A docflow node that settles asks for a forced flush (its I/O is one-shot news)."""
    folder, scheduled, _ = make()
    folder.on_runner_event(ex(type="docflow.node.started", nodeId="d1", attempt=0, at=5))
    scheduled.clear()
    folder.on_runner_event(ex(type="docflow.node.completed", nodeId="d1", attempt=0, at=6))
    assert scheduled[0] is True


def test_docflow_completion_keeps_the_start_or_starts_at_its_own_time() -> None:
    """A completion keeps the node's start; with no start known it started when it completed."""
    folder, _, _ = make()
    folder.on_runner_event(ex(type="docflow.node.completed", nodeId="d1", attempt=0, at=6))
    assert (node(folder, "d1")["started_at"], node(folder, "d1")["completed_at"]) == (6, 6)


# -- what the fold accepts ---------------------------------------------------------------------------


def test_events_that_are_mappings_but_not_dicts_are_folded() -> None:
    """Any mapping is an event (a decoder may hand out read-only mappings), the inner one too."""
    folder, _, _ = make()
    inner = MappingProxyType(
        {"type": "map.started", "mapNodeId": "enrich", "totalRows": 3, "completedRows": 0}
    )
    folder.on_runner_event(MappingProxyType({"type": "execution_event", "event": inner}))
    assert node(folder, "enrich")["total"] == 3


def test_a_log_event_without_a_string_line_appends_nothing() -> None:
    """A log event's line must be a non-empty string; one that is not is ignored whole (no flush)."""
    folder, scheduled, _ = make()
    scheduled.clear()
    for line in (5, ""):
        folder.on_runner_event({"type": "log", "line": line})
    assert folder.state.log_total_count == 0
    assert scheduled == []


def test_a_map_event_namespace_is_kept_only_when_storable() -> None:
    """A map event's table namespace is recorded only when it is a non-empty string the ledger can
    store; the total it names sets the upload interval."""
    for namespace in ("", "bad\x00name"):
        folder, _, _ = make()
        folder.on_runner_event(
            ex(
                type="map.progress",
                mapNodeId="enrich",
                artifactTableNamespace=namespace,
                totalRows=50_000,
                completedRows=1,
                failedRows=0,
            )
        )
        assert "artifact_table_namespace" not in node(folder, "enrich")
        assert folder.state.total_rows == 50_000


def test_junk_one_shot_events_are_dropped_and_counted_per_kind() -> None:
    """A dataset lifecycle event the ledger would refuse is dropped and counted under its kind; an
    activity observation the runner protocol itself refuses (a non-text `activityId`) is a runner
    line the protocol refuses, skipped whole and counted as one."""
    folder, _, _ = make()
    folder.on_runner_event(ex(type="activity.observed", observation={"activityId": 7}))
    folder.on_runner_event(ex(type="dataset.lifecycle", payload=float("nan")))
    assert folder.sanitizer.counts == {"runner line": 1, "dataset lifecycle event": 1}


# -- the end of a run --------------------------------------------------------------------------------


def test_reconciliation_stamps_now_and_settles_the_step() -> None:
    """A map settled from the checkpoint or the sheet outcomes completes at the reconciliation's time
    and its step is settled."""
    folder, _, clock = make()
    clock.ms = 7_000
    folder.reconcile(
        {
            "checkpoint": {
                "mapFrames": {"f": {"status": "completed", "mapNodeId": "enrich", "completedRowsCount": 2}}
            }
        },
        [],
    )
    assert node(folder, "enrich")["completed_at"] == 7_000
    assert folder.lifecycle.state("enrich") is StepState.COMPLETED
    folder, _, clock = make()
    clock.ms = 8_000
    folder.reconcile(None, [{"table_namespace": "leads", "completed": 2, "failed": 0, "total": 2}])
    assert (node(folder, "enrich")["started_at"], node(folder, "enrich")["completed_at"]) == (8_000, 8_000)


def test_observations_applied_at_the_end_default_to_now() -> None:
    """A durable observation without times is stamped at the moment it is applied."""
    folder, _, clock = make()
    clock.ms = 9_000
    folder.apply_observations([{"node_id": "d1", "attempt": 0, "status": "completed"}])
    assert node(folder, "d1")["completed_at"] == 9_000


def test_restore_takes_each_stored_node_and_its_total() -> None:
    """A continuing reporter takes every node the ledger holds (junk entries skipped), and the largest
    total sets the upload interval."""
    folder, _, _ = make()
    folder.restore({"enrich": {"completed": 3, "total": 50_000}, 7: {"completed": 1}, "junk": 5})
    assert node(folder, "enrich")["completed"] == 3
    assert folder.state.total_rows == 50_000
    assert set(folder.state.nodes) == {"load", "enrich"}
    folder.restore(["not", "a", "mapping"])
    assert set(folder.state.nodes) == {"load", "enrich"}


def test_a_restored_node_outside_the_pipeline_settles_again_by_its_fields() -> None:
    """A continuing reporter takes a node the pipeline does not track without the state the ledger
    derived for it: the reporter never states such a node, so a later failure of the same
    invocation fails it, as it would have for the reporter that began the attempt."""
    state = ProgressState(now_ms=Clock())
    folder = EventFolder(state, StaticPipeline({"staticPipeline": {"substeps": []}}), schedule=lambda _: None)
    stored = {"completed_at": 5, "started_at": 5, "node_io": {"attempt": 0}, "state": "completed"}
    folder.restore({"n1": {**stored, "reason": "kept by the ledger"}})
    assert "state" not in node(folder, "n1") and "reason" not in node(folder, "n1")
    folder.on_runner_event(ex(type="docflow.node.failed", nodeId="n1", attempt=0))
    assert node(folder, "n1")["node_io"]["error"] == "docflow node failed"
    assert "state" not in node(folder, "n1")


def test_a_restored_step_of_the_pipeline_keeps_its_state() -> None:
    """A step the pipeline tracks keeps the state the ledger holds: its transitions are the
    reporter's own, stated explicitly, and a settled one is not reported again."""
    folder, _, _ = make()
    folder.restore({"load": {"started_at": 1, "completed_at": 2, "state": "cancelled", "reason": "why"}})
    assert node(folder, "load")["state"] == "cancelled" and node(folder, "load")["reason"] == "why"
    assert folder.lifecycle.state("load") is StepState.CANCELLED


# -- junk and the inline checks --------------------------------------------------------------------


def test_a_log_or_row_update_line_with_a_field_that_is_not_text_is_junk() -> None:
    """Counted as a junk runner line and skipped whole: the line is not kept, nothing is folded."""
    folder, scheduled, _ = make()
    scheduled.clear()
    folder.on_runner_event({"type": "log", "line": "kept?", "source": 5})
    folder.on_runner_event({"type": "row_update", "tableNamespace": 5, "rowKey": "1"})
    folder.on_runner_event({"type": "row_update", "tableNamespace": "leads", "rowKey": 1})
    assert folder.sanitizer.counts["runner line"] == 3
    assert folder.state.log_total_count == 0 and not scheduled


def fold_all(events: list[dict[str, Any]], *, as_mapping: bool, mode: Any) -> tuple[Any, ...]:
    folder, scheduled, _ = make(mode)
    for event in events:
        folder.on_runner_event(MappingProxyType(event) if as_mapping else event)
    state = folder.state
    nodes = {k: v.to_wire() for k, v in state.nodes.items()}
    return list(state.logs), state.log_total_count, nodes, scheduled, dict(folder.sanitizer.counts)


@pytest.mark.parametrize("mode", ["progress_reporter", "direct_worker"])
def test_a_line_given_as_any_mapping_folds_as_the_same_dict(mode: str) -> None:
    """The runner's lines are plain dicts, checked inline; any other mapping takes the general path,
    which must fold it the same way: kept or not as its mode and source say, parsed for map starts,
    a flush asked for, junk counted."""
    events: list[dict[str, Any]] = [
        {"type": "log", "line": "plain", "source": "runner"},
        {"type": "log", "line": "host line", "source": "worker"},
        {"type": "log", "line": "[perf-trace] setup 40ms", "source": "worker"},
        {"type": "log", "line": "no source"},
        start_log(10, 2),
        {"type": "log", "line": ""},
        {"type": "log", "line": 7},
        {"type": "row_update", "tableNamespace": "leads", "rowKey": "1"},
        ex(type="map.progress", mapNodeId="enrich", totalRows=10, completedRows=3, failedRows=0),
    ]
    as_dicts = fold_all(events, as_mapping=False, mode=mode)
    assert as_dicts == fold_all(events, as_mapping=True, mode=mode)
    logs, total, nodes, scheduled, counts = as_dicts
    assert total == len(logs) == (5 if mode == "progress_reporter" else 4)
    assert nodes["enrich"]["completed"] == 3 and counts["runner line"] == 2
    assert scheduled[:5] == [False] * 5


def test_an_observation_the_ledger_would_refuse_is_counted_as_an_activity_observation() -> None:
    folder, _, _ = make()
    big = "x" * folder.sanitizer.bounds.value_bytes  # more than one value of an upload may take
    folder.on_runner_event(
        ex(type="activity.observed", observation={"activityId": "a", "observedAt": 1, "v": big})
    )
    assert folder.sanitizer.counts["activity observation"] == 1
    assert folder.state.snapshot().activity_observations == []


@pytest.mark.parametrize("node_id", ["  ", "bad\x00id", "\ud800"])
def test_a_docflow_event_on_a_blank_or_unstorable_node_id_is_ignored(node_id: str) -> None:
    folder, _, _ = make()
    folder.on_runner_event(ex(type="docflow.node.hit", nodeId=node_id, at=77))
    assert node_id not in folder.state.nodes


@pytest.mark.parametrize(
    ("total", "completed", "failed", "started"),
    [
        (5, 0, 0, 0),  # settled before any row started
        (None, 3, 1, 4),  # no total: the settled rows
        (0, 3, 0, 3),
        (1, 2, 0, 1),  # more settled than the total: the total, never more
        (10, 6, 1, 7),
    ],
)
def test_a_settled_map_started_the_rows_it_settled_within_its_total(
    total: int | None, completed: int, failed: int, started: int
) -> None:
    folder, _, _ = make()
    event = ex(type="map.completed", mapNodeId="enrich", completedRows=completed, failedRows=failed)
    if total is not None:
        event["event"]["totalRows"] = total
    folder.on_runner_event(event)
    assert node(folder, "enrich")["started_rows"] == started


def test_only_a_log_line_is_kept_as_a_log_line() -> None:
    """Another kind of line that happens to carry a `line` field is not a log line."""
    folder, _, _ = make()
    folder.on_runner_event({"type": "row_update", "tableNamespace": "t", "rowKey": "1", "line": "not a log"})
    folder.on_runner_event({"type": "result", "line": "nor this"})
    assert folder.state.log_total_count == 0 and list(folder.state.logs) == []


# -- rules the fold's own checks hold at their edges ---------------------------------------------------


def test_a_started_line_clears_the_outputs_even_of_its_own_invocation() -> None:
    """A start begins a clean node: outputs and their truncation flag belong to an earlier end, even
    one the runner sent under the same attempt and invocation."""
    folder, _, _ = make()
    same = {"nodeId": "doc", "attempt": 0, "invocationId": "i:1"}
    folder.on_runner_event(ex(type="docflow.node.started", inputs={"q": 1}, **same))
    folder.on_runner_event(ex(type="docflow.node.completed", outputs={"a": 2}, outputsTruncated=True, **same))
    folder.on_runner_event(ex(type="docflow.node.started", **same))
    node_io = node(folder, "doc")["node_io"]
    assert "outputs" not in node_io and "outputs_truncated" not in node_io
    assert node_io["inputs"] == {"q": 1}  # what the same invocation already showed stays


def test_a_map_start_without_counts_keeps_the_nodes_counts() -> None:
    """Absent is unchanged: a map.resumed that leaves out its rows and its total keeps the ones the
    node has, none (0 rows) included."""
    folder, _, _ = make()
    for completed in (0, 4):
        folder.on_runner_event(
            ex(type="map.progress", mapNodeId="enrich", totalRows=9, completedRows=completed)
        )
        folder.on_runner_event(ex(type="map.resumed", mapNodeId="enrich"))
        wire = node(folder, "enrich")
        assert (wire["completed"], wire["total"], wire["waiting_rows"]) == (completed, 9, 9 - completed)
        assert wire["message"] == f"{completed} / 9 rows processed"
    folder.on_runner_event(ex(type="map.resumed", mapNodeId="enrich", completedRows=6))
    wire = node(folder, "enrich")
    assert (wire["total"], wire["waiting_rows"], wire["message"]) == (9, 3, "6 / 9 rows processed")
    folder.on_runner_event(ex(type="map.resumed", mapNodeId="enrich", totalRows=12))
    assert node(folder, "enrich")["total"] == 12


def test_at_most_twenty_steps_outside_the_contract_are_named(caplog: pytest.LogCaptureFixture) -> None:
    """The warnings name the first 20 steps outside the contract; the rest are only counted."""
    folder, _, _ = make()
    for i in range(22):
        folder.on_runner_event(ex(type="map.progress", mapNodeId=f"ghost-{i}", completedRows=1))
    named = [r.getMessage() for r in caplog.records if "does not list" in r.getMessage()]
    assert len(named) == 20 and "'ghost-19'" in named[-1]
    assert folder.sanitizer.counts["line or frame naming a step outside the contract"] == 22


def test_a_log_line_of_another_mapping_asks_for_an_upload_at_half_the_tail() -> None:
    """Lines faster than the uploads: from half the live tail unsent, each line asks for an upload
    at once, whatever mapping the line comes as."""
    folder, scheduled, _ = make()
    half = LIVE_LOG_TAIL_LIMIT // 2
    for i in range(half + 1):
        folder.on_runner_event(MappingProxyType({"type": "log", "line": f"line {i}"}))
    assert folder.state.unsent_log_lines == half + 1
    assert scheduled[-3:] == [False, True, True]
