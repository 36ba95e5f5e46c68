"""The runner's order when the uploads fall behind a burst of log lines (the reporter over the direct
transport against the real ledger): the live tail loses lines no upload carried, the uploads hold
back the lines past that hole, and the result's ``logs`` fill it at the end. A step transition the
runner wrote after one of the held lines must still be stored right after that line.

The uploads fall behind deterministically: the runner's lines are fed without yielding to the event
loop, so no upload runs between them, and each upload is asked for explicitly."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.db import Database
from ledger.runlog.store import RunLog
from reporter import DirectTransport, ProgressReporter
from reporter.state import LIVE_LOG_TAIL_LIMIT

CONTRACT = {
    "staticPipeline": {
        "substeps": [
            {"type": "dataset", "id": "enrich", "tableNamespace": "leads"},
            {"type": "tool", "id": "notify", "toolId": "slack.post"},
        ]
    }
}
# Three times what the live tail holds, then a few more after the step transitions.
BURST = [f"burst line {n}" for n in range(3 * LIVE_LOG_TAIL_LIMIT)]
AFTER = [f"after line {n}" for n in range(100)]


def _map(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": "execution_event", "event": {"type": kind, "mapNodeId": "enrich", **fields}}


def _tool(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": "execution_event", "event": {"type": kind, "toolId": "slack.post", **fields}}


def feed(reporter: ProgressReporter, lines: list[str]) -> None:
    for line in lines:
        reporter.on_runner_event({"type": "log", "line": line})


def runner_order(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The stored log lines and step transitions, in the order stored (progress left out: its
    count of events depends on how often the uploads went)."""
    return [
        ("log", e["line"]) if e["type"] == "log" else (e["type"], e["node_id"])
        for e in events
        if e["type"] == "log" or e["type"] in ("step.started", "step.completed")
    ]


@pytest.mark.parametrize("outcome", ["completed", "failed"])
async def test_transitions_after_held_lines_are_stored_after_those_lines(db: Database, outcome: str) -> None:
    """In a failed run too: the step that completed before it failed lands completed, in a running
    upload that carries the result's logs first (a step first shown completed in a failed upload
    failed with the run)."""
    run_id = f"live-tail-order-{outcome}"
    reporter = ProgressReporter(run_id, DirectTransport(db), contract=CONTRACT, trailing_flush=False)
    reporter.on_runner_event(_map("map.started", totalRows=1_000, completedRows=0, failedRows=0))
    await reporter.flush(force=True, required=True)  # carries the step's start, no line yet
    feed(reporter, BURST)  # the tail loses lines no upload carried: a hole after line 0
    assert reporter.state.log_hole_after == 0
    reporter.on_runner_event(_map("map.completed", totalRows=1_000, completedRows=1_000, failedRows=0))
    reporter.on_runner_event(_tool("tool.call.started"))
    feed(reporter, AFTER)
    # A running upload while the hole is held: it carries no line past the hole.
    await reporter.flush(force=True, required=True)
    reporter.on_runner_event(_tool("tool.call.settled", outcome="succeeded"))
    await reporter.finalize({"type": "result", "status": outcome, "logs": [*BURST, *AFTER]})
    await reporter.aclose()

    page = await RunLog(db).list_events(run_id, -1, limit=10_000)
    events: list[dict[str, Any]] = page["events"]
    assert not any(e["type"] == "log.gap" for e in events)
    assert runner_order(events) == [
        ("step.started", "enrich"),
        *(("log", line) for line in BURST),
        ("step.completed", "enrich"),
        ("step.started", "notify"),
        *(("log", line) for line in AFTER),
        ("step.completed", "notify"),
    ]
    settled = {e["node_id"]: e["state"] for e in events if e["type"] == "step.completed"}
    assert settled == {"enrich": "completed", "notify": "completed"}
