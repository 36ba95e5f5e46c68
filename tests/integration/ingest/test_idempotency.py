"""Ingestion's invariant on real Postgres: any re-delivery leaves the ledger as if each upload came once.

A generated reporter produces a realistic upload sequence (one or two producer attempts, growing
logs seen through a bounded tail, growing node progress, one-shot lifecycle events and activity
observations, a terminal upload with or without a log replay). One run receives each upload once,
in order; another receives the same uploads with duplicates, re-deliveries of earlier uploads and
retries that land after newer ones. Their events (type and payload, in order) and run state must
be identical, and so must the answers to each upload's first delivery.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.db import Database
from ledger.errors import StaleAttempt
from ledger.ingest.store import apply_status_upload

STATE_COLUMNS = (
    "status, play_name, last_seq, producer_attempt, last_upload_seq, live_log_count, live_node_progress, "
    "activity_watermarks, replay_digest, terminal_status, terminal_result, terminal_error"
)

Upload = dict[str, Any]


@st.composite
def reporter_uploads(draw: st.DrawFn) -> list[Upload]:
    """The uploads of one run, in the order the reporter(s) sent them."""
    uploads: list[Upload] = []
    one_shot = itertools.count()
    attempts = draw(st.integers(1, 2))
    for attempt in range(1, attempts + 1):
        window = draw(st.integers(2, 8))  # the tail the reporter keeps (1000 in production)
        log: list[str] = []
        nodes: dict[str, dict[str, Any]] = {}
        count = draw(st.integers(1, 5))
        for seq in range(1, count + 1):
            log += [f"a{attempt}-line-{len(log) + i + 1}" for i in range(draw(st.integers(0, 12)))]
            for node_id in draw(st.lists(st.sampled_from(["load", "map", "write"]), max_size=2, unique=True)):
                node = nodes.setdefault(node_id, {})
                node.setdefault("started_at", 1000 * attempt + seq)
                node["total"] = 10
                node["completed"] = min(10, node.get("completed", 0) + draw(st.integers(0, 6)))
                node["message"] = f"{node['completed']} / 10 rows processed"
                if node["completed"] == 10:
                    node.setdefault("completed_at", 2000 * attempt + seq)
            body: Upload = {
                "run_id": "placeholder",
                "upload_seq": seq,
                "producer_attempt": attempt,
                "status": "running",
                "live_node_progress": {k: dict(v) for k, v in nodes.items()},
                "live_logs": log[-window:],
                "live_log_total_count": len(log),
                "dataset_lifecycle_events": [
                    {"type": "dataset.lifecycle", "n": next(one_shot)} for _ in range(draw(st.integers(0, 2)))
                ],
                "activity_observations": [
                    {
                        "activityId": draw(st.sampled_from(["fetch", "enrich"])),
                        "observedAt": draw(st.integers(0, 30)),
                    }
                    for _ in range(draw(st.integers(0, 2)))
                ],
                "terminal_log_replay": None,
                "last_checkpoint_at": seq,
            }
            uploads.append(body)
        if attempt == attempts:
            final = uploads[-1]
            final["status"] = draw(st.sampled_from(["completed", "failed"]))
            replay = draw(st.sampled_from(["none", "exact", "positional"]))
            if replay == "exact":  # the attempt's complete buffer, offset zero
                lines = log + [f"a{attempt}-result-{i}" for i in range(draw(st.integers(0, 3)))]
                final["terminal_log_replay"] = {
                    "lines": lines,
                    "dedupe_mode": "exact",
                    "total_count": len(lines),
                }
            elif replay == "positional":  # continues after the live count
                lines = [f"a{attempt}-result-{i}" for i in range(draw(st.integers(1, 3)))]
                final["terminal_log_replay"] = {
                    "lines": lines,
                    "dedupe_mode": "positional",
                    "total_count": len(log) + len(lines),
                }
    return uploads


async def deliver(db: Database, run_id: str, body: Upload) -> dict[str, Any] | None:
    """Apply an upload; None when it was refused as a stale attempt (the reporter would stop)."""
    try:
        return await apply_status_upload(db, run_id, {**body, "run_id": run_id})
    except StaleAttempt:
        return None


async def ledger_of(db: Database, run_id: str) -> tuple[list[tuple[str, Any]], dict[str, Any] | None]:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT type, payload FROM ledger.run_events WHERE run_id = %s ORDER BY seq", (run_id,)
        )
        events = [(row["type"], row["payload"]) for row in await cur.fetchall()]
        cur = await conn.execute(f"SELECT {STATE_COLUMNS} FROM ledger.runs WHERE run_id = %s", (run_id,))
        return events, await cur.fetchone()


async def check(db: Database, uploads: list[Upload], schedule: list[tuple[int, bool]]) -> None:
    tag = uuid.uuid4().hex[:10]
    once, redelivered = f"once-{tag}", f"again-{tag}"
    expected_answers = [await deliver(db, once, body) for body in uploads]
    assert all(answer is not None and not answer["duplicate"] for answer in expected_answers)
    first_answers: list[dict[str, Any] | None] = []
    for index, first in schedule:
        answer = await deliver(db, redelivered, uploads[index])
        if first:
            first_answers.append(answer)
        else:
            # A re-delivery is absorbed as a duplicate or refused as a stale attempt.
            assert answer is None or answer["duplicate"], (index, answer)
    assert first_answers == expected_answers
    expected = await ledger_of(db, once)
    assert expected[1] is not None and expected[1]["terminal_status"] == uploads[-1]["status"]
    assert await ledger_of(db, redelivered) == expected


@st.composite
def deliveries(draw: st.DrawFn, count: int) -> list[tuple[int, bool]]:
    """Each upload once in order (True), with re-deliveries of it or earlier ones (False) after it."""
    schedule: list[tuple[int, bool]] = []
    for index in range(count):
        schedule.append((index, True))
        schedule += [(draw(st.integers(0, index)), False) for _ in range(draw(st.integers(0, 2)))]
    return schedule


def test_redelivery_leaves_the_ledger_as_if_each_upload_came_once(clean_database_url: str) -> None:
    with asyncio.Runner() as runner:
        db = Database(clean_database_url, min_size=1, max_size=2)
        runner.run(db.open())
        try:

            @settings(max_examples=30, deadline=None)
            @given(data=st.data())
            def property_holds(data: st.DataObject) -> None:
                uploads = data.draw(reporter_uploads(), label="uploads")
                schedule = data.draw(deliveries(len(uploads)), label="schedule")
                runner.run(check(db, uploads, schedule))

            property_holds()
        finally:
            runner.run(db.close())
