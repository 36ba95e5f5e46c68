"""Status uploads to an ended run on real Postgres: what would change it is refused (409 terminal)
and writes nothing; what would not is absorbed, writing nothing; both answers name the end. And
the statuses and errors a terminal upload may carry."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.db import Database
from ledger.errors import RunTerminal
from ledger.ingest.store import apply_status_upload
from ledger.runlog.store import RunLog
from ledger.validate import MAX_LOG_LINE_BYTES, truncate_line

NODE = {"completed": 5, "total": 5, "started_at": 1, "completed_at": 2, "message": "done"}


async def row(db: Database, run_id: str) -> dict[str, Any]:
    async with db.connection() as conn:
        cur = await conn.execute("SELECT * FROM ledger.runs WHERE run_id = %s", (run_id,))
        found = await cur.fetchone()
    assert found is not None
    return dict(found)


async def ended(db: Database, run_id: str) -> dict[str, Any]:
    first = {
        "upload_seq": 1,
        "producer_attempt": 1,
        "status": "completed",
        "live_logs": ["one"],
        "live_log_total_count": 1,
        "live_node_progress": {"n": NODE},
        "activity_observations": [{"activityId": "a", "observedAt": 5}],
    }
    answer = await apply_status_upload(db, run_id, first)
    assert answer["terminal_set"] is True and "terminal" not in answer
    return first


@pytest.mark.parametrize(
    "change",
    [
        {"live_node_progress": {"n": {**NODE, "message": "late"}}},  # no event, only the stored progress
        {"live_node_progress": {"n": {**NODE, "node_io": {"outputs": 1}}}},
        {"live_node_progress": {"other": {"started_at": 3}}},
        {"live_logs": ["one", "two"], "live_log_total_count": 2},
        {"activity_observations": [{"activityId": "a", "observedAt": 6}]},
        {"terminal_log_replay": {"lines": ["r"], "dedupe_mode": "positional"}},
        {"producer_attempt": 2},
        {"status": "failed"},
        {"status": "completed", "error": "another story"},
    ],
)
async def test_an_upload_that_would_change_an_ended_run_is_refused_and_writes_nothing(
    db: Database, change: dict[str, Any]
) -> None:
    first = await ended(db, "ended")
    before = await row(db, "ended")
    late = {**first, "upload_seq": 2, "status": "running", "last_checkpoint_at": 9, **change}
    with pytest.raises(RunTerminal) as refused:
        await apply_status_upload(db, "ended", late)
    assert refused.value.terminal["status"] == "completed"
    assert await row(db, "ended") == before  # its upload_seq, progress and heartbeat included


async def test_an_upload_that_changes_nothing_is_absorbed_storing_nothing_and_names_the_end(
    db: Database,
) -> None:
    first = await ended(db, "absorbed")
    before = await row(db, "absorbed")
    for late in (
        {**first, "upload_seq": 2, "status": "running", "last_checkpoint_at": 9},
        {**first, "upload_seq": 3},  # the same end again
        {"status": "completed"},  # no upload_seq at all
    ):
        answer = await apply_status_upload(db, "absorbed", late)
        assert (answer["duplicate"], answer["terminal_set"], answer["events_appended"]) == (False, False, {})
        assert answer["terminal"]["status"] == "completed" and answer["last_upload_seq"] == 1
    assert await row(db, "absorbed") == before


async def test_a_late_duplicate_to_an_ended_run_names_the_end_and_records_no_heartbeat(db: Database) -> None:
    first = await ended(db, "dup")
    before = await row(db, "dup")
    # Through the fast path (the position read) and with a body the full path would refuse.
    for body in ({**first, "last_checkpoint_at": 9}, {**first, "live_logs": "junk", "last_checkpoint_at": 9}):
        answer = await apply_status_upload(db, "dup", body)
        assert answer["duplicate"] is True and answer["terminal"]["status"] == "completed"
    assert await row(db, "dup") == before


async def test_a_run_another_ended_refuses_the_reporters_first_new_upload(db: Database) -> None:
    await RunLog(db).open_run("watched")
    await RunLog(db).set_terminal("watched", "failed", error="run watchdog")
    before = await row(db, "watched")
    with pytest.raises(RunTerminal, match="already ended \\(failed: run watchdog\\)"):
        await apply_status_upload(
            db, "watched", {"upload_seq": 1, "status": "running", "live_node_progress": {"n": NODE}}
        )
    assert await row(db, "watched") == before


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
async def test_every_terminal_status_ends_the_run_with_it_and_its_error(db: Database, status: str) -> None:
    run_id = f"ends-{status}"
    answer = await apply_status_upload(
        db, run_id, {"upload_seq": 1, "status": status, "error": "why \x00 it ended"}
    )
    assert answer["terminal_set"] is True
    terminal = (await RunLog(db).get_run(run_id))["terminal"]
    assert terminal is not None
    assert (terminal["status"], terminal["error"]) == (status, "why \ufffd it ended")


async def test_a_running_upload_keeps_no_error_and_the_ledger_bounds_long_lines(db: Database) -> None:
    line = "L" * (MAX_LOG_LINE_BYTES + 1)
    await apply_status_upload(
        db, "bounded", {"upload_seq": 1, "status": "running", "error": "ignored", "live_logs": [line]}
    )
    run = await RunLog(db).get_run("bounded")
    assert run["terminal"] is None
    assert await RunLog(db).recent_log_lines("bounded", 1) == [truncate_line(line)]
