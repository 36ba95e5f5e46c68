"""An interrupted run on Postgres: the `interrupted` status and its event, once; the resume; and
the watchdog, which still fails an interrupted run that nobody resumes."""

from __future__ import annotations

from typing import Any

from ledger.db import Database
from ledger.ingest.store import apply_status_upload
from ledger.runlog.events import WATCHDOG_ERROR
from ledger.runlog.store import RunLog
from ledger.runlog.watchdog import Watchdog

WHY = {"reason": "the reporter was interrupted (SIGTERM)", "signal": "SIGTERM"}


async def story(db: Database, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT type, payload FROM ledger.run_events WHERE run_id = %s ORDER BY seq", (run_id,)
        )
        return [(row["type"], row["payload"]) for row in await cur.fetchall()]


async def status(db: Database, run_id: str) -> str:
    async with db.connection() as conn:
        cur = await conn.execute("SELECT status FROM ledger.runs WHERE run_id = %s", (run_id,))
        row = await cur.fetchone()
        assert row is not None
        return str(row["status"])


async def test_an_interrupted_run_waits_for_a_resume_and_says_so_once(db: Database) -> None:
    await apply_status_upload(db, "paused", {"status": "running", "upload_seq": 1, "live_logs": ["a"]})
    stopped = {"status": "interrupted", "upload_seq": 2, "live_logs": ["a", "b"], "interruption": WHY}
    answer = await apply_status_upload(db, "paused", stopped)
    assert answer["events_appended"] == {"log": 1, "reporter.interrupted": 1}
    assert await status(db, "paused") == "interrupted"
    # The same upload again (a lost answer) is a duplicate; another interrupted one adds no event.
    assert (await apply_status_upload(db, "paused", stopped))["duplicate"] is True
    await apply_status_upload(db, "paused", {"status": "interrupted", "upload_seq": 3, "interruption": WHY})
    resumed = await apply_status_upload(
        db, "paused", {"status": "completed", "upload_seq": 4, "live_logs": ["a", "b", "c"]}
    )
    assert resumed["terminal_set"] is True
    assert [kind for kind, _ in await story(db, "paused")] == [
        "log",
        "log",
        "reporter.interrupted",
        "reporter.resumed",
        "log",
        "terminal",
    ]
    assert (await story(db, "paused"))[2][1] == WHY
    assert await status(db, "paused") == "completed"


async def test_the_watchdog_fails_an_interrupted_run_nobody_resumes(db: Database) -> None:
    runlog = RunLog(db)
    await apply_status_upload(
        db, "abandoned", {"status": "interrupted", "upload_seq": 1, "interruption": WHY}
    )
    async with db.transaction() as conn:
        await conn.execute(
            "UPDATE ledger.runs SET updated_at = now() - interval '10 minutes' WHERE run_id = 'abandoned'"
        )
    assert "abandoned" in await Watchdog(db, runlog, stall_after_s=300).run_once()
    terminal = (await runlog.get_run("abandoned"))["terminal"]
    assert terminal is not None and terminal["status"] == "failed" and terminal["error"] == WATCHDOG_ERROR
