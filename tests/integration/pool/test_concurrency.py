"""Concurrency on real connections: claims never share an instance, a run's claims agree, the
map-versus-block race has exactly one winner, and maps, adds, readies and claims racing on one
instance leave it in exactly one place.

A `BarrierClock` reads the transaction's `now()` and then waits until every racer has done the same,
so all the racing transactions are open on their own connections before any of them goes on.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from ledger.clock import DatabaseClock
from ledger.db import Database
from ledger.errors import InstanceMapped
from ledger.pool import store
from ledger.pool.store import WarmPool
from tests.faults.invariants import instance_problems, places

V = "v1"


class BarrierClock:
    def __init__(self, parties: int, jitter: random.Random | None = None) -> None:
        self.barrier = asyncio.Barrier(parties)
        self.inner = DatabaseClock()
        self.jitter = jitter

    async def now(self, conn: psycopg.AsyncConnection[Any]) -> datetime:
        value = await self.inner.now(conn)
        await self.barrier.wait()
        if self.jitter is not None:
            # Let a one-statement claim lose some races to a many-statement add or ready.
            await asyncio.sleep(self.jitter.random() * 0.01)
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


async def test_maps_adds_readies_and_claims_racing_on_one_instance_leave_it_in_one_place(
    db: Database, clean_database_url: str
) -> None:
    # Each round races 16 transactions on their own connections over four instances: two already
    # ready in pool "a" (mapped, refreshed in "a", added to "b", readied, claimed) and two new ones
    # (mapped, added to "a", added to "b"). Whatever the order, each ends in exactly one place: a
    # live entry of one pool or the instance of one live run, and every loser is refused with
    # InstanceMapped (a deadlock or another error fails the test).
    setup = WarmPool(db)
    outcomes: Counter[tuple[str, str]] = Counter()
    with psycopg.connect(clean_database_url, autocommit=True, row_factory=dict_row) as checker:
        for n in range(30):
            racing = WarmPool(db, clock=BarrierClock(16, jitter=random.Random(n)))
            pooled, fresh = [f"p{n}-{k}" for k in range(2)], [f"f{n}-{k}" for k in range(2)]
            await setup.add("a", V, pooled, ready=True)
            racers: list[tuple[str, Awaitable[Any]]] = []
            for k, instance in enumerate(pooled + fresh):
                racers += [
                    ("map", racing.map_run(f"m{n}-{k}", instance, V, started=k % 2 == 0)),
                    ("add a", racing.add("a", V, [instance], ready=True)),
                    ("add b", racing.add("b", V, [instance])),
                ]
            racers += [("ready", racing.ready("a", V, i)) for i in pooled]
            racers += [("claim", racing.claim("a", V, f"c{n}-{k}")) for k in range(2)]
            order = list(range(len(racers)))
            random.Random(n).shuffle(order)
            results = await asyncio.gather(*(racers[i][1] for i in order), return_exceptions=True)
            for i, result in zip(order, results, strict=True):
                if isinstance(result, BaseException) and not isinstance(result, InstanceMapped):
                    raise result
                outcomes[(racers[i][0], _outcome(result))] += 1
            assert instance_problems(checker) == [], n
            assert places(checker, pooled + fresh) == dict.fromkeys(pooled + fresh, 1), n
    # The races went both ways (a claim mostly beats a ready, and may lose to none).
    won = {kind for kind, outcome in outcomes if outcome == "won"}
    refused = {kind for kind, outcome in outcomes if outcome == "refused"}
    assert won >= {"map", "add a", "add b", "claim"} and refused >= {"map", "add a", "add b", "ready"}, (
        outcomes
    )


def _outcome(result: object) -> str:
    if isinstance(result, InstanceMapped):
        return "refused"
    if result in (1, True, {"mapped": True}) or (isinstance(result, dict) and result.get("id")):
        return "won"
    return "nothing"  # a claim that found no entry, a ready whose entry a claim took


async def test_an_add_waiting_on_a_claim_s_entry_sees_the_claim_s_mapping(db: Database) -> None:
    # A claim deletes the entry and maps the run in one transaction; an add of the same instance
    # that waited for that row must look for the mapping only after it, or it would put the
    # instance back in the pool while the run holds it.
    pool = WarmPool(db)
    await pool.add("a", V, ["x"], ready=True)
    async with db.transaction() as claim:
        await claim.execute("DELETE FROM ledger.pool_entries WHERE pool = 'a' AND id = 'x'")
        await claim.execute(
            "INSERT INTO ledger.run_mappings (run_id, pool, instance_id, state, version, claimed_at,"
            " created_at, expires_at) VALUES ('r1', 'a', 'x', 'claimed', %s, now(), now(),"
            " now() + interval '1 hour')",
            (V,),
        )
        refresh = asyncio.ensure_future(pool.add("a", V, ["x"], ready=True))
        await _blocked(db, refresh)
    with pytest.raises(InstanceMapped, match="'x' is mapped to a live run"):
        await refresh
    assert await _fetch(db, "SELECT id FROM ledger.pool_entries") == []


async def test_a_map_waiting_on_an_add_of_its_instance_sees_the_entry(db: Database) -> None:
    pool = WarmPool(db)
    async with db.transaction() as add:
        # What an add holds while it writes: the instance's lock, then the new entry.
        await add.execute(store.LOCK, {"key": store.instance_key("x")})
        await add.execute(
            "INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)"
            " VALUES ('a', 'x', %s, 'ready', now(), now(), now() + interval '8 minutes')",
            (V,),
        )
        mapping = asyncio.ensure_future(pool.map_run("r1", "x", V, started=True))
        await _blocked(db, mapping)
    with pytest.raises(InstanceMapped, match="'x' is a live entry of a pool"):
        await mapping
    assert await _fetch(db, "SELECT run_id FROM ledger.run_mappings") == []


async def _blocked(db: Database, task: asyncio.Future[Any]) -> None:
    """Wait until `task`'s transaction waits on a lock another holds (it must not have finished)."""
    waiting = (
        "SELECT count(*) AS n FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    while (await _fetch(db, waiting))[0]["n"] == 0:
        assert not task.done(), task
        await asyncio.sleep(0.01)
