"""Sheet row outcomes on real Postgres: upserts, per-namespace counts, concurrent writers."""

from __future__ import annotations

import asyncio
import random

import pytest

from ledger.db import Database
from ledger.errors import InvalidInput, NotFound
from ledger.ingest.sheets import record_sheet_rows, sheet_outcomes
from ledger.runlog.store import RunLog


def rows(namespace: str, keys: range | list[int], status: str) -> list[dict[str, str]]:
    return [{"table_namespace": namespace, "row_key": f"k{k}", "status": status} for k in keys]


async def test_recording_opens_the_run_and_counts_by_namespace(db: Database) -> None:
    recorded = await record_sheet_rows(
        db,
        "r",
        rows("people", range(5), "completed")
        + rows("people", range(5, 7), "failed")
        + rows("orgs", range(3), "pending"),
    )
    assert recorded == 10
    # The data plane reported before the worker: the run exists now.
    assert (await RunLog(db).get_run("r"))["status"] == "running"
    assert await sheet_outcomes(db, "r") == [
        {"table_namespace": "orgs", "completed": 0, "failed": 0, "total": 3},
        {"table_namespace": "people", "completed": 5, "failed": 2, "total": 7},
    ]


async def test_upsert_moves_a_row_between_states(db: Database) -> None:
    await record_sheet_rows(db, "r", rows("t", range(4), "pending"))
    await record_sheet_rows(db, "r", rows("t", [0, 1], "completed") + rows("t", [2], "failed"))
    await record_sheet_rows(db, "r", rows("t", [2], "completed"))  # a retried row
    assert await sheet_outcomes(db, "r") == [
        {"table_namespace": "t", "completed": 3, "failed": 0, "total": 4}
    ]


async def test_repeated_key_in_one_batch_counts_once_and_last_wins(db: Database) -> None:
    batch = rows("t", [1], "failed") + rows("t", [1], "completed")
    assert await record_sheet_rows(db, "r", batch) == 1
    assert await sheet_outcomes(db, "r") == [
        {"table_namespace": "t", "completed": 1, "failed": 0, "total": 1}
    ]


async def test_runs_do_not_mix(db: Database) -> None:
    await record_sheet_rows(db, "a", rows("t", range(3), "completed"))
    await record_sheet_rows(db, "b", rows("t", range(2), "failed"))
    assert await sheet_outcomes(db, "a") == [
        {"table_namespace": "t", "completed": 3, "failed": 0, "total": 3}
    ]
    assert await sheet_outcomes(db, "b") == [
        {"table_namespace": "t", "completed": 0, "failed": 2, "total": 2}
    ]


async def test_known_run_without_rows_and_unknown_run(db: Database) -> None:
    await RunLog(db).open_run("empty")
    assert await sheet_outcomes(db, "empty") == []
    with pytest.raises(NotFound):
        await sheet_outcomes(db, "nope")
    assert await record_sheet_rows(db, "nope", []) == 0
    with pytest.raises(NotFound):  # an empty batch does not open a run
        await sheet_outcomes(db, "nope")


@pytest.mark.parametrize(
    ("batch", "field"),
    [
        ("rows", "rows"),
        ([1], "rows[0]"),
        ([{"table_namespace": "", "row_key": "k", "status": "pending"}], "rows[0].table_namespace"),
        ([{"table_namespace": "t", "row_key": 3, "status": "pending"}], "rows[0].row_key"),
        ([{"table_namespace": "t", "row_key": "k", "status": "done"}], "rows[0].status"),
        ([{"table_namespace": "t\x00", "row_key": "k", "status": "pending"}], "rows[0].table_namespace"),
    ],
)
async def test_bad_rows_reject_the_whole_batch(db: Database, batch: object, field: str) -> None:
    good = rows("t", range(3), "completed")
    with pytest.raises(InvalidInput) as exc:
        await record_sheet_rows(db, "r", batch if isinstance(batch, str) else [*batch, *good])  # type: ignore[list-item]
    assert exc.value.field == field
    with pytest.raises(NotFound):  # nothing written, not even the run
        await sheet_outcomes(db, "r")


async def test_concurrent_upserts_from_several_connections(clean_database_url: str) -> None:
    """Eight writers on their own connections, overlapping rows in shuffled orders, run not yet open."""
    writers = 8
    dbs = [Database(clean_database_url, min_size=1, max_size=1) for _ in range(writers)]
    for database in dbs:
        await database.open()

    async def writer(index: int, database: Database) -> None:
        rng = random.Random(index)
        for round_ in range(5):
            # Shared rows everyone marks completed, in a different order each time (lock order is
            # the ledger's business: no deadlock), plus rows of its own moving pending -> failed.
            shared = rows("shared", range(200), "completed")
            rng.shuffle(shared)
            own = rows(f"w{index}", range(round_ * 10, round_ * 10 + 10), "pending")
            await record_sheet_rows(database, "hot", shared + own)
            await record_sheet_rows(
                database, "hot", rows(f"w{index}", range(round_ * 10, round_ * 10 + 4), "failed")
            )

    try:
        await asyncio.gather(*(writer(i, d) for i, d in enumerate(dbs)))
        outcomes = await sheet_outcomes(dbs[0], "hot")
    finally:
        for database in dbs:
            await database.close()
    expected = [{"table_namespace": "shared", "completed": 200, "failed": 0, "total": 200}]
    expected += [
        {"table_namespace": f"w{i}", "completed": 0, "failed": 20, "total": 50} for i in range(writers)
    ]
    assert outcomes == expected
