"""Durable node observations on real Postgres: round trip, newest per invocation, validation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ledger.db import Database
from ledger.errors import InvalidInput, NotFound
from ledger.ingest.observations import invocation_seq_from_id, list_observations, record_observations
from ledger.runlog.store import RunLog


def obs(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"node_id": "n", "attempt": 1, "invocation_seq": 0, "status": "started"}
    base.update(fields)
    return base


async def test_round_trip_keeps_every_field_and_exact_milliseconds(db: Database) -> None:
    full = {
        "node_id": "extract",
        "attempt": 2,
        "invocation_seq": 7,
        "invocation_id": "extract:2:7",
        "status": "completed",
        "inputs": {"doc": "a.pdf", "pages": [1, 2]},
        "outputs": {"fields": {"total": 12.5}},
        "error": None,
        # Values that lose a millisecond when converted through float seconds.
        "started_at": 4296629646813,
        "settled_at": 1097037869741 + 3_200_000_000_000,
    }
    assert await record_observations(db, "r", [full]) == 1
    assert await list_observations(db, "r") == [full]
    # The data plane reported first: the run is open now.
    assert (await RunLog(db).get_run("r"))["run_id"] == "r"


async def test_newest_per_invocation_wins(db: Database) -> None:
    started = obs(status="started", started_at=1000)
    completed = obs(status="completed", started_at=1000, settled_at=2000, outputs={"x": 1})
    await record_observations(db, "r", [started])
    assert await record_observations(db, "r", [completed]) == 1
    # A late `started` record of the same invocation does not overwrite the completion.
    assert await record_observations(db, "r", [started]) == 0
    # Neither does an older settlement.
    assert (
        await record_observations(
            db, "r", [obs(status="failed", started_at=1000, settled_at=1500, error="x")]
        )
        == 0
    )
    [stored] = await list_observations(db, "r")
    assert (stored["status"], stored["outputs"], stored["settled_at"]) == ("completed", {"x": 1}, 2000)
    # A later settlement (a re-run of the same invocation) replaces it.
    assert (
        await record_observations(
            db, "r", [obs(status="failed", started_at=1000, settled_at=2500, error="late")]
        )
        == 1
    )
    [stored] = await list_observations(db, "r")
    assert (stored["status"], stored["error"], stored["outputs"]) == ("failed", "late", None)


async def test_settled_beats_unsettled_at_the_same_instant_and_batches_follow_the_rule(db: Database) -> None:
    batch = [
        obs(status="completed", started_at=100, settled_at=100),
        obs(status="started", started_at=100),  # same instant, unsettled: older
        obs(node_id="m", status="started", started_at=5),
        obs(node_id="m", status="completed", started_at=5, settled_at=9),
    ]
    assert await record_observations(db, "r", batch) == 3
    stored = {o["node_id"]: o["status"] for o in await list_observations(db, "r")}
    assert stored == {"n": "completed", "m": "completed"}


async def test_attempts_and_invocations_are_kept_apart_and_ordered(db: Database) -> None:
    await record_observations(
        db,
        "r",
        [
            obs(node_id="b", attempt=1, invocation_seq=0),
            obs(node_id="a", attempt=2, invocation_seq=1),
            obs(node_id="a", attempt=1, invocation_seq=3),
            obs(node_id="a", attempt=1, invocation_seq=0, invocation_id=None),
        ],
    )
    listed = [(o["node_id"], o["attempt"], o["invocation_seq"]) for o in await list_observations(db, "r")]
    assert listed == [("a", 1, 0), ("a", 1, 3), ("a", 2, 1), ("b", 1, 0)]


def test_invocation_seq_from_id() -> None:
    assert invocation_seq_from_id("node:2:14") == 14
    assert invocation_seq_from_id("node") == 0
    assert invocation_seq_from_id("node:x") == 0
    assert invocation_seq_from_id(None) == 0


async def test_invocation_seq_defaults_from_the_invocation_id(db: Database) -> None:
    await record_observations(
        db, "r", [{"node_id": "n", "attempt": 0, "status": "started", "invocation_id": "n:0:4"}]
    )
    [stored] = await list_observations(db, "r")
    assert stored["invocation_seq"] == 4


async def test_unknown_and_empty_runs(db: Database) -> None:
    with pytest.raises(NotFound):
        await list_observations(db, "nope")
    await RunLog(db).open_run("empty")
    assert await list_observations(db, "empty") == []


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"node_id": "", "attempt": 1, "status": "started"}, "observations[1].node_id"),
        ({"node_id": "n", "status": "started"}, "observations[1].attempt"),
        ({"node_id": "n", "attempt": -1, "status": "started"}, "observations[1].attempt"),
        ({"node_id": "n", "attempt": 1, "status": "hit"}, "observations[1].status"),
        (
            {"node_id": "n", "attempt": 1, "status": "started", "invocation_seq": "2"},
            "observations[1].invocation_seq",
        ),
        (
            {"node_id": "n", "attempt": 1, "status": "started", "started_at": "noon"},
            "observations[1].started_at",
        ),
        ({"node_id": "n", "attempt": 1, "status": "failed", "error": 3}, "observations[1].error"),
        (
            {"node_id": "n", "attempt": 1, "status": "started", "inputs": {"x": float("inf")}},
            "observations[1].inputs",
        ),
        ("not an object", "observations[1]"),
    ],
)
async def test_bad_observation_rejects_the_batch(db: Database, bad: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        await record_observations(db, "r", [obs(), bad])
    assert exc.value.field == field
    with pytest.raises(NotFound):  # nothing written, not even the run
        await list_observations(db, "r")


async def test_concurrent_recorders_keep_the_newest(clean_database_url: str) -> None:
    """Writers on separate connections send every version of the same invocations in random order."""
    # A checkout's wait far past the default: on a loaded machine a writer's one connection may be
    # slow to come back, and the test is about order, not speed.
    dbs = [Database(clean_database_url, min_size=1, max_size=1, timeout_s=30.0) for _ in range(4)]
    for database in dbs:
        await database.open()
    versions = [
        obs(node_id=f"n{k}", status="started", started_at=10 * t, settled_at=None)
        for k in range(10)
        for t in range(1, 6)
    ]
    versions += [
        obs(node_id=f"n{k}", status="completed", started_at=10, settled_at=1000 + k) for k in range(10)
    ]

    async def writer(index: int, database: Database) -> None:
        order = versions[index::2] + versions[:index:2]
        for start in range(0, len(order), 7):
            await record_observations(database, "r", order[start : start + 7])
        await record_observations(database, "r", list(reversed(versions)))

    try:
        await asyncio.gather(*(writer(i, d) for i, d in enumerate(dbs)))
        stored = await list_observations(dbs[0], "r")
    finally:
        for database in dbs:
            await database.close()
    assert [(o["node_id"], o["status"], o["settled_at"]) for o in stored] == [
        (f"n{k}", "completed", 1000 + k) for k in range(10)
    ]
