"""What the run's end and reconciliation settle: an open map step's counts as last reported, the
time a step reconciliation settled was stamped, and the warning a person reads about a checkpoint
frame naming a step the contract does not list."""

from __future__ import annotations

import logging

import pytest

from reporter.folding import EventFolder
from reporter.pipeline import StaticPipeline
from reporter.state import ProgressState
from tests.unit.reporter.test_folding import ex, make, node


def test_a_map_step_the_run_end_settles_keeps_its_completed_and_failed_rows() -> None:
    """Every row it reported is settled: those that completed and those that failed; none active."""
    folder, _, _ = make()
    folder.on_runner_event(ex(type="map.started", mapNodeId="enrich", totalRows=10, completedRows=0))
    folder.on_runner_event(ex(type="map.progress", mapNodeId="enrich", completedRows=4, failedRows=2))
    folder.finish("failed")
    wire = node(folder, "enrich")
    assert (wire["completed"], wire["failed"], wire["total"]) == (4, 2, 10)
    assert (wire["started_rows"], wire["active_rows"], wire["waiting_rows"]) == (6, 0, 0)
    assert wire["message"] == "6 / 10 rows processed"


def test_a_map_step_with_no_rows_reported_settles_with_none_started() -> None:
    folder, _, _ = make()
    folder.on_runner_event(ex(type="map.started", mapNodeId="enrich", totalRows=10))
    folder.finish("completed")
    wire = node(folder, "enrich")
    assert (wire["completed"], wire["failed"], wire["started_rows"]) == (0, 0, 0)
    assert wire["message"] == "0 / 10 rows processed"


def test_a_step_a_checkpoint_frame_settles_is_stamped_started_and_completed_now() -> None:
    folder, _, clock = make()
    clock.ms = 5_000
    frame = {"mapNodeId": "enrich", "status": "completed", "completedRowsCount": 3, "totalRows": 3}
    folder.reconcile({"checkpoint": {"mapFrames": {"f": frame}}}, [])
    wire = node(folder, "enrich")
    assert (wire["started_at"], wire["completed_at"]) == (5_000, 5_000)


def test_a_checkpoint_frame_naming_a_step_outside_the_contract_is_named_in_the_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    folder, _, _ = make()
    caplog.set_level(logging.WARNING, logger="reporter")
    frame = {"mapNodeId": "ghost", "status": "completed", "completedRowsCount": 3, "totalRows": 3}
    folder.reconcile({"checkpoint": {"mapFrames": {"f": frame}}}, [])
    assert [r.getMessage() for r in caplog.records] == [
        f"run {folder.sanitizer.run_id}: a checkpoint frame names step 'ghost', which the contract does not "
        "list: ignored"
    ]


def test_a_failed_tool_call_names_the_runners_error_in_the_steps_reason() -> None:
    folder, _, _ = make()
    folder.on_runner_event(ex(type="tool.call.started", toolId="slack.post"))
    folder.on_runner_event(
        ex(type="tool.call.settled", toolId="slack.post", outcome="failed", error="  timed out after 30 s ")
    )
    assert node(folder, "notify")["node_io"] == {"error": "tool slack.post failed: timed out after 30 s"}


def test_a_maps_row_counts_mark_where_on_the_log_its_progress_last_moved() -> None:
    """The ledger places the step's progress event after the lines logged before it."""
    folder, _, _ = make()
    folder.on_runner_event(ex(type="map.started", mapNodeId="enrich", totalRows=10, completedRows=0))
    for i in range(3):
        folder.on_runner_event({"type": "log", "line": f"line {i}", "source": "runner"})
    folder.on_runner_event(ex(type="map.progress", mapNodeId="enrich", completedRows=4, failedRows=0))
    assert folder.state.positions["enrich"]["progress"] == 3


def test_without_a_contract_a_map_a_checkpoint_frame_settles_is_stamped_started_and_completed_now() -> None:
    folder = EventFolder(ProgressState(now_ms=lambda: 5_000), StaticPipeline(None))
    frame = {"mapNodeId": "inner-map", "status": "completed", "completedRowsCount": 3, "totalRows": 3}
    folder.reconcile({"checkpoint": {"mapFrames": {"f": frame}}}, [])
    wire = folder.state.nodes["inner-map"].to_wire()
    assert (wire["started_at"], wire["completed_at"]) == (5_000, 5_000)
