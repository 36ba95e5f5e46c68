"""The claim's own path on Postgres: one statement in autocommit, garbage collected on a cadence
and never visible in between, the connection handed back as it was taken, counts from the tallies
(exact while claims fold them and adds write them) reading only garbage and young entries."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg
import pytest

from ledger.clock import ManualClock, to_ms
from ledger.db import Database
from ledger.errors import DatabaseUnavailable, InstanceMapped, RunTerminal
from ledger.pool.store import GcCadence, WarmPool
from ledger.runlog.store import RunLog

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
            with pytest.raises(DatabaseUnavailable) as caught:
                await pool.claim("default", V, "r1")
            assert isinstance(caught.value.__cause__, psycopg.errors.LockNotAvailable)
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


async def test_counting_reads_the_tallies_and_the_garbage_not_every_entry(db: Database) -> None:
    pool = WarmPool(db, cadence=GcCadence(3600))
    await pool.add("default", V, [f"i{n}" for n in range(2000)], ready=True)
    async with db.connection() as conn:
        await conn.execute(
            """
            INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)
            VALUES ('default', 'expired1', 'v1', 'warming', now() - interval '1 hour', NULL, now()),
                   ('default', 'expired2', 'v1', 'ready', now() - interval '1 hour',
                    now() - interval '1 minute', now() - interval '1 second'),
                   ('default', 'stale', 'v1', 'ready', now() - interval '1 hour',
                    now() - interval '8 minutes', now() + interval '1 minute'),
                   ('default', 'future', 'v1', 'ready', now(), now() + interval '1 minute',
                    now() + interval '5 minutes')
            """
        )
        await conn.execute("ANALYZE ledger.pool_entries")
        cur = await conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM ledger.pool_counts("
            "'default', 'v1', now(), now() - interval '7 minutes', now())"
        )
        row = await cur.fetchone()
        assert row is not None
        plan: Any = row["QUERY PLAN"]
    examined = sum(_examined(plan[0]["Plan"]))
    # Two expired, one stale, one ready in the future: what the scans of entries may read.
    assert examined <= 4, plan
    assert await pool.count("default", V) == {"available": 2000, "warming": 1}


def _examined(node: dict[str, Any]) -> Any:
    """Rows each scan of pool_entries read: those it returned and those its filters removed."""
    if "Scan" in node["Node Type"] and node.get("Relation Name") == "pool_entries":
        yield (
            node["Actual Rows"] * node.get("Actual Loops", 1)
            + node.get("Rows Removed by Filter", 0)
            + node.get("Rows Removed by Index Recheck", 0)
        )
    for child in node.get("Plans", []):
        yield from _examined(child)


TALLIES_VS_ENTRIES = """
SELECT version, t.entries AS tallied, e.entries, t.ready AS tallied_ready, e.ready
FROM (SELECT version, sum(entries) AS entries, sum(ready) AS ready
      FROM ledger.pool_tallies WHERE pool = 'default' GROUP BY version) t
FULL JOIN (SELECT version, count(*) AS entries, count(*) FILTER (WHERE state = 'ready') AS ready
           FROM ledger.pool_entries WHERE pool = 'default' GROUP BY version) e USING (version)
WHERE coalesce(t.entries, 0) <> coalesce(e.entries, 0) OR coalesce(t.ready, 0) <> coalesce(e.ready, 0)
"""


async def test_tallies_stay_exact_while_claims_fold_them_and_adds_write_them(db: Database) -> None:
    # Every claim collects and folds: the most folding racing the most writing. A fold that
    # waited on a writer waiting on it would deadlock (an error here); one that lost or doubled a
    # row would leave the tallies off.
    folding = WarmPool(db, cadence=GcCadence(0))
    writer = WarmPool(db)
    await writer.add("default", "v0", ["old1", "old2"], ready=True)

    async def adder(k: int) -> None:
        for batch in range(6):
            await writer.add("default", V, [f"a{k}-{batch}-{n}" for n in range(3)], ready=batch % 2 == 0)
            # A claim may have taken the entry already: its instance serves a run, and is refused.
            with contextlib.suppress(InstanceMapped):
                await writer.promote("default", V, [f"a{k}-{batch}-0"])

    async def claimer(k: int) -> None:
        for n in range(10):
            await folding.claim("default", V, f"c{k}-{n}")

    await asyncio.gather(*(adder(k) for k in range(3)), *(claimer(k) for k in range(6)))
    async with db.connection() as conn:
        assert await (await conn.execute(TALLIES_VS_ENTRIES)).fetchall() == []
        tallies = await (await conn.execute("SELECT count(*) AS n FROM ledger.pool_tallies")).fetchone()
    counted = await writer.count("default", V)
    listed = await writer.list("default", V)
    assert counted["available"] + counted["warming"] == len(listed)
    assert counted["available"] == len([e for e in listed if e["state"] == "ready"])
    # Folded: at most a row per connection that wrote.
    assert tallies is not None and tallies["n"] <= 2 * 20


async def test_the_claim_order_is_read_from_the_index_with_a_whole_batch_ready_at_one_instant(
    db: Database,
) -> None:
    # An add makes its batch ready at one instant: newest-first then ties on every entry, and the
    # claim's order (ready_at DESC, id) must still come from the index, not a sort of the tie.
    pool = WarmPool(db)
    await pool.add("tied", V, [f"i{n:05}" for n in range(3000)], ready=True)
    async with db.connection() as conn:
        await conn.execute("ANALYZE ledger.pool_entries")
        await conn.execute("SET LOCAL enable_seqscan = off")
        cur = await conn.execute(
            "EXPLAIN SELECT pool, id FROM ledger.pool_entries"
            " WHERE pool = 'tied' AND version = %s AND state = 'ready' AND expires_at > now()"
            " ORDER BY ready_at DESC, id LIMIT 1 FOR UPDATE SKIP LOCKED",
            (V,),
        )
        plan = "\n".join(row["QUERY PLAN"] for row in await cur.fetchall())
    assert "ix_pool_entries_ready_newest" in plan, plan
    assert "Sort" not in plan, plan
    assert (await pool.claim("tied", V, "r-tied"))["id"] == "i00000"


async def test_a_claim_for_a_run_that_has_ended_is_refused_and_takes_nothing(db: Database) -> None:
    # A warm instance handed to a run that can no longer use it is lost to the pool until GC.
    pool, runs = WarmPool(db), RunLog(db)
    await pool.add("default", V, ["warm-1"], ready=True)
    await runs.open_run("ended")
    await runs.set_terminal("ended", "failed", error="gone")
    with pytest.raises(RunTerminal) as refused:
        await pool.claim("default", V, "ended")
    assert refused.value.terminal["status"] == "failed" and refused.value.terminal["error"] == "gone"
    assert await entry_ids(db) == ["warm-1"]
    assert await pool.count("default", V) == {"available": 1, "warming": 0}
    # An unknown run and a live one still claim (a claim usually comes before the run exists).
    await runs.open_run("live")
    assert (await pool.claim("default", V, "live"))["id"] == "warm-1"
    assert (await pool.claim("default", V, "not-yet"))["id"] is None


async def test_a_claimed_run_that_then_ends_is_refused_on_its_next_claim(db: Database) -> None:
    pool, runs = WarmPool(db), RunLog(db)
    await pool.add("default", V, ["warm-1", "warm-2"], ready=True)
    first = await pool.claim("default", V, "r1")
    await runs.open_run("r1")
    await runs.set_terminal("r1", "completed")
    with pytest.raises(RunTerminal):
        await pool.claim("default", V, "r1")
    assert [e["id"] for e in await pool.list("default", V)] == sorted({"warm-1", "warm-2"} - {first["id"]})
