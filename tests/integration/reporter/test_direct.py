"""The reporter over the direct transport against the real ledger (Postgres): the ledger ends with
the reconciled truth, a failed step is recorded failed, a stale attempt stops, redelivery is a no-op."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.db import Database
from ledger.errors import StaleAttempt
from ledger.ingest.sheets import record_sheet_rows
from ledger.ingest.store import apply_status_upload
from ledger.runlog.store import RunLog
from reporter import DirectTransport, ProgressReporter, SimulatedRun

# The events that settle a step: each names the state it settled in.
SETTLED = ("step.completed", "step.failed", "step.cancelled", "step.skipped")


class RecordingDirect(DirectTransport):
    """The direct transport, keeping every payload it delivered and checking single flight."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.payloads: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            answer = await super().upload(payload)
            self.payloads.append(payload)
            return answer
        finally:
            self.in_flight -= 1


async def drive(reporter: ProgressReporter, run: SimulatedRun, *, lose: set[str]) -> dict[str, Any]:
    """Feed the run's events, losing the execution events whose type is in `lose`."""
    result: dict[str, Any] = {}
    for index, event in enumerate(run.events()):
        if event["type"] == "result":
            result = event
            continue
        if event["type"] == "execution_event" and event["event"]["type"] in lose:
            continue
        reporter.on_runner_event(event)
        if index % 500 == 0:
            await reporter.flush()  # the worker waits for the ledger now and then (deterministic uploads)
    return result


async def all_events(db: Database, run_id: str) -> list[dict[str, Any]]:
    page = await RunLog(db).list_events(run_id, -1, limit=10_000)
    events: list[dict[str, Any]] = page["events"]
    return events


async def test_a_simulated_run_ends_with_the_reconciled_truth(db: Database) -> None:
    run = SimulatedRun(rows=4_000, fail_every=97, page_size=1_000)
    run_id = "reporter-direct-1"
    await record_sheet_rows(db, run_id, run.sheet_rows())
    transport = RecordingDirect(db)
    reporter = ProgressReporter(run_id, transport, contract=run.contract(), interval=lambda rows: 0.0)
    # The live stream loses its last progress and the map completion; the checkpoint is off by 5.
    result = await drive(reporter, run, lose={"map.completed"})
    frame = result["checkpoint"]["mapFrames"]["enrich"]
    frame["failedRowsCount"] += 5
    frame["completedRowsCount"] -= 5
    await reporter.load_terminal_truth()
    await reporter.finalize(result)
    await reporter.aclose()

    truth = run.expected()
    ledger_run = await RunLog(db).get_run(run_id)
    assert ledger_run["terminal"]["status"] == "completed"
    enrich = ledger_run["live_node_progress"]["enrich"]
    assert (enrich["completed"], enrich["failed"], enrich["total"]) == (
        truth["completed"],
        truth["failed"],
        truth["total"],
    )
    assert enrich["waiting_rows"] == 0 and enrich["active_rows"] == 0
    assert transport.max_in_flight == 1
    assert len(transport.payloads) > 3  # progress went out live, not only at the end

    events = await all_events(db, run_id)
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1))
    completed_steps = {e["node_id"]: e["state"] for e in events if e["type"] in SETTLED}
    # The untaken branch never started: skipped as the run ends, nothing else.
    assert completed_steps == {
        "load": "completed",
        "enrich": "completed",
        "notify": "completed",
        "on_error": "skipped",
    }
    assert [e["type"] for e in events if e.get("node_id") == "on_error"] == ["step.skipped"]
    last_progress = [e for e in events if e["type"] == "step.progress" and e["node_id"] == "enrich"][-1]
    assert (last_progress["completed"], last_progress["failed"]) == (truth["completed"], truth["failed"])
    assert events[-1]["type"] == "terminal"
    log_lines = [e["line"] for e in events if e["type"] == "log"]
    # Every live line once, in order (the positional replay of the same lines added nothing).
    assert log_lines == [e["line"].strip() for e in run.events() if e["type"] == "log"]
    assert not any(e["type"] == "log.gap" for e in events)
    assert sum(1 for e in events if e["type"] == "dataset.lifecycle") == 1


async def test_redelivering_every_upload_changes_nothing(db: Database) -> None:
    run = SimulatedRun(rows=600, fail_every=50, page_size=200)
    run_id = "reporter-direct-2"
    transport = RecordingDirect(db)
    reporter = ProgressReporter(run_id, transport, contract=run.contract(), interval=lambda rows: 0.0)
    result = await drive(reporter, run, lose=set())
    await reporter.finalize(result)
    before = await RunLog(db).get_run(run_id)
    for payload in transport.payloads:
        await apply_status_upload(db, run_id, payload)
    after = await RunLog(db).get_run(run_id)
    assert after["last_seq"] == before["last_seq"]
    assert after["live_node_progress"] == before["live_node_progress"]


async def test_a_failed_tool_step_is_recorded_failed(db: Database) -> None:
    run = SimulatedRun(rows=300, fail_every=0, page_size=300, fail_run=True)
    run_id = "reporter-direct-3"
    reporter = ProgressReporter(run_id, DirectTransport(db), contract=run.contract())
    result = await drive(reporter, run, lose=set())
    await reporter.finalize(result)
    events = await all_events(db, run_id)
    outcomes = {e["node_id"]: e["state"] for e in events if e["type"] in SETTLED}
    assert outcomes["notify"] == "failed"
    assert outcomes["enrich"] == "completed"
    assert (await RunLog(db).get_terminal(run_id))["status"] == "failed"  # type: ignore[index]


async def test_a_stale_attempt_stops_the_reporter(db: Database) -> None:
    run_id = "reporter-direct-4"
    newer = ProgressReporter(run_id, DirectTransport(db), producer_attempt=2)
    await newer.flush(force=True, required=True)
    older = ProgressReporter(run_id, DirectTransport(db), producer_attempt=1)
    older.on_runner_event({"type": "log", "line": "late line from attempt 1"})
    await older.flush(force=True)
    assert older.stopped
    with pytest.raises(StaleAttempt):
        await older.finalize({"status": "completed"})
    assert (await RunLog(db).get_run(run_id))["terminal"] is None
    await newer.aclose()
    await older.aclose()
