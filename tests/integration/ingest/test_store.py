"""Status ingestion on real Postgres: fence, upload order, positional logs, steps, replay, terminal."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ledger import validate
from ledger.db import Database
from ledger.errors import Conflict, InvalidInput, StaleAttempt
from ledger.ingest.store import apply_status_upload
from ledger.runlog.store import RunLog

RUN_COLUMNS = (
    "status, last_seq, producer_attempt, last_upload_seq, live_log_count, live_node_progress, "
    "activity_watermarks, replay_digest, terminal_status, updated_at"
)


async def events(db: Database, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The run's events as readers are shown them: above the run's trim watermark (what lies at or
    below it is trimmed, though its chunk may not be deleted yet)."""
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT e.type, e.payload FROM ledger.run_events e"
            " JOIN ledger.runs r ON r.run_id = e.run_id AND r.created_at = e.run_created_at"
            " WHERE e.run_id = %s AND e.seq > r.events_trimmed_through ORDER BY e.seq",
            (run_id,),
        )
        return [(row["type"], row["payload"]) for row in await cur.fetchall()]


async def run_row(db: Database, run_id: str) -> dict[str, Any] | None:
    async with db.connection() as conn:
        cur = await conn.execute(f"SELECT {RUN_COLUMNS} FROM ledger.runs WHERE run_id = %s", (run_id,))
        return await cur.fetchone()


def upload(**fields: Any) -> dict[str, Any]:
    fields.setdefault("status", "running")
    return fields


def log_lines(evs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [payload["line"] for kind, payload in evs if kind == "log"]


async def test_first_upload_opens_the_run_and_appends_everything(db: Database) -> None:
    answer = await apply_status_upload(
        db,
        "r1",
        upload(
            run_id="r1",
            upload_seq=1,
            producer_attempt=1,
            live_logs=["one", "two"],
            live_log_total_count=2,
            live_node_progress={"n1": {"started_at": 1000, "completed": 1, "total": 4}},
            dataset_lifecycle_events=[{"type": "dataset.lifecycle", "tableNamespace": "t1"}],
            activity_observations=[{"activityId": "a", "observedAt": 7, "label": "x"}],
            some_future_field=[1, 2, 3],
        ),
    )
    assert answer == {
        "duplicate": False,
        "events_appended": {
            "log": 2,
            "step.started": 1,
            "step.progress": 1,
            "dataset.lifecycle": 1,
            "activity.observed": 1,
        },
        "steps_changed": ["n1"],
        "logs_appended": 2,
        "log_gap": 0,
        "terminal_set": False,
        "last_seq": 6,
        "producer_attempt": 1,
        "last_upload_seq": 1,
        "live_log_count": 2,
    }
    assert await events(db, "r1") == [
        ("log", {"line": "one"}),
        ("log", {"line": "two"}),
        ("step.started", {"node_id": "n1", "started_at": 1000}),
        ("step.progress", {"node_id": "n1", "completed": 1, "total": 4}),
        ("dataset.lifecycle", {"event": {"type": "dataset.lifecycle", "tableNamespace": "t1"}}),
        (
            "activity.observed",
            {
                "activity_id": "a",
                "observed_at": 7,
                "observation": {"activityId": "a", "observedAt": 7, "label": "x"},
            },
        ),
    ]
    row = await run_row(db, "r1")
    assert row is not None
    assert (row["status"], row["producer_attempt"], row["last_upload_seq"], row["live_log_count"]) == (
        "running",
        1,
        1,
        2,
    )
    assert row["live_node_progress"] == {
        "n1": {"started_at": 1000, "completed": 1, "total": 4, "state": "running"}
    }
    assert row["activity_watermarks"] == {"a": 7}
    # The run is readable through the run log like any other.
    assert (await RunLog(db).get_run("r1"))["last_seq"] == 6


async def test_invalid_upload_writes_nothing(db: Database) -> None:
    with pytest.raises(InvalidInput) as exc:
        await apply_status_upload(db, "r1", upload(live_logs=["a", "b"], live_log_total_count=1))
    assert exc.value.field == "live_log_total_count"
    with pytest.raises(InvalidInput) as exc:
        await apply_status_upload(db, "r1", upload(run_id="r2"))
    assert exc.value.field == "run_id"
    with pytest.raises(InvalidInput):
        await apply_status_upload(db, "", upload())
    assert await run_row(db, "r1") is None


async def test_stale_attempt_changes_nothing_and_newer_attempt_has_its_own_channel(db: Database) -> None:
    await apply_status_upload(
        db,
        "r",
        upload(upload_seq=1, producer_attempt=1, live_logs=["a1", "a2", "a3"], live_log_total_count=3),
    )
    await apply_status_upload(
        db,
        "r",
        upload(upload_seq=1, producer_attempt=2, live_logs=["b1"], live_log_total_count=1),
    )
    before_events, before_row = await events(db, "r"), await run_row(db, "r")
    with pytest.raises(StaleAttempt) as exc:
        await apply_status_upload(
            db,
            "r",
            upload(
                upload_seq=2,
                producer_attempt=1,
                live_logs=["a1", "a2", "a3", "a4"],
                live_log_total_count=4,
                live_node_progress={"n": {"started_at": 5}},
                status="failed",
            ),
        )
    assert (exc.value.attempt, exc.value.current) == (1, 2)
    assert await events(db, "r") == before_events
    assert await run_row(db, "r") == before_row
    # Attempt 2 continues on its own channel: its line 2 is new although attempt 1 had 3 lines.
    answer = await apply_status_upload(
        db, "r", upload(upload_seq=2, producer_attempt=2, live_logs=["b1", "b2"], live_log_total_count=2)
    )
    assert answer["logs_appended"] == 1
    assert log_lines(await events(db, "r")) == ["a1", "a2", "a3", "b1", "b2"]
    row = await run_row(db, "r")
    assert row is not None and (row["producer_attempt"], row["live_log_count"], row["last_upload_seq"]) == (
        2,
        2,
        2,
    )


async def test_late_duplicate_does_not_roll_progress_back(db: Database) -> None:
    first = upload(
        upload_seq=1, live_logs=["l1"], live_node_progress={"n": {"started_at": 1, "completed": 1}}
    )
    second = upload(
        upload_seq=2, live_logs=["l1", "l2"], live_node_progress={"n": {"started_at": 1, "completed": 5}}
    )
    await apply_status_upload(db, "r", first)
    await apply_status_upload(db, "r", second)
    before_events, before_row = await events(db, "r"), await run_row(db, "r")
    answer = await apply_status_upload(db, "r", first)  # a retry landing late
    assert answer["duplicate"] is True
    assert answer["events_appended"] == {} and answer["last_seq"] == len(before_events)
    assert await events(db, "r") == before_events
    assert await run_row(db, "r") == before_row
    assert before_row is not None and before_row["live_node_progress"]["n"]["completed"] == 5
    # The same upload_seq again is a duplicate as well.
    assert (await apply_status_upload(db, "r", second))["duplicate"] is True


async def test_same_upload_from_two_connections_at_once_is_applied_once(clean_database_url: str) -> None:
    dbs = [Database(clean_database_url, min_size=1, max_size=1) for _ in range(2)]
    for database in dbs:
        await database.open()
    try:
        for i in range(10):
            run_id = f"race-{i}"  # also races the creation of the run
            body = upload(
                upload_seq=1,
                live_logs=[f"line-{n}" for n in range(20)],
                live_log_total_count=20,
                live_node_progress={"n": {"started_at": 1, "completed": 3}},
                dataset_lifecycle_events=[{"k": i}],
            )
            answers = await asyncio.gather(*(apply_status_upload(d, run_id, body) for d in dbs))
            assert sorted(a["duplicate"] for a in answers) == [False, True]
            evs = await events(dbs[0], run_id)
            assert len(evs) == 20 + 2 + 1
            assert [kind for kind, _ in evs].count("dataset.lifecycle") == 1
    finally:
        for database in dbs:
            await database.close()


async def test_step_events_only_when_something_changed(db: Database) -> None:
    async def send(nodes: dict[str, Any], status: str = "running") -> dict[str, Any]:
        return await apply_status_upload(db, "r", upload(status=status, live_node_progress=nodes))

    a = await send({"n1": {"started_at": 10, "completed": 0, "total": 3, "message": "starting"}})
    assert a["events_appended"] == {"step.started": 1, "step.progress": 1} and a["steps_changed"] == ["n1"]
    # Identical re-upload (no upload_seq): nothing.
    a = await send({"n1": {"started_at": 10, "completed": 0, "total": 3, "message": "starting"}})
    assert a["events_appended"] == {} and a["steps_changed"] == [] and a["last_seq"] == 2
    # Only the message and updated_at changed: no event, but the snapshot follows.
    a = await send({"n1": {"started_at": 10, "completed": 0, "total": 3, "message": "m2", "updated_at": 99}})
    assert a["events_appended"] == {}
    # Counts changed on n1, n2 starts.
    a = await send({"n1": {"started_at": 10, "completed": 2, "total": 3}, "n2": {"started_at": 20}})
    assert a["events_appended"] == {"step.progress": 1, "step.started": 1}
    assert a["steps_changed"] == ["n1", "n2"]
    # n1 completes (its node_io carries no error), n2 fails.
    a = await send(
        {
            "n1": {"started_at": 10, "completed": 3, "total": 3, "completed_at": 30},
            "n2": {"started_at": 20, "completed_at": 31, "node_io": {"attempt": 1, "error": "bad input"}},
        }
    )
    assert a["events_appended"] == {"step.progress": 1, "step.completed": 1, "step.failed": 1}
    evs = await events(db, "r")
    settled = [(kind, payload) for kind, payload in evs if kind in ("step.completed", "step.failed")]
    assert settled == [
        (
            "step.completed",
            {"node_id": "n1", "state": "completed", "completed_at": 30, "outcome": "completed"},
        ),
        (
            "step.failed",
            {
                "node_id": "n2",
                "state": "failed",
                "completed_at": 31,
                "outcome": "failed",
                "reason": "bad input",
                "error": "bad input",
            },
        ),
    ]
    # Uploading only n1 keeps n2 in the snapshot.
    await send({"n1": {"started_at": 10, "completed": 3, "total": 3, "completed_at": 30}})
    row = await run_row(db, "r")
    assert row is not None and set(row["live_node_progress"]) == {"n1", "n2"}
    assert len(await events(db, "r")) == len(evs)


async def test_log_gap_is_one_event_with_the_missing_count(db: Database) -> None:
    await apply_status_upload(
        db, "r", upload(upload_seq=1, live_logs=["1", "2", "3"], live_log_total_count=3)
    )
    tail = [str(n) for n in range(1001, 2001)]  # positions 1001..2000 of 2000
    answer = await apply_status_upload(
        db, "r", upload(upload_seq=2, live_logs=tail, live_log_total_count=2000)
    )
    assert (answer["log_gap"], answer["logs_appended"]) == (997, 1000)
    evs = await events(db, "r")
    gaps = [payload for kind, payload in evs if kind == "log.gap"]
    assert gaps == [{"missing": 997, "after_position": 3, "producer_attempt": 0}]
    # The gap sits between line 3 and line 1001.
    kinds = [kind for kind, _ in evs]
    assert kinds.index("log.gap") == 3 and evs[4] == ("log", {"line": "1001"})
    assert log_lines(evs) == ["1", "2", "3", *tail]
    # Re-sending the same tail (no upload_seq) adds neither lines nor another gap.
    again = await apply_status_upload(db, "r", upload(live_logs=tail, live_log_total_count=2000))
    assert (again["log_gap"], again["logs_appended"], again["events_appended"]) == (0, 0, {})


async def test_terminal_upload_sets_the_terminal_state_once(db: Database) -> None:
    await apply_status_upload(db, "r", upload(upload_seq=1, live_logs=["a"]))
    final = upload(
        upload_seq=2,
        status="completed",
        live_logs=["a", "b"],
        live_log_total_count=2,
        live_node_progress={"n": {"started_at": 1, "completed_at": 2}},
    )
    answer = await apply_status_upload(db, "r", final)
    assert answer["terminal_set"] is True
    assert answer["events_appended"] == {"log": 1, "step.started": 1, "step.completed": 1, "terminal": 1}
    evs = await events(db, "r")
    assert [kind for kind, _ in evs] == ["log", "log", "step.started", "step.completed", "terminal"]
    row = await run_row(db, "r")
    assert row is not None and (row["status"], row["terminal_status"]) == ("completed", "completed")
    # The same terminal upload again: a duplicate; without upload_seq: applied, nothing new.
    assert (await apply_status_upload(db, "r", final))["duplicate"] is True
    resent = dict(final)
    del resent["upload_seq"]
    again = await apply_status_upload(db, "r", resent)
    assert (again["terminal_set"], again["events_appended"]) == (False, {})
    assert len(await events(db, "r")) == len(evs)
    # A different terminal status is refused and changes nothing.
    with pytest.raises(Conflict):
        await apply_status_upload(db, "r", upload(upload_seq=3, status="failed"))
    assert await events(db, "r") == evs
    assert await run_row(db, "r") == row


async def test_terminal_replay_exact_absorbs_a_retransmission(db: Database) -> None:
    await apply_status_upload(
        db, "r", upload(upload_seq=1, producer_attempt=3, live_logs=["x1", "x2"], live_log_total_count=2)
    )
    replay = {"lines": ["x1", "x2", "x3", "x4"], "dedupe_mode": "exact", "total_count": 4}
    answer = await apply_status_upload(
        db,
        "r",
        upload(
            upload_seq=2,
            producer_attempt=3,
            status="completed",
            terminal_log_replay=replay,
            live_logs=["x1", "x2"],
            live_log_total_count=2,
        ),
    )
    assert (answer["logs_appended"], answer["terminal_set"]) == (2, True)
    evs = await events(db, "r")
    assert log_lines(evs) == ["x1", "x2", "x3", "x4"]
    # A retransmission under a new upload_seq (the reporter retried after a lost answer): absorbed,
    # no Conflict although the run is terminal, nothing appended.
    again = await apply_status_upload(
        db, "r", upload(upload_seq=3, producer_attempt=3, status="completed", terminal_log_replay=replay)
    )
    assert (again["duplicate"], again["events_appended"], again["terminal_set"]) == (False, {}, False)
    assert await events(db, "r") == evs


async def test_positional_replay_continues_the_channel(db: Database) -> None:
    await apply_status_upload(db, "r", upload(upload_seq=1, live_logs=["a", "b"], live_log_total_count=2))
    replay = {"lines": ["[t] c", "[t] d"], "dedupe_mode": "positional", "total_count": 4}
    answer = await apply_status_upload(
        db,
        "r",
        upload(
            upload_seq=2,
            status="failed",
            live_logs=["a", "b"],
            live_log_total_count=2,
            terminal_log_replay=replay,
        ),
    )
    assert answer["logs_appended"] == 2
    assert log_lines(await events(db, "r")) == ["a", "b", "[t] c", "[t] d"]
    row = await run_row(db, "r")
    assert row is not None and (row["live_log_count"], row["terminal_status"]) == (4, "failed")


async def test_activity_newest_wins_across_uploads(db: Database) -> None:
    await apply_status_upload(db, "r", upload(activity_observations=[{"activityId": "a", "observedAt": 10}]))
    older = await apply_status_upload(
        db, "r", upload(activity_observations=[{"activityId": "a", "observedAt": 5}])
    )
    same = await apply_status_upload(
        db, "r", upload(activity_observations=[{"activityId": "a", "observedAt": 10}])
    )
    newer = await apply_status_upload(
        db,
        "r",
        upload(
            activity_observations=[
                {"activityId": "a", "observedAt": 11},
                {"activityId": "b", "observedAt": 1},
            ]
        ),
    )
    assert older["events_appended"] == {} and same["events_appended"] == {}
    assert newer["events_appended"] == {"activity.observed": 2}
    row = await run_row(db, "r")
    assert row is not None and row["activity_watermarks"] == {"a": 11, "b": 1}


async def test_retention_applies_to_ingested_events(db: Database) -> None:
    lines = [f"l{n}" for n in range(50)]
    await apply_status_upload(
        db, "r", upload(live_logs=lines, live_log_total_count=50), max_events_per_run=10
    )
    evs = await events(db, "r")
    assert log_lines(evs) == lines[-10:]
    row = await run_row(db, "r")
    assert row is not None and row["last_seq"] == 50


async def test_terminal_run_refuses_an_upload_that_would_add_events(db: Database) -> None:
    await RunLog(db).open_run("r")
    await RunLog(db).set_terminal(
        "r", "failed", error="run watchdog: no progress; orchestrator presumed dead"
    )
    before_events, before_row = await events(db, "r"), await run_row(db, "r")
    # The reporter wakes up after the watchdog failed the run: its new lines cannot be appended.
    with pytest.raises(Conflict):
        await apply_status_upload(db, "r", upload(upload_seq=1, live_logs=["late"]))
    assert await events(db, "r") == before_events
    assert await run_row(db, "r") == before_row
    # An upload that adds nothing and repeats the terminal status is absorbed.
    answer = await apply_status_upload(db, "r", upload(status="failed"))
    assert (answer["terminal_set"], answer["events_appended"]) == (False, {})
    row = await run_row(db, "r")
    assert row is not None and row["status"] == "failed"


async def test_the_views_count_the_pipeline_steps_that_have_not_started(db: Database) -> None:
    steps = ["load", "map", "notify"]
    started = {"map": {"started_at": 1_000, "completed": 5, "total": 10}}
    await apply_status_upload(
        db, "r-pipeline", upload(upload_seq=1, pipeline_steps=steps, live_node_progress=started)
    )
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT steps_total, steps_done, rows_completed FROM ledger.run_overview WHERE run_id = %s",
            ("r-pipeline",),
        )
        overview = await cur.fetchone()
        cur = await conn.execute(
            "SELECT node_id, started_at IS NULL AS pending FROM ledger.step_progress WHERE run_id = %s "
            "ORDER BY node_id",
            ("r-pipeline",),
        )
        progress = [(row["node_id"], row["pending"]) for row in await cur.fetchall()]
    assert overview == {"steps_total": 3, "steps_done": 0, "rows_completed": 5}
    assert progress == [("load", True), ("map", False), ("notify", True)]
    # Only the step that reported made events.
    assert [kind for kind, _ in await events(db, "r-pipeline")] == ["step.started", "step.progress"]


async def test_a_progress_tick_checks_only_what_changed_and_a_bad_node_still_writes_nothing(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every upload carries the whole snapshot: what a node repeats of its stored entry (as the
    database returns it) is not checked again, and the tick applies as the general path applies
    it. A node that is bad, even one beside nodes repeated unchanged, is refused as before, naming
    its field, and nothing is written."""
    node = {
        "started_at": 1,
        "total": 10,
        "completed": 3,
        "message": "3 / 10 rows processed",
        "state": "running",
        "node_io": {"attempt": 1, "inputs": {"table": "t", "rows": [1, 2.5]}},
    }
    nodes = {f"n{i}": dict(node) for i in range(3)}
    await apply_status_upload(
        db, "r1", upload(upload_seq=1, pipeline_steps=["n0", "n1"], live_node_progress=nodes)
    )
    before = await run_row(db, "r1")
    checked: list[str] = []
    real = validate.node_field

    def general(name: str, key: str, value: object) -> object:
        checked.append(name)
        return real(name, key, value)

    monkeypatch.setattr(validate, "node_field", general)
    for bad, field in (({"completed": -1}, "completed"), ({"node_io": {"a": float("nan")}}, "node_io")):
        with pytest.raises(InvalidInput) as refused:
            await apply_status_upload(
                db, "r1", upload(upload_seq=2, live_node_progress={**nodes, "n1": {**node, **bad}})
            )
        assert refused.value.field == f"live_node_progress.n1.{field}"
    assert await run_row(db, "r1") == before
    checked.clear()
    tick = {**nodes, "n2": {**node, "completed": 4, "message": "4 / 10 rows processed"}}
    answer = await apply_status_upload(db, "r1", upload(upload_seq=2, live_node_progress=tick))
    assert checked == ["live_node_progress.n2.message"]
    assert answer["steps_changed"] == ["n2"] and answer["events_appended"] == {"step.progress": 1}
    after = await run_row(db, "r1")
    assert after is not None and before is not None
    assert after["live_node_progress"] == {
        **before["live_node_progress"],
        "n2": {**before["live_node_progress"]["n2"], "completed": 4, "message": "4 / 10 rows processed"},
    }


async def test_a_bad_node_in_the_first_upload_of_a_run_opens_no_run(db: Database) -> None:
    # The body is checked under the run's lock, against its stored snapshot: a refusal rolls back
    # the run the upload would have opened.
    with pytest.raises(InvalidInput) as refused:
        await apply_status_upload(db, "r1", upload(live_node_progress={"a": {"state": "done"}}))
    assert refused.value.field == "live_node_progress.a.state"
    assert await run_row(db, "r1") is None
