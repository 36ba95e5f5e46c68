"""Concurrency on real connections: claims never share an instance, a run's claims agree, and the
map-versus-block race has exactly one winner.

A `BarrierClock` reads the transaction's `now()` and then waits until every racer has done the same,
so all the racing transactions are open on their own connections before any of them goes on.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import psycopg

from ledger.clock import DatabaseClock
from ledger.db import Database
from ledger.pool.store import WarmPool

V = "v1"


class BarrierClock:
    def __init__(self, parties: int) -> None:
        self.barrier = asyncio.Barrier(parties)
        self.inner = DatabaseClock()

    async def now(self, conn: psycopg.AsyncConnection[Any]) -> datetime:
        value = await self.inner.now(conn)
        await self.barrier.wait()
        return value


async def _fetch(db: Database, query: str) -> list[dict[str, Any]]:
    async with db.connection() as conn:
        return await (await conn.execute(query)).fetchall()


async def test_16_claimers_for_10_entries_get_10_distinct_instances(db: Database) -> None:
    await WarmPool(db).add("default", V, [f"i{n}" for n in range(10)], ready=True)
    racing = WarmPool(db, clock=BarrierClock(16))
    results = await asyncio.gather(*(racing.claim("default", V, f"run{n}") for n in range(16)))
    taken = [r["id"] for r in results if r["id"] is not None]
    assert len(taken) == 10
    assert sorted(taken) == sorted(f"i{n}" for n in range(10))
    assert await _fetch(db, "SELECT id FROM ledger.pool_entries") == []
    mapped = await _fetch(db, "SELECT run_id, instance_id, state FROM ledger.run_mappings")
    assert sorted(m["instance_id"] for m in mapped) == sorted(taken)
    assert {m["state"] for m in mapped} == {"claimed"}
    by_run = {m["run_id"]: m["instance_id"] for m in mapped}
    assert by_run == {f"run{n}": r["id"] for n, r in enumerate(results) if r["id"] is not None}


async def test_8_claims_for_one_run_share_one_instance(db: Database) -> None:
    await WarmPool(db).add("default", V, [f"i{n}" for n in range(5)], ready=True)
    racing = WarmPool(db, clock=BarrierClock(8))
    results = await asyncio.gather(*(racing.claim("default", V, "the-run") for _ in range(8)))
    assert len({r["id"] for r in results}) == 1
    (instance,) = {r["id"] for r in results}
    assert instance is not None
    left = await _fetch(db, "SELECT id FROM ledger.pool_entries ORDER BY id")
    assert len(left) == 4 and instance not in {r["id"] for r in left}
    mapped = await _fetch(db, "SELECT run_id, instance_id FROM ledger.run_mappings")
    assert mapped == [{"run_id": "the-run", "instance_id": instance}]


async def test_a_claim_skips_an_entry_locked_by_another_transaction(db: Database) -> None:
    pool = WarmPool(db)
    await pool.add("default", V, ["older"], ready=True)
    async with db.transaction() as conn:
        await conn.execute(
            "UPDATE ledger.pool_entries SET ready_at = now() - interval '1 minute' WHERE id = 'older'"
        )
    await pool.add("default", V, ["newest"], ready=True)
    async with db.transaction() as holder:
        await holder.execute("SELECT id FROM ledger.pool_entries WHERE id = 'newest' FOR UPDATE")
        # Waiting on the held row would hang until the holder commits, which happens only afterwards.
        claimed = await asyncio.wait_for(pool.claim("default", V, "r1"), timeout=60)
    assert claimed["id"] == "older"


async def test_map_versus_block_has_exactly_one_winner(db: Database) -> None:
    setup = WarmPool(db)
    racing = WarmPool(db, clock=BarrierClock(2))
    wins = {"map": 0, "block": 0}
    for n in range(200):
        # An instance of its own per run: an instance serves one live run at a time.
        run, inst = f"run{n}", f"inst{n}"
        if n % 3 == 1:
            await setup.map_run(run, inst, V)  # claimed on the raced instance
        elif n % 3 == 2:
            await setup.map_run(run, f"other{n}", V)
        racers = [racing.map_run(run, inst, V, started=True), racing.block_run(run, inst, V)]
        if n % 2:
            block_result, map_result = await asyncio.gather(racers[1], racers[0])
        else:
            map_result, block_result = await asyncio.gather(*racers)
        (stored,) = await _fetch(
            db,
            "SELECT instance_id, state, blocked_instance_id, started_at FROM ledger.run_mappings"
            f" WHERE run_id = '{run}'",
        )
        if map_result["mapped"]:
            wins["map"] += 1
            assert block_result == {"blocked": False, "started": True}, n
            assert (stored["state"], stored["instance_id"]) == ("started", inst), n
            assert stored["started_at"] is not None
        else:
            wins["block"] += 1
            assert block_result == {"blocked": True, "started": False}, n
            assert (stored["state"], stored["blocked_instance_id"], stored["instance_id"]) == (
                "blocked",
                inst,
                "",
            ), n
    assert wins["map"] + wins["block"] == 200


async def test_adds_and_claims_interleave_without_losing_or_sharing_entries(db: Database) -> None:
    pool = WarmPool(db)
    added: list[str] = []

    async def adder(k: int) -> None:
        for batch in range(5):
            ids = [f"a{k}-{batch}-{n}" for n in range(4)]
            await pool.add("default", V, ids, ready=True)
            added.extend(ids)

    async def claimer(k: int) -> list[str]:
        got = []
        for n in range(8):
            result = await pool.claim("default", V, f"c{k}-{n}")
            if result["id"] is not None:
                got.append(result["id"])
        return got

    outcomes = await asyncio.gather(*(adder(k) for k in range(3)), *(claimer(k) for k in range(6)))
    claimed = [i for got in outcomes if got for i in got]
    assert len(claimed) == len(set(claimed))
    left = [r["id"] for r in await _fetch(db, "SELECT id FROM ledger.pool_entries")]
    assert sorted(claimed + left) == sorted(added)
