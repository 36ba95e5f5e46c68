"""How a runner's result ends the run: every terminal status, the order of the end (step ends,
then checkpoint counts, then sheet counts), and the statuses no run ends with."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.ingest.rules import IngestState, plan_upload
from ledger.ingest.upload import parse_upload
from reporter import StepState
from reporter.reporter import RESULT_STATUSES, result_status_problem
from tests.unit.reporter.fakes import FakeTransport
from tests.unit.reporter.test_reporter import make


def map_event(kind: str, **fields: Any) -> dict[str, Any]:
    return {
        "type": "execution_event",
        "event": {"type": kind, "mapNodeId": "enrich", "totalRows": 10, **fields},
    }


def started_map(reporter: Any) -> None:
    reporter.on_runner_event(map_event("map.started", completedRows=0))
    reporter.on_runner_event(map_event("map.progress", completedRows=3, failedRows=0))


SETTLEMENT_EVENTS = ("step.completed", "step.failed", "step.cancelled", "step.skipped")


def ledger_outcomes(payloads: list[dict[str, Any]]) -> dict[str, str]:
    """The step outcomes the ledger's own rules record from the uploads, in order."""
    state, outcomes = IngestState(), {}
    for payload in payloads:
        plan = plan_upload("run-1", state, parse_upload("run-1", payload))
        state = plan.state
        outcomes.update({e["node_id"]: e["state"] for e in plan.events if e["type"] in SETTLEMENT_EVENTS})
    return outcomes


FRAME = {
    "mapNodeId": "enrich",
    "status": "failed",
    "totalRows": 10,
    "completedRowsCount": 6,
    "failedRowsCount": 1,
}


@pytest.mark.parametrize("truth", ["checkpoint", "sheets"])
async def test_a_map_open_when_the_run_failed_ends_failed_with_its_reconciled_counts(truth: str) -> None:
    reporter, transport = make()
    started_map(reporter)
    result: dict[str, Any] = {"status": "failed"}
    if truth == "checkpoint":
        result["checkpoint"] = {"mapFrames": {"enrich": FRAME}}
    else:
        transport.outcomes = [{"table_namespace": "leads", "completed": 6, "failed": 1, "total": 10}]
        await reporter.load_terminal_truth()
    await reporter.finalize(result)  # its map.failed was lost: the worker died
    assert reporter.step_states()["enrich"] is StepState.FAILED
    node = transport.payloads[-1]["live_node_progress"]["enrich"]
    assert (node["completed"], node["failed"], node["total"]) == (6, 1, 10)
    assert node["node_io"]["error"] == "run failed"
    # The reporter says so itself: the step's state and why.
    assert (node["state"], node["reason"]) == ("failed", "run failed")
    assert ledger_outcomes(transport.payloads)["enrich"] == "failed"


async def test_the_sheets_win_over_the_checkpoint_after_the_step_ends() -> None:
    reporter, transport = make()
    started_map(reporter)
    transport.outcomes = [{"table_namespace": "leads", "completed": 8, "failed": 2, "total": 10}]
    await reporter.load_terminal_truth()
    await reporter.finalize({"status": "failed", "checkpoint": {"mapFrames": {"enrich": FRAME}}})
    node = transport.payloads[-1]["live_node_progress"]["enrich"]
    assert (node["completed"], node["failed"]) == (8, 2)
    assert reporter.step_states()["enrich"] is StepState.FAILED


async def test_a_cancelled_result_ends_the_run_cancelled_its_open_steps_failed_maps_reconciled() -> None:
    reporter, transport = make()
    started_map(reporter)
    await reporter.finalize({"status": "cancelled", "checkpoint": {"mapFrames": {"enrich": FRAME}}})
    final = transport.payloads[-1]
    assert final["status"] == "cancelled"
    enrich = final["live_node_progress"]["enrich"]
    assert (enrich["state"], enrich["reason"]) == ("cancelled", "run cancelled")
    assert (enrich["completed"], enrich["failed"]) == (6, 1)
    assert reporter.step_states()["notify"] is StepState.UNEXECUTED
    # `load` had settled when the map started; the step the run left open is cancelled, the one
    # it never started skipped (by the ledger, as the run ends).
    assert ledger_outcomes(transport.payloads) == {
        "load": "completed",
        "enrich": "cancelled",
        "notify": "skipped",
        "on_error": "skipped",
    }


async def test_a_completed_result_completes_the_open_steps_before_reconciling() -> None:
    reporter, transport = make()
    started_map(reporter)
    frame = {**FRAME, "status": "completed", "completedRowsCount": 10, "failedRowsCount": 0}
    await reporter.finalize({"status": "completed", "checkpoint": {"mapFrames": {"enrich": frame}}})
    assert transport.payloads[-1]["status"] == "completed"
    assert ledger_outcomes(transport.payloads) == {
        "load": "completed",
        "enrich": "completed",
        "notify": "skipped",
        "on_error": "skipped",
    }


async def test_the_error_given_goes_with_the_terminal_status_only() -> None:
    reporter, transport = make(transport=FakeTransport())
    reporter.on_runner_event({"type": "log", "line": "x"})
    await reporter.flush(force=True)
    await reporter.finalize({"status": "failed"}, error="the runner's result has no status")
    errors = [p.get("error") for p in transport.payloads]
    assert errors[-1] == "the runner's result has no status" and set(errors[:-1]) == {None}
    assert [p["status"] for p in transport.payloads][-1] == "failed"


@pytest.mark.parametrize("status", RESULT_STATUSES)
def test_the_statuses_a_result_may_have(status: str) -> None:
    assert result_status_problem({"status": status}) is None


@pytest.mark.parametrize(
    ("result", "said"),
    [
        ({}, "the runner reported status None,"),
        ({"status": None}, "the runner reported status None,"),
        ({"status": "succeeded"}, "the runner reported status 'succeeded',"),
        ({"status": "running"}, "the runner reported status 'running',"),
        ({"status": 3}, "the runner reported status 3,"),
        ({"status": "x" * 500}, "the runner reported status 'xxx"),
    ],
)
def test_any_other_status_is_named_with_the_ones_a_result_may_have(result: dict[str, Any], said: str) -> None:
    problem = result_status_problem(result)
    assert problem is not None and said in problem
    assert problem.endswith(", which the ledger does not take")
    assert len(problem) < 200  # one line, whatever the runner sent
