"""An interrupted reporter: what its last upload says, how a merged request picks its status,
where each step transition sits on the log (`step_positions`), and the lines held back past a hole
in the live tail."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.ingest.rules import IngestState, plan_upload
from ledger.ingest.upload import parse_upload
from ledger.validate import LIVE_LOG_TAIL_LIMIT
from reporter import ProgressReporter
from reporter.state import HOLE_HOLD_MS, ProgressState
from reporter.uploader import FlushRequest
from tests.unit.reporter.fakes import FakeClock, FakeTransport

CONTRACT = {"staticPipeline": {"substeps": [{"id": "enrich", "type": "dataset", "tableNamespace": "leads"}]}}


def make() -> tuple[ProgressReporter, FakeTransport]:
    clock = FakeClock()
    transport = FakeTransport()
    reporter = ProgressReporter(
        "r",
        transport,
        contract=CONTRACT,
        clock=clock.monotonic,
        sleep=clock.sleep,
        wall_clock_ms=clock.wall_ms,
    )
    return reporter, transport


def ex(**event: Any) -> dict[str, Any]:
    return {"type": "execution_event", "event": event}


def feed_a_running_map(reporter: ProgressReporter) -> None:
    reporter.on_runner_event({"type": "log", "line": "one"})
    reporter.on_runner_event(ex(type="map.started", mapNodeId="enrich", totalRows=10, completedRows=0))
    reporter.on_runner_event({"type": "log", "line": "two"})
    reporter.on_runner_event(ex(type="map.progress", mapNodeId="enrich", totalRows=10, completedRows=4))
    reporter.on_runner_event({"type": "log", "line": "three"})


@pytest.mark.parametrize(
    ("first", "second", "merged"),
    [
        ("running", "interrupted", "interrupted"),
        ("interrupted", "running", "interrupted"),
        ("interrupted", "failed", "failed"),
        ("completed", "interrupted", "completed"),
        ("running", "running", "running"),
    ],
)
def test_a_merged_request_takes_the_strongest_status_with_its_own_details(
    first: str, second: str, merged: str
) -> None:
    def request(status: str) -> FlushRequest:
        return FlushRequest(
            status=status,  # type: ignore[arg-type]
            error=f"{status} error",
            interruption={"signal": status},
            whole_tail=status != "running",
        )

    result = request(first).merge(request(second))
    assert result.status == merged
    assert (result.error, result.interruption) == (f"{merged} error", {"signal": merged})
    assert result.whole_tail is (first != "running" or second != "running")


async def test_an_interrupted_reporter_lands_what_it_has_and_leaves_its_steps_as_they_are() -> None:
    reporter, transport = make()
    feed_a_running_map(reporter)
    await reporter.interrupt("SIGTERM", deadline_s=5)
    [last] = transport.payloads[-1:]
    assert last["status"] == "interrupted" and "error" not in last
    assert last["interruption"] == {"reason": "the reporter was interrupted (SIGTERM)", "signal": "SIGTERM"}
    assert last["live_logs"] == ["one", "two", "three"]
    enrich = last["live_node_progress"]["enrich"]
    assert enrich["completed"] == 4 and "completed_at" not in enrich


@pytest.mark.parametrize(("end", "status"), [("fail", "failed"), ("cancel", "cancelled")])
async def test_on_interrupt_fail_or_cancel_ends_the_run_and_its_open_steps(end: str, status: str) -> None:
    reporter, transport = make()
    feed_a_running_map(reporter)
    await reporter.interrupt("SIGINT", end=end, deadline_s=5)
    last = transport.payloads[-1]
    assert last["status"] == status and last["error"] == "the reporter was interrupted (SIGINT)"
    assert "interruption" not in last
    enrich = last["live_node_progress"]["enrich"]
    assert enrich["state"] == status and enrich["reason"].startswith(f"run {status}")
    assert (enrich["active_rows"], enrich["waiting_rows"], enrich["started_rows"]) == (0, 0, 4)


async def test_each_transition_carries_the_log_count_it_followed_and_the_ledger_keeps_that_order() -> None:
    reporter, transport = make()
    feed_a_running_map(reporter)
    reporter.on_runner_event(ex(type="map.completed", mapNodeId="enrich", totalRows=10, completedRows=10))
    reporter.on_runner_event({"type": "log", "line": "four"})
    await reporter.finalize({"type": "result", "status": "completed"}, deadline_s=5)
    body = transport.payloads[-1]
    assert body["step_positions"]["enrich"] == {"started": 1, "progress": 3, "settled": 3}
    state = IngestState()
    story = []
    for payload in transport.payloads:
        plan = plan_upload("r", state, parse_upload("r", payload))
        state = plan.state
        story += [
            e.get("line") or e["type"]
            for e in plan.events
            if e["type"] in ("log", "step.started", "step.completed")
        ]
    assert story == ["one", "step.started", "two", "three", "step.completed", "four"]


def test_a_hole_in_the_tail_holds_back_the_lines_past_it_for_a_while_then_the_live_log_goes_on() -> None:
    now = [0]
    state = ProgressState(now_ms=lambda: now[0])
    for i in range(LIVE_LOG_TAIL_LIMIT + 1):
        state.append_log(f"line {i}")  # no upload yet: the first line falls out unsent
    assert state.log_hole_after == 0
    held = state.snapshot()
    assert (held.live_logs, held.live_log_total_count) == ([], 0)
    now[0] = HOLE_HOLD_MS - 1
    assert state.snapshot().live_log_total_count == 0
    now[0] = HOLE_HOLD_MS
    released = state.snapshot()
    assert released.live_log_total_count == LIVE_LOG_TAIL_LIMIT + 1
    assert released.live_logs[0] == "line 1" and len(released.live_logs) == LIVE_LOG_TAIL_LIMIT
    assert state.log_hole_after is None


def test_the_batchs_last_upload_takes_the_whole_tail_past_a_hole() -> None:
    state = ProgressState(now_ms=lambda: 0)
    for i in range(LIVE_LOG_TAIL_LIMIT + 3):
        state.append_log(f"line {i}")
    whole = state.snapshot(whole_tail=True)
    assert (
        whole.live_log_total_count == LIVE_LOG_TAIL_LIMIT + 3 and len(whole.live_logs) == LIVE_LOG_TAIL_LIMIT
    )
