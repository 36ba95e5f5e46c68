"""The claim's own path on Postgres: one statement in autocommit, garbage collected on a cadence
and never visible in between, the connection handed back as it was taken, the counts served by
their index."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from ledger.clock import ManualClock, to_ms
from ledger.db import Database
from ledger.pool.store import GcCadence, WarmPool

MIN = 60_000
V = "v1"


class Ticker:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def entry_ids(db: Database) -> list[str]:
    async with db.connection() as conn:
        rows = await (await conn.execute("SELECT id FROM ledger.pool_entries ORDER BY id")).fetchall()
    return [r["id"] for r in rows]


async def test_a_claim_between_collections_leaves_garbage_in_place_but_never_shows_it(db: Database) -> None:
    clock, tick = ManualClock(), Ticker()
    pool = WarmPool(db, clock=clock, cadence=GcCadence(10, ticker=tick))
    t = to_ms(clock.current)
    await pool.add("default", V, ["short"], ttl_ms=MIN, ready=True)
    await pool.add("default", V, ["stale"], ready_at_ms=t - 6 * MIN - 1)
    await pool.add("default", V, ["warm", "fresh"])
    await pool.promote("default", V, ["fresh"])
    assert await pool.claim("default", V, "r1") == {"id": "fresh", "available": 2, "warming": 1}
    clock.advance(MIN)  # "short" expires, "stale" turns stale
    # Not due yet: nothing is deleted, and neither garbage entry is claimed or counted.
    assert await pool.claim("default", V, "r2") == {"id": None, "available": 0, "warming": 1}
    assert await entry_ids(db) == ["short", "stale", "warm"]
    assert [e["id"] for e in await pool.list("default", V)] == ["warm"]
    # list collected (every operation but a claim does); put garbage back and let a claim collect it.
    await pool.add("default", V, ["short2"], ttl_ms=1)
    clock.advance(1)
    assert await entry_ids(db) == ["short2", "warm"]
    tick.now += 10
    assert await pool.claim("default", V, "r3") == {"id": None, "available": 0, "warming": 1}
    assert await entry_ids(db) == ["warm"]


async def test_other_versions_are_collected_by_a_claim_that_is_due(db: Database) -> None:
    tick = Ticker()
    pool = WarmPool(db, cadence=GcCadence(10, ticker=tick))
    await pool.add("default", "v0", ["old"], ready=True)
    await pool.add("other", V, ["elsewhere"], ready=True)
    assert await pool.claim("default", V, "r1") == {"id": None, "available": 0, "warming": 0}
    assert await entry_ids(db) == ["elsewhere"]
    await pool.add("default", "v0", ["old2"], ready=True)
    assert (await pool.claim("default", V, "r2"))["id"] is None  # not due: left, never taken
    assert await entry_ids(db) == ["elsewhere", "old2"]
    tick.now += 10
    await pool.claim("default", V, "r3")
    assert await entry_ids(db) == ["elsewhere"]


async def test_claims_use_the_pool_s_cadence_by_default(db: Database) -> None:
    pool = WarmPool(db)
    assert isinstance(pool.cadence, GcCadence) and pool.cadence.interval == 1.0


async def test_the_connection_goes_back_in_transaction_mode(db: Database) -> None:
    pool = WarmPool(db)
    await pool.add("default", V, ["a"], ready=True)
    assert (await pool.claim("default", V, "r1"))["id"] == "a"
    async with db.connection() as conn:
        assert conn.autocommit is False
        # A plain connection() block is one transaction again: a failure rolls back all of it.
        await conn.execute(
            "INSERT INTO ledger.run_mappings (run_id, pool, instance_id, state, version,"
            " claimed_at, created_at, expires_at) VALUES ('x', 'default', 'i', 'claimed',"
            " 'v1', now(), now(), now() + interval '1 minute')"
        )
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        await conn.rollback()


async def test_a_failed_claim_gives_back_a_working_connection_in_transaction_mode(
    clean_database_url: str,
) -> None:
    async with Database(clean_database_url, min_size=1, max_size=1, lock_timeout_s=0.2) as db:
        pool = WarmPool(db)
        await pool.add("default", V, ["a"], ready=True)
        async with await psycopg.AsyncConnection.connect(clean_database_url) as holder:
            # Another transaction holds the run's lock: the claim waits lock_timeout, then fails.
            await holder.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('ledger.run_mappings:r1', 0))"
            )
            with pytest.raises(psycopg.errors.LockNotAvailable):
                await pool.claim("default", V, "r1")
            await holder.rollback()
        async with db.connection() as conn:
            assert conn.autocommit is False
        assert await pool.claim("default", V, "r1") == {"id": "a", "available": 0, "warming": 0}


async def test_inside_a_shared_transaction_the_claim_is_part_of_it(db: Database) -> None:
    pool = WarmPool(db)
    await pool.add("default", V, ["a"], ready=True)
    with pytest.raises(RuntimeError, match="undo"):
        async with db.shared_transaction():
            assert (await pool.claim("default", V, "r1"))["id"] == "a"
            raise RuntimeError("undo")
    assert await entry_ids(db) == ["a"]
    assert await pool.resolve_run("r1", V) == {"instance_id": None, "started_at": None}
    async with db.shared_transaction():
        assert (await pool.claim("default", V, "r1"))["id"] == "a"
    assert await entry_ids(db) == []


async def test_behind_a_transaction_pooler_the_claim_is_a_transaction(clean_database_url: str) -> None:
    async with Database(clean_database_url, transaction_pooling=True, lock_timeout_s=5) as db:
        pool = WarmPool(db)
        await pool.add("default", V, ["a", "b"], ready=True)
        results = await asyncio.gather(*(pool.claim("default", V, f"r{n}") for n in range(3)))
        assert sorted(str(r["id"]) for r in results) == ["None", "a", "b"]


async def test_the_counts_can_be_read_from_their_index_alone(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute(
            """
            INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)
            SELECT 'default', 'i' || n, 'v1', 'ready', now(), now(), now() + interval '5 minutes'
            FROM generate_series(1, 2000) AS n
            """
        )
    async with db.connection() as conn:
        await conn.execute("SET enable_seqscan = off")
        await conn.execute("SET enable_bitmapscan = off")
        cur = await conn.execute(
            "EXPLAIN (FORMAT JSON) SELECT * FROM ledger.pool_counts('default', 'v1', now(), 0, 420000)"
        )
        row = await cur.fetchone()
        assert row is not None
        plan: Any = row["QUERY PLAN"]
    scans = list(_scans(plan[0]["Plan"]))
    assert scans == [("Index Only Scan", "ix_pool_entries_version_expires_at")], scans


def _scans(node: dict[str, Any]) -> Any:
    if "Scan" in node["Node Type"]:
        yield node["Node Type"], node.get("Index Name")
    for child in node.get("Plans", []):
        yield from _scans(child)
