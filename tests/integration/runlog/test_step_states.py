"""Step states on real Postgres: a run's end settles its open steps whichever way it ends (terminal
upload, terminal set, a batch ending in `terminal`, the watchdog), in the transaction that ends it;
the views show each step's state and reason; the stall limit has one home the view and the watchdog
share."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from ledger.db import Database
from ledger.errors import RunTerminal
from ledger.ingest.store import apply_status_upload
from ledger.runlog.events import WATCHDOG_ERROR
from ledger.runlog.steps import SKIPPED_REASON
from ledger.runlog.store import RunLog
from ledger.runlog.watchdog import Watchdog

PIPELINE = ["load", "enrich", "notify"]


async def _start(db: Database, run_id: str) -> None:
    """A run whose first step completed, whose map is under way and whose last step is pending."""
    await apply_status_upload(
        db,
        run_id,
        {
            "status": "running",
            "upload_seq": 1,
            "pipeline_steps": PIPELINE,
            "live_node_progress": {
                "load": {"started_at": 1, "completed_at": 2},
                "enrich": {"started_at": 3, "completed": 400, "failed": 2, "total": 1000},
            },
        },
    )


async def _events(db: Database, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT type, payload FROM ledger.run_events WHERE run_id = %s ORDER BY seq", (run_id,)
        )
        return [(row["type"], row["payload"]) for row in await cur.fetchall()]


async def _views(db: Database, run_id: str) -> tuple[dict[str, tuple[Any, ...]], dict[str, Any]]:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT node_id, state, reason, position FROM ledger.step_progress WHERE run_id = %s", (run_id,)
        )
        steps = {
            row["node_id"]: (row["state"], row["reason"], row["position"]) for row in await cur.fetchall()
        }
        cur = await conn.execute("SELECT * FROM ledger.run_overview WHERE run_id = %s", (run_id,))
        overview = await cur.fetchone()
    assert overview is not None
    return steps, dict(overview)


def _settlement(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str, str | None]]:
    """(type, node, reason) of the settlement events, and the terminal event, in log order."""
    return [
        (kind, payload.get("node_id", ""), payload.get("reason") if kind != "terminal" else payload["error"])
        for kind, payload in events
        if kind in ("step.completed", "step.failed", "step.cancelled", "step.skipped", "terminal")
    ]


async def test_a_terminal_set_over_the_api_settles_the_open_steps(db: Database) -> None:
    await _start(db, "r")
    runlog = RunLog(db)
    await runlog.set_terminal("r", "failed", error="the worker was lost")
    reason = "run failed: the worker was lost"
    assert _settlement(await _events(db, "r")) == [
        ("step.completed", "load", None),
        ("step.failed", "enrich", reason),
        ("step.skipped", "notify", SKIPPED_REASON),
        ("terminal", "", "the worker was lost"),
    ]
    nodes = (await runlog.get_run("r"))["live_node_progress"]
    assert {k: (v["state"], v.get("reason")) for k, v in nodes.items()} == {
        "load": ("completed", None),
        "enrich": ("failed", reason),
        "notify": ("skipped", SKIPPED_REASON),
    }
    steps, row = await _views(db, "r")
    assert steps == {
        "load": ("completed", None, 0),
        "enrich": ("failed", reason, 1),
        "notify": ("skipped", SKIPPED_REASON, 2),
    }
    assert (row["steps_total"], row["steps_done"], row["steps_failed"], row["steps_skipped"]) == (3, 1, 1, 1)
    assert row["steps_cancelled"] == 0
    # The same terminal again is a no-op: nothing settles twice.
    last = (await runlog.get_run("r"))["last_seq"]
    await runlog.set_terminal("r", "failed", error="the worker was lost")
    assert (await runlog.get_run("r"))["last_seq"] == last


async def test_a_refused_terminal_settles_nothing(db: Database) -> None:
    await _start(db, "r")
    runlog = RunLog(db)
    await runlog.set_terminal("r", "completed")
    before = await runlog.get_run("r")
    with pytest.raises(RunTerminal):
        await runlog.set_terminal("r", "cancelled", error="too late")
    assert await runlog.get_run("r") == before


async def test_a_cancel_cancels_the_running_steps(db: Database) -> None:
    await _start(db, "r")
    await RunLog(db).set_terminal("r", "cancelled", error="asked to stop")
    steps, row = await _views(db, "r")
    assert steps["enrich"] == ("cancelled", "run cancelled: asked to stop", 1)
    assert (row["steps_cancelled"], row["steps_skipped"], row["steps_done"]) == (1, 1, 1)


async def test_a_completed_run_completes_its_running_steps(db: Database) -> None:
    await _start(db, "r")
    await RunLog(db).set_terminal("r", "completed")
    steps, row = await _views(db, "r")
    assert steps["enrich"] == ("completed", None, 1)
    assert (row["steps_done"], row["steps_skipped"]) == (2, 1)


async def test_a_batch_ending_in_terminal_settles_the_steps_before_its_terminal_event(db: Database) -> None:
    await _start(db, "r")
    appended = await RunLog(db).append(
        "r", [{"type": "log", "line": "bye"}, {"type": "terminal", "status": "failed", "error": "x"}]
    )
    assert [e["type"] for e in appended] == ["log", "step.failed", "step.skipped", "terminal"]
    assert [e["seq"] for e in appended] == list(range(appended[0]["seq"], appended[0]["seq"] + 4))
    steps, _ = await _views(db, "r")
    assert steps["enrich"] == ("failed", "run failed: x", 1)


async def test_the_watchdog_failing_a_run_settles_its_steps(db: Database) -> None:
    await _start(db, "r")
    async with db.transaction() as conn:
        await conn.execute("UPDATE ledger.runs SET updated_at = now() - interval '10 minutes'")
    assert await Watchdog(db, stall_after_s=300).run_once() == ["r"]
    steps, row = await _views(db, "r")
    assert steps["enrich"] == ("failed", f"run failed: {WATCHDOG_ERROR}", 1)
    assert steps["notify"] == ("skipped", SKIPPED_REASON, 2)
    assert (row["terminal_status"], row["steps_failed"]) == ("failed", 1)
    assert [kind for kind, *_ in _settlement(await _events(db, "r"))] == [
        "step.completed",
        "step.failed",
        "step.skipped",
        "terminal",
    ]


async def test_a_failed_upload_without_a_result_settles_the_map_failed(db: Database) -> None:
    """A runner that dies mid-map: the reporter's last upload fails the run, the map still open."""
    await _start(db, "r")
    error = "the runner's output ended without a result line"
    answer = await apply_status_upload(
        db,
        "r",
        {
            "status": "failed",
            "upload_seq": 2,
            "error": error,
            "live_node_progress": {"enrich": {"started_at": 3, "completed": 400, "failed": 2, "total": 1000}},
        },
    )
    assert answer["events_appended"] == {"step.failed": 1, "step.skipped": 1, "terminal": 1}
    steps, row = await _views(db, "r")
    assert steps["enrich"] == ("failed", f"run failed: {error}", 1)
    assert (row["steps_done"], row["steps_failed"], row["terminal_error"]) == (1, 1, error)
    # The same upload again (a retry without its upload_seq) is absorbed: nothing appended.
    last = (await RunLog(db).get_run("r"))["last_seq"]
    again = await apply_status_upload(
        db,
        "r",
        {
            "status": "failed",
            "error": error,
            "live_node_progress": {"enrich": {"started_at": 3, "completed": 400, "failed": 2, "total": 1000}},
        },
    )
    assert again["events_appended"] == {} and again["last_seq"] == last


async def test_the_stalled_view_and_the_watchdog_agree_under_any_limit(db: Database) -> None:
    runlog = RunLog(db)
    for run_id in ("idle-90s", "idle-30s"):
        await runlog.open_run(run_id)
    async with db.transaction() as conn:
        for run_id, seconds in (("idle-90s", 90), ("idle-30s", 30)):
            await conn.execute(
                "UPDATE ledger.runs SET updated_at = now() - make_interval(secs => %s) WHERE run_id = %s",
                (seconds, run_id),
            )

    async def listed() -> list[str]:
        async with db.connection() as conn:
            cur = await conn.execute("SELECT run_id FROM ledger.stalled_runs ORDER BY run_id")
            return [row["run_id"] for row in await cur.fetchall()]

    # Until a watchdog says otherwise, the default five minutes: neither is stalled.
    assert await listed() == []
    dog = Watchdog(db, stall_after_s=60)
    await dog.record_stall_limit()
    async with db.connection() as conn:
        cur = await conn.execute("SELECT stall_after FROM ledger.watchdog_settings")
        assert await cur.fetchone() == {"stall_after": timedelta(seconds=60)}
    view = await listed()
    assert view == ["idle-90s"]
    assert await dog.run_once() == view


async def test_the_views_read_a_state_for_nodes_stored_without_one(db: Database) -> None:
    """A snapshot stored before steps had states: the views read each step's state from its fields,
    as the API does (`ledger.runlog.steps.derived_state`), and `steps_done` counts completed only."""
    legacy = {
        "done": {"started_at": 1, "completed_at": 2},
        "broke": {"started_at": 1, "completed_at": 3, "node_io": {"error": "boom"}},
        "clean": {"completed_at": 3, "node_io": {"error": None}},
        "busy": {"started_at": 4},
        "later": {"position": 4},
        "odd": {"state": "bogus", "started_at": 1},
    }
    await RunLog(db).open_run("legacy")
    async with db.transaction() as conn:
        await conn.execute(
            "UPDATE ledger.runs SET live_node_progress = %s WHERE run_id = 'legacy'", (Jsonb(legacy),)
        )
    steps, row = await _views(db, "legacy")
    answer = (await RunLog(db).get_run("legacy"))["live_node_progress"]
    assert (
        {node: state for node, (state, _, _) in steps.items()}
        == {node: body["state"] for node, body in answer.items()}
        == {
            "done": "completed",
            "broke": "failed",
            "clean": "completed",
            "busy": "running",
            "later": "pending",
            "odd": "running",
        }
    )
    assert (row["steps_total"], row["steps_done"], row["steps_failed"]) == (6, 2, 1)


async def test_racing_ends_settle_the_steps_once_by_the_winner(db: Database, clean_database_url: str) -> None:
    """A cancel and a terminal upload land together on separate connections: one ends the run, and
    its steps are settled once, by that end."""
    await _start(db, "r")
    async with Database(clean_database_url, min_size=1, max_size=2) as other:
        results = await asyncio.gather(
            RunLog(db).set_terminal("r", "cancelled", error="asked to stop"),
            apply_status_upload(other, "r", {"status": "failed", "upload_seq": 2, "error": "boom"}),
            return_exceptions=True,
        )
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(refused) == 1 and isinstance(refused[0], RunTerminal)
    run = await RunLog(db).get_run("r")
    status = run["terminal"]["status"] if run["terminal"] else None
    settled = [
        (kind, p["node_id"])
        for kind, p in await _events(db, "r")
        if kind in ("step.failed", "step.cancelled")
    ]
    assert settled == [(f"step.{status}", "enrich")]
    assert run["live_node_progress"]["enrich"]["state"] == status
