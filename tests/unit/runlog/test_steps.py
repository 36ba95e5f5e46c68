"""The step state rules (`ledger.runlog.steps`): derivation, explicit states, settlement by a run's end."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.ingest.rules import IngestState, plan_upload
from ledger.ingest.upload import parse_upload
from ledger.runlog import steps
from ledger.validate import MAX_LOG_LINE_BYTES, STEP_STATES


@pytest.mark.parametrize(
    ("node", "run_status", "state"),
    [
        ({}, None, "pending"),
        ({"position": 0}, "failed", "pending"),
        ({"started_at": 1}, None, "running"),
        ({"started_at": 1}, "failed", "running"),
        ({"started_at": 1, "completed_at": 2}, None, "completed"),
        ({"completed_at": 2}, "completed", "completed"),
        ({"completed_at": 2}, "failed", "failed"),
        ({"completed_at": 2, "node_io": {"error": "boom"}}, "running", "failed"),
        ({"completed_at": 2, "node_io": {"error": ""}}, "running", "completed"),
        # A completion time alone never makes a step done when its state says otherwise.
        ({"completed_at": 2, "state": "running"}, "completed", "running"),
        ({"state": "skipped"}, "running", "skipped"),
    ],
)
def test_derived_state(node: dict[str, Any], run_status: str | None, state: str) -> None:
    assert steps.derived_state(node, run_status) == state


def test_every_state_is_one_of_the_documented_ones() -> None:
    assert set(steps.OPEN_STATES) | set(steps.SETTLED_STATES) == set(STEP_STATES)
    assert not set(steps.OPEN_STATES) & set(steps.SETTLED_STATES)


def test_a_derived_failure_takes_the_step_s_own_error_else_the_run_s() -> None:
    assert steps.with_state({"completed_at": 2, "node_io": {"error": "tool X failed"}}, "failed", "oops") == {
        "completed_at": 2,
        "node_io": {"error": "tool X failed"},
        "state": "failed",
        "reason": "tool X failed",
    }
    assert steps.with_state({"completed_at": 2}, "failed", "oops")["reason"] == "run failed: oops"
    assert steps.with_state({"completed_at": 2}, "failed")["reason"] == "run failed"
    # An explicit state is taken as it is, reason included or not.
    assert steps.with_state({"state": "failed"}, "failed", "oops") == {"state": "failed"}


_SNAPSHOT: dict[str, Any] = {
    "done": {"started_at": 1, "completed_at": 2, "state": "completed"},
    "broken": {"started_at": 1, "completed_at": 3, "state": "failed", "reason": "map failed"},
    "busy": {"started_at": 4, "completed": 40, "total": 100, "state": "running"},
    "later": {"position": 3, "state": "pending"},
}


@pytest.mark.parametrize(
    ("status", "error", "busy"),
    [
        ("failed", "no result line", {"state": "failed", "reason": "run failed: no result line"}),
        ("failed", None, {"state": "failed", "reason": "run failed"}),
        ("cancelled", "asked to stop", {"state": "cancelled", "reason": "run cancelled: asked to stop"}),
        ("completed", None, {"state": "completed"}),
    ],
)
def test_a_run_s_end_settles_every_open_step(status: str, error: str | None, busy: dict[str, Any]) -> None:
    events, settled = steps.settle_steps(_SNAPSHOT, _SNAPSHOT, status, error)
    assert settled["busy"] == {"started_at": 4, "completed": 40, "total": 100, **busy}
    assert settled["later"] == {"position": 3, "state": "skipped", "reason": steps.SKIPPED_REASON}
    # Settled steps stay as they settled.
    assert settled["done"] == _SNAPSHOT["done"] and settled["broken"] == _SNAPSHOT["broken"]
    state = busy["state"]
    assert events == [
        {"type": f"step.{state}", "node_id": "busy", "state": state, "outcome": state, **busy},
        {
            "type": "step.skipped",
            "node_id": "later",
            "state": "skipped",
            "outcome": "skipped",
            "reason": steps.SKIPPED_REASON,
        },
    ]


def test_settling_again_announces_nothing() -> None:
    _, settled = steps.settle_steps(_SNAPSHOT, _SNAPSHOT, "failed", "x")
    events, again = steps.settle_steps(settled, settled, "failed", "x")
    assert events == [] and again == settled
    # Nor when the same open steps come back (a replay) over the settled ones.
    events, again = steps.settle_steps(settled, _SNAPSHOT, "failed", "x")
    assert events == [] and again == settled


def test_a_long_terminal_error_is_cut_in_the_reason() -> None:
    reason = steps.run_reason("failed", "e" * (2 * MAX_LOG_LINE_BYTES))
    assert reason.startswith("run failed: eee") and len(reason.encode()) <= MAX_LOG_LINE_BYTES


def test_readers_get_a_state_for_every_node() -> None:
    stored = {
        "a": {"started_at": 1},
        "b": {"position": 0},
        "c": {"completed_at": 1, "node_io": {"error": "x"}},
    }
    assert {k: v["state"] for k, v in steps.with_states(stored).items()} == {
        "a": "running",
        "b": "pending",
        "c": "failed",
    }
    assert steps.with_states(None) == {}


def _plan(status: str, nodes: dict[str, Any], stored: dict[str, Any] | None = None, **extra: Any) -> Any:
    upload = parse_upload("r", {"status": status, "live_node_progress": nodes, **extra})
    return plan_upload("r", IngestState(live_node_progress=stored or {}), upload)


def test_a_terminal_upload_settles_what_it_leaves_open() -> None:
    """A runner that died mid-map: its last upload fails the run with the map still running."""
    load = {"started_at": 1, "completed_at": 2}
    before = _plan("running", {"load": load}, pipeline_steps=["load", "enrich", "notify"])
    plan = _plan(
        "failed",
        {"load": load, "enrich": {"started_at": 3, "completed": 400}},
        before.state.live_node_progress,
        error="the runner's output ended without a result line",
    )
    nodes = plan.state.live_node_progress
    assert {k: v["state"] for k, v in nodes.items()} == {
        "load": "completed",
        "enrich": "failed",
        "notify": "skipped",
    }
    assert nodes["enrich"]["reason"] == "run failed: the runner's output ended without a result line"
    assert [(e["type"], e.get("node_id")) for e in plan.events] == [
        ("step.started", "enrich"),
        ("step.progress", "enrich"),
        ("step.failed", "enrich"),
        ("step.skipped", "notify"),
    ]


def test_a_step_completing_in_the_failed_upload_itself_failed() -> None:
    """Without states (an older reporter), a step that completes in the upload that fails the run
    failed with it; one that completed before stays completed."""
    plan = _plan("failed", {"a": {"started_at": 1, "completed_at": 2}})
    assert plan.state.live_node_progress["a"]["state"] == "failed"


def test_replaying_a_terminal_upload_appends_nothing() -> None:
    nodes = {"enrich": {"started_at": 3, "completed": 400, "state": "running"}}
    first = _plan("failed", nodes, error="boom")
    again = _plan("failed", nodes, first.state.live_node_progress, error="boom")
    assert again.events == () and again.state.live_node_progress == first.state.live_node_progress


def test_an_explicit_state_in_a_terminal_upload_wins() -> None:
    plan = _plan(
        "failed", {"m": {"started_at": 1, "completed_at": 2, "state": "failed", "reason": "map failed"}}
    )
    assert plan.state.live_node_progress["m"]["reason"] == "map failed"
    assert [e["type"] for e in plan.events] == ["step.started", "step.failed"]


def test_a_running_upload_settles_nothing() -> None:
    plan = _plan("running", {"m": {"started_at": 1}}, pipeline_steps=["m", "n"])
    assert {k: v["state"] for k, v in plan.state.live_node_progress.items()} == {
        "m": "running",
        "n": "pending",
    }
