"""The seam between the reporter and the ledger, each test shaped like a reproduction that lost or
doubled part of a run although every part's own tests passed (real Postgres, direct transport)."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.db import Database
from ledger.errors import DuplicateUpload, LedgerUnavailable, RunTerminal
from ledger.ingest.sheets import record_sheet_rows
from ledger.runlog.events import WATCHDOG_ERROR
from ledger.runlog.store import RunLog
from reporter import DirectTransport, ProgressReporter

CONTRACT = {
    "staticPipeline": {
        "substeps": [
            {"type": "dataset", "id": "first", "field": "a", "tableNamespace": "first"},
            {"type": "tool", "id": "notify", "toolId": "slack.post"},
            {"type": "dataset", "id": "second", "field": "b", "tableNamespace": "second"},
        ]
    }
}


def execution(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": "execution_event", "event": {"type": kind, **fields}}


def map_event(kind: str, namespace: str, completed: int, total: int = 3) -> dict[str, Any]:
    return execution(
        kind,
        mapNodeId=None,
        artifactTableNamespace=namespace,
        totalRows=total,
        completedRows=completed,
        failedRows=0,
    )


class LosingAnswers(DirectTransport):
    """Applies every upload, but the answers of the uploads numbered in `lose` never arrive."""

    def __init__(self, db: Database, lose: set[int]) -> None:
        super().__init__(db)
        self.lose = lose
        self.calls = 0

    async def upload_once(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        answer = await super().upload_once(payload)
        if self.calls in self.lose:
            raise LedgerUnavailable("connection reset before the answer arrived")
        return answer


async def events_of(db: Database, run_id: str) -> list[dict[str, Any]]:
    page = await RunLog(db).list_events(run_id, -1, limit=10_000)
    events: list[dict[str, Any]] = page["events"]
    return events


def outcomes(events: list[dict[str, Any]]) -> dict[str, str]:
    # Each step's settlement, as its state (the event's type names it too).
    settled = ("step.completed", "step.failed", "step.cancelled", "step.skipped")
    return {e["node_id"]: e["state"] for e in events if e["type"] in settled}


def reporter_for(run_id: str, transport: DirectTransport, **kwargs: Any) -> ProgressReporter:
    return ProgressReporter(run_id, transport, contract=CONTRACT, interval=lambda rows: 0.0, **kwargs)


async def test_a_nul_byte_in_a_log_line_is_stored_repaired_and_the_run_completes(db: Database) -> None:
    reporter = reporter_for("seam-nul", DirectTransport(db))
    reporter.on_runner_event({"type": "log", "line": "bad \x00 byte"})
    reporter.on_runner_event(execution("activity.observed", observation={"activityId": "", "observedAt": 1}))
    reporter.on_runner_event(
        execution("activity.observed", observation={"activityId": "a", "observedAt": "2026-11-30T00:00:00Z"})
    )
    await reporter.finalize({"status": "completed"})
    events = await events_of(db, "seam-nul")
    assert [e["line"] for e in events if e["type"] == "log"] == ["bad \ufffd byte"]
    assert events[-1]["type"] == "terminal" and events[-1]["status"] == "completed"
    # Lines the runner protocol refuses (a blank activityId, a string observedAt): junk, counted.
    assert reporter.uploader.sanitizer.counts == {"runner line": 2}


async def test_a_map_still_open_when_the_run_failed_fails_with_the_counts_reconciliation_gives(
    db: Database,
) -> None:
    # The step's end comes first (the run failed while it was open), its counts from the sheets after.
    run_id = "seam-reconciled"
    rows = [{"table_namespace": "first", "row_key": str(i), "status": "completed"} for i in range(3)]
    await record_sheet_rows(db, run_id, rows)
    reporter = reporter_for(run_id, DirectTransport(db))
    reporter.on_runner_event(map_event("map.started", "first", 0))
    reporter.on_runner_event(map_event("map.progress", "first", 1))
    await reporter.load_terminal_truth()
    await reporter.finalize({"status": "failed"})
    events = await events_of(db, run_id)
    # The steps the run never reached are skipped as it ends.
    assert outcomes(events) == {"first": "failed", "notify": "skipped", "second": "skipped"}
    last_progress = [e for e in events if e["type"] == "step.progress" and e["node_id"] == "first"][-1]
    assert (last_progress["completed"], last_progress["total"]) == (3, 3)


async def test_a_tool_step_settled_between_two_datasets_stays_completed(db: Database) -> None:
    run_id = "seam-tool"
    reporter = reporter_for(run_id, DirectTransport(db))
    reporter.on_runner_event(map_event("map.started", "first", 0))
    reporter.on_runner_event(map_event("map.completed", "first", 3))
    reporter.on_runner_event(execution("tool.call.started", toolId="slack.post"))
    reporter.on_runner_event(execution("tool.call.settled", toolId="slack.post", outcome="completed"))
    await reporter.finalize({"status": "failed"})  # the run fails before the second dataset starts
    assert outcomes(await events_of(db, run_id)) == {
        "first": "completed",
        "notify": "completed",
        "second": "skipped",
    }


async def test_a_later_map_start_completes_the_steps_before_it(db: Database) -> None:
    run_id = "seam-sequential"
    reporter = reporter_for(run_id, DirectTransport(db))
    reporter.on_runner_event(map_event("map.started", "first", 0))
    reporter.on_runner_event(execution("tool.call.started", toolId="slack.post"))
    reporter.on_runner_event(map_event("map.started", "second", 0))
    await reporter.finalize({"status": "failed"})
    assert outcomes(await events_of(db, run_id)) == {
        "first": "completed",
        "notify": "completed",
        "second": "failed",
    }


async def test_an_upload_whose_answer_was_lost_appends_its_lifecycle_event_once(db: Database) -> None:
    run_id = "seam-lost-answer"
    transport = LosingAnswers(db, lose={1})
    reporter = reporter_for(run_id, transport)
    reporter.on_runner_event(execution("dataset.lifecycle", datasetId="d1", phase="created"))
    await reporter.flush(force=True)  # applied, but the answer is lost
    reporter.on_runner_event({"type": "log", "line": "after"})
    await reporter.finalize({"status": "completed"})
    events = await events_of(db, run_id)
    assert [e["type"] for e in events].count("dataset.lifecycle") == 1
    assert [e["line"] for e in events if e["type"] == "log"] == ["after"]


async def test_a_second_reporter_of_an_attempt_must_resume_and_then_loses_nothing(db: Database) -> None:
    run_id = "seam-batches"
    first = reporter_for(run_id, DirectTransport(db))
    first.on_runner_event({"type": "log", "line": "one"})
    first.on_runner_event(map_event("map.started", "first", 0))
    await first.end_batch()
    first.on_runner_event({"type": "log", "line": "two"})
    await first.end_batch()
    await first.aclose()

    naive = reporter_for(run_id, DirectTransport(db))
    naive.on_runner_event({"type": "log", "line": "lost?"})
    with pytest.raises(DuplicateUpload, match="another reporter"):
        await naive.end_batch()
    await naive.aclose()

    second = reporter_for(run_id, DirectTransport(db))
    await second.resume()
    second.on_runner_event({"type": "log", "line": "three"})
    second.on_runner_event(map_event("map.completed", "first", 3))
    await second.finalize({"status": "completed"})
    events = await events_of(db, run_id)
    assert [e["line"] for e in events if e["type"] == "log"] == ["one", "two", "three"]
    assert outcomes(events) == {"first": "completed", "notify": "skipped", "second": "skipped"}
    assert [e["node_id"] for e in events if e["type"] == "step.started"] == ["first"]
    assert events[-1]["type"] == "terminal" and events[-1]["status"] == "completed"


async def test_a_run_the_watchdog_failed_stops_the_reporter_at_once_naming_it(db: Database) -> None:
    run_id = "seam-watchdog"
    transport = LosingAnswers(db, lose=set())
    reporter = reporter_for(run_id, transport)
    reporter.on_runner_event({"type": "log", "line": "working"})
    await reporter.flush(force=True)
    await RunLog(db).set_terminal(run_id, "failed", error=WATCHDOG_ERROR)
    reporter.on_runner_event({"type": "log", "line": "done"})
    with pytest.raises(RunTerminal, match=r"already ended \(failed: run watchdog") as ended:
        await reporter.finalize({"status": "completed"})
    assert ended.value.terminal["error"] == WATCHDOG_ERROR
    assert transport.calls == 2 and reporter.stopped
