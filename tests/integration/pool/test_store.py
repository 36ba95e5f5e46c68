"""On Postgres: every rule of the warm pool and run mappings, committed, with a clock the
tests move across TTLs and the stale-ready limit."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from ledger.clock import ManualClock, to_ms
from ledger.db import Database
from ledger.errors import InstanceMapped, InvalidInput
from ledger.pool.store import PoolSettings, WarmPool
from ledger.runlog.store import RunLog

MIN = 60_000
V = "v1"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def pool(db: Database, clock: ManualClock) -> WarmPool:
    return WarmPool(db, clock=clock)


def now(clock: ManualClock) -> int:
    ms = to_ms(clock.current)
    assert ms is not None
    return ms


async def rows(db: Database, table: str) -> list[dict[str, Any]]:
    key = "pool, id" if table == "pool_entries" else "run_id"
    async with db.connection() as conn:
        cur = await conn.execute(f"SELECT * FROM ledger.{table} ORDER BY {key}")
        return [
            {k: to_ms(v) if hasattr(v, "tzinfo") else v for k, v in r.items()} for r in await cur.fetchall()
        ]


async def ids(db: Database) -> list[str]:
    return [r["id"] for r in await rows(db, "pool_entries")]


async def mapping(db: Database, run_id: str) -> dict[str, Any] | None:
    found = [r for r in await rows(db, "run_mappings") if r["run_id"] == run_id]
    return found[0] if found else None


# -- add ------------------------------------------------------------------------------------------


async def test_add_ttl_default_clamp_and_zero(pool: WarmPool, db: Database, clock: ManualClock) -> None:
    t = now(clock)
    assert await pool.add("default", V, ["a"]) == 1
    assert await pool.add("default", V, ["b"], ttl_ms=MIN) == 1
    assert await pool.add("default", V, ["c"], ttl_ms=10**9) == 1
    assert await pool.add("default", V, ["d"], ttl_ms=0) == 1
    expires = {r["id"]: r["expires_at"] - t for r in await rows(db, "pool_entries")}
    assert expires == {"a": 8 * MIN, "b": MIN, "c": 8 * MIN, "d": 8 * MIN}


async def test_add_with_custom_settings(db: Database, clock: ManualClock) -> None:
    pool = WarmPool(db, clock=clock, settings=PoolSettings(default_ttl_ms=MIN, max_ttl_ms=2 * MIN))
    await pool.add("default", V, ["a", "b"], ttl_ms=None)
    await pool.add("default", V, ["c"], ttl_ms=5 * MIN)
    t = now(clock)
    assert [e["expires_at"] - t for e in await pool.list("default", V)] == [MIN, MIN, 2 * MIN]


async def test_add_states_and_list(pool: WarmPool, clock: ManualClock) -> None:
    t = now(clock)
    assert await pool.add("default", V, ["w", "w"]) == 1  # one entry per id
    await pool.add("default", V, ["r"], ready=True)
    await pool.add("default", V, ["x"], ready_at_ms=t - 1000)
    await pool.add("default", V, ["f"], ready=False)
    listed = {e["id"]: e for e in await pool.list("default", V)}
    assert [e["id"] for e in await pool.list("default", V)] == ["f", "r", "w", "x"]
    assert listed["w"] == {
        "id": "w",
        "version": V,
        "state": "warming",
        "created_at": t,
        "ready_at": None,
        "expires_at": t + 8 * MIN,
    }
    assert (listed["r"]["state"], listed["r"]["ready_at"]) == ("ready", t)
    assert (listed["x"]["state"], listed["x"]["ready_at"]) == ("ready", t - 1000)
    assert listed["f"]["state"] == "warming"


async def test_readd_keeps_created_at_and_an_earlier_ready_at(pool: WarmPool, clock: ManualClock) -> None:
    t0 = now(clock)
    await pool.add("default", V, ["a"], ready=True)
    await pool.add("default", V, ["w"])
    clock.advance(MIN)
    await pool.add("default", V, ["a", "w"], ttl_ms=2 * MIN)
    entries = {e["id"]: e for e in await pool.list("default", V)}
    assert (entries["a"]["created_at"], entries["a"]["ready_at"], entries["a"]["state"]) == (t0, t0, "ready")
    assert entries["a"]["expires_at"] == t0 + 3 * MIN
    assert (entries["w"]["created_at"], entries["w"]["state"]) == (t0, "warming")
    clock.advance(MIN)
    await pool.add("default", V, ["a"], ready=True)  # ready given: ready as of now
    (a,) = [e for e in await pool.list("default", V) if e["id"] == "a"]
    assert (a["created_at"], a["ready_at"]) == (t0, t0 + 2 * MIN)


async def test_readd_after_expiry_starts_over(pool: WarmPool, clock: ManualClock) -> None:
    await pool.add("default", V, ["a"], ttl_ms=MIN, ready=True)
    clock.advance(MIN)  # expires_at == now: expired
    await pool.add("default", V, ["a"])
    (a,) = await pool.list("default", V)
    assert (a["created_at"], a["ready_at"], a["state"]) == (now(clock), None, "warming")


# -- GC -------------------------------------------------------------------------------------------


async def test_gc_removes_other_versions_of_the_same_pool_only(pool: WarmPool, db: Database) -> None:
    await pool.add("default", "v1", ["a", "b"], ready=True)
    await pool.add("other", "v1", ["o"], ready=True)
    await pool.add("default", "v2", ["c"])
    assert [(r["pool"], r["id"]) for r in await rows(db, "pool_entries")] == [
        ("default", "c"),
        ("other", "o"),
    ]
    # Any operation naming a version collects, a count as well.
    assert await pool.count("other", "v3") == {"available": 0, "warming": 0}
    assert [(r["pool"], r["id"]) for r in await rows(db, "pool_entries")] == [("default", "c")]


async def test_expired_entries_are_collected(pool: WarmPool, db: Database, clock: ManualClock) -> None:
    await pool.add("default", V, ["a"], ttl_ms=MIN)
    await pool.add("default", V, ["b"], ttl_ms=MIN + 1)
    clock.advance(MIN - 1)
    assert await pool.count("default", V) == {"available": 0, "warming": 2}
    clock.advance(1)
    assert await pool.count("default", V) == {"available": 0, "warming": 1}
    assert await ids(db) == ["b"]


async def test_stale_ready_is_neither_claimable_nor_available_and_is_collected(
    pool: WarmPool, db: Database, clock: ManualClock
) -> None:
    await pool.add("default", V, ["a"], ready=True)
    await pool.add("default", V, ["b"], ready=True, ready_at_ms=now(clock) - 1)
    clock.advance(7 * MIN)  # a is exactly at the limit, b one ms past it
    assert await pool.count("default", V) == {"available": 1, "warming": 0}
    assert await ids(db) == ["a"]
    clock.advance(1)
    assert await pool.claim("default", V, "r1") == {"id": None, "available": 0, "warming": 0}
    assert await ids(db) == []
    assert await mapping(db, "r1") is None


# -- claim and count ------------------------------------------------------------------------------


async def test_claim_takes_the_newest_ready_entry(pool: WarmPool, db: Database, clock: ManualClock) -> None:
    t = now(clock)
    await pool.add("default", V, ["old"], ready_at_ms=t - 3 * MIN)
    await pool.add("default", V, ["new"], ready_at_ms=t - 1 * MIN)
    await pool.add("default", V, ["mid"], ready_at_ms=t - 2 * MIN)
    await pool.add("default", V, ["warm"])
    taken = [(await pool.claim("default", V, f"r{i}"))["id"] for i in range(4)]
    assert taken == ["new", "mid", "old", None]
    assert await ids(db) == ["warm"]
    m = await mapping(db, "r0")
    assert m is not None
    assert (m["instance_id"], m["state"], m["pool"], m["version"]) == ("new", "claimed", "default", V)
    assert (m["claimed_at"], m["created_at"], m["expires_at"]) == (t, t, t + 60 * MIN)
    assert (m["started_at"], m["blocked_instance_id"]) == (None, None)


async def test_counts_after_a_claim(pool: WarmPool) -> None:
    await pool.add("default", V, ["a", "b", "c"], ready=True)
    await pool.add("default", V, ["w"])
    assert await pool.count("default", V) == {"available": 3, "warming": 1}
    assert await pool.claim("default", V, "r1") == {"id": "a", "available": 2, "warming": 1}
    assert await pool.count("default", V) == {"available": 2, "warming": 1}


async def test_min_ready_age(pool: WarmPool, clock: ManualClock) -> None:
    t = now(clock)
    await pool.add("default", V, ["young"], ready_at_ms=t - 10_000)
    await pool.add("default", V, ["seasoned"], ready_at_ms=t - 60_000)
    assert await pool.count("default", V, min_ready_age_ms=30_000) == {"available": 1, "warming": 1}
    assert await pool.count("default", V, min_ready_age_ms=60_000) == {"available": 1, "warming": 1}
    assert await pool.count("default", V, min_ready_age_ms=60_001) == {"available": 0, "warming": 2}
    claimed = await pool.claim("default", V, "r1", min_ready_age_ms=30_000)
    assert claimed == {"id": "seasoned", "available": 0, "warming": 1}


async def test_min_ready_age_is_clamped_to_the_max_ttl(db: Database, clock: ManualClock) -> None:
    settings = PoolSettings(default_ttl_ms=5 * MIN, max_ttl_ms=5 * MIN, ready_max_age_ms=10 * MIN)
    pool = WarmPool(db, clock=clock, settings=settings)
    await pool.add("default", V, ["a"], ready_at_ms=now(clock) - 6 * MIN)
    # An hour is clamped to 5 min, which a 6 min old entry satisfies.
    assert await pool.count("default", V, min_ready_age_ms=60 * MIN) == {"available": 1, "warming": 0}
    assert (await pool.claim("default", V, "r1", min_ready_age_ms=60 * MIN))["id"] == "a"


async def test_claim_for_a_run_that_holds_an_instance_is_idempotent(pool: WarmPool, db: Database) -> None:
    await pool.add("default", V, ["a", "b", "c"], ready=True)
    assert await pool.claim("default", V, "r1") == {"id": "a", "available": 2, "warming": 0}
    assert await pool.claim("default", V, "r1") == {"id": "a", "available": 2, "warming": 0}
    assert await pool.map_run("r1", "a", V, started=True) == {"mapped": True}
    assert (await pool.claim("default", V, "r1"))["id"] == "a"
    assert await ids(db) == ["b", "c"]


async def test_blocked_run_claims_nothing(pool: WarmPool, db: Database) -> None:
    await pool.add("default", V, ["a", "b"], ready=True)
    assert await pool.block_run("r1", "x", V) == {"blocked": True, "started": False}
    assert await pool.claim("default", V, "r1") == {"id": None, "available": 2, "warming": 0}
    assert await ids(db) == ["a", "b"]


async def test_claim_replaces_an_other_version_or_expired_mapping(
    pool: WarmPool, db: Database, clock: ManualClock
) -> None:
    await pool.map_run("r1", "old", "v0", started=True)
    await pool.add("default", V, ["a"], ready=True)
    assert (await pool.claim("default", V, "r1"))["id"] == "a"
    m = await mapping(db, "r1")
    assert m is not None and (m["instance_id"], m["version"], m["state"]) == ("a", V, "claimed")
    clock.advance(60 * MIN)  # the mapping expires; the pool entries too
    await pool.add("default", V, ["b"], ready=True)
    assert (await pool.claim("default", V, "r1"))["id"] == "b"


async def test_claim_records_its_pool(pool: WarmPool, db: Database) -> None:
    await pool.add("fleet-2", V, ["a"], ready=True)
    await pool.claim("fleet-2", V, "r1")
    m = await mapping(db, "r1")
    assert m is not None and m["pool"] == "fleet-2"


# -- promote, ready, delete, clear ----------------------------------------------------------------


async def test_promote(pool: WarmPool, clock: ManualClock) -> None:
    t = now(clock)
    await pool.add("default", V, ["a", "b"])
    await pool.add("default", V, ["r"], ready_at_ms=t - MIN)
    clock.advance(1000)
    assert await pool.promote("default", V, ["a", "r", "missing", "a"]) == 2
    entries = {e["id"]: (e["state"], e["ready_at"]) for e in await pool.list("default", V)}
    assert entries == {"a": ("ready", t + 1000), "b": ("warming", None), "r": ("ready", t + 1000)}
    assert await pool.promote("default", "v2", ["a"]) == 0  # and v1 is collected
    assert await pool.list("default", V) == []


async def test_promote_skips_expired_entries(pool: WarmPool, clock: ManualClock) -> None:
    await pool.add("default", V, ["a"], ttl_ms=MIN)
    clock.advance(MIN)
    assert await pool.promote("default", V, ["a"]) == 0
    assert await pool.count("default", V) == {"available": 0, "warming": 0}


async def test_ready_keeps_an_earlier_ready_at(pool: WarmPool, clock: ManualClock) -> None:
    t = now(clock)
    await pool.add("default", V, ["a", "b"])
    await pool.add("default", V, ["e"], ttl_ms=1000)
    assert await pool.ready("default", V, "a") is True
    clock.advance(1000)
    assert await pool.ready("default", V, "a") is True
    assert await pool.ready("default", V, "missing") is False
    assert await pool.ready("default", V, "e") is False  # expired
    entries = {e["id"]: (e["state"], e["ready_at"]) for e in await pool.list("default", V)}
    assert entries == {"a": ("ready", t), "b": ("warming", None)}
    assert await pool.ready("default", "v2", "b") is False


async def test_delete_and_clear(pool: WarmPool, db: Database) -> None:
    await pool.add("default", V, ["a", "b", "c"])
    await pool.add("other", V, ["o"])
    await pool.map_run("r1", "m", V)
    assert await pool.delete("default", V, ["a", "b", "zz"]) == 2
    assert await pool.delete("default", V, ["a"]) == 0
    assert await pool.clear("default") == 1
    assert await pool.clear("default") == 0
    assert [(r["pool"], r["id"]) for r in await rows(db, "pool_entries")] == [("other", "o")]
    assert await mapping(db, "r1") is not None  # clear leaves run mappings alone


# -- run mappings ---------------------------------------------------------------------------------


async def test_map_after_block_for_that_instance_is_refused(pool: WarmPool, db: Database) -> None:
    await pool.claim("default", V, "r1")
    assert await pool.block_run("r1", "i1", V) == {"blocked": True, "started": False}
    before = await mapping(db, "r1")
    assert before is not None and (before["state"], before["blocked_instance_id"]) == ("blocked", "i1")
    assert await pool.map_run("r1", "i1", V, started=True) == {"mapped": False}
    assert await mapping(db, "r1") == before
    assert await pool.resolve_run("r1", V) == {"instance_id": None, "started_at": None}
    # Another instance may still take the run, and a new version starts over.
    assert await pool.map_run("r1", "i2", V) == {"mapped": True}
    assert await pool.block_run("r1", "i1", V) == {"blocked": True, "started": False}
    assert await pool.map_run("r1", "i1", "v2") == {"mapped": True}


async def test_block_after_start_reports_started(pool: WarmPool, db: Database, clock: ManualClock) -> None:
    t = now(clock)
    assert await pool.map_run("r1", "i1", V, started=True) == {"mapped": True}
    before = await mapping(db, "r1")
    assert await pool.block_run("r1", "i1", V) == {"blocked": False, "started": True}
    assert await mapping(db, "r1") == before
    assert await pool.resolve_run("r1", V) == {"instance_id": "i1", "started_at": t}


async def test_map_keeps_first_start_claimed_at_and_created_at(
    pool: WarmPool, db: Database, clock: ManualClock
) -> None:
    t0 = now(clock)
    await pool.map_run("r1", "i1", V)
    clock.advance(1000)
    await pool.map_run("r1", "i1", V, started=True)
    clock.advance(1000)
    await pool.map_run("r1", "i1", V, started=True)
    await pool.map_run("r1", "i1", V)  # not asked, but already started on this instance
    m = await mapping(db, "r1")
    assert m is not None
    assert (m["state"], m["started_at"], m["claimed_at"], m["created_at"]) == ("started", t0 + 1000, t0, t0)
    assert (m["expires_at"], m["pool"]) == (t0 + 2000 + 60 * MIN, "default")
    await pool.map_run("r1", "i1", "v2", pool="p2")
    m = await mapping(db, "r1")
    assert m is not None and (m["state"], m["created_at"], m["pool"]) == ("claimed", t0 + 2000, "p2")


async def test_resolve(pool: WarmPool, db: Database, clock: ManualClock) -> None:
    assert await pool.resolve_run("nobody", V) == {"instance_id": None, "started_at": None}
    await pool.map_run("r1", "i1", V)
    assert await pool.resolve_run("r1", V) == {"instance_id": "i1", "started_at": None}
    assert await pool.resolve_run("r1", "v2") == {"instance_id": None, "started_at": None}
    assert await mapping(db, "r1") is None  # another version: deleted
    await pool.map_run("r2", "i2", V)
    clock.advance(60 * MIN - 1)
    assert (await pool.resolve_run("r2", V))["instance_id"] == "i2"
    clock.advance(1)
    assert await pool.resolve_run("r2", V) == {"instance_id": None, "started_at": None}
    assert await mapping(db, "r2") is None


async def test_an_instance_serves_one_live_run_at_a_time(
    pool: WarmPool, db: Database, clock: ManualClock
) -> None:
    await pool.map_run("r1", "i1", V)
    before = await rows(db, "run_mappings")
    for attempt in (
        lambda: pool.map_run("r2", "i1", V),
        lambda: pool.map_run("r2", "i1", "v2", started=True),
    ):
        with pytest.raises(InstanceMapped, match="'i1'"):
            await attempt()
    assert await rows(db, "run_mappings") == before
    # The same run again, and other instances, are fine; a blocked run holds no instance.
    assert await pool.map_run("r1", "i1", V, started=True) == {"mapped": True}
    assert await pool.map_run("r2", "i2", V) == {"mapped": True}
    await pool.block_run("r3", "i3", V)
    assert await pool.map_run("r4", "i3", V) == {"mapped": True}
    # An ended run frees its instance at once; an expired mapping frees it too.
    runlog = RunLog(db)
    await runlog.open_run("r1")
    await runlog.set_terminal("r1", "completed")
    assert await pool.map_run("r5", "i1", V) == {"mapped": True}
    clock.advance(60 * MIN)
    assert await pool.map_run("r6", "i2", V) == {"mapped": True}


async def test_an_instance_waiting_in_any_pool_is_not_mapped_until_a_claim_takes_it(
    pool: WarmPool, db: Database, clock: ManualClock
) -> None:
    await pool.add("default", V, ["ready"], ready=True)
    await pool.add("other", "v0", ["warming"], ttl_ms=MIN)
    before = (await rows(db, "pool_entries"), await rows(db, "run_mappings"))
    for instance in ("ready", "warming"):  # another pool, another version: the id is the instance
        for started in (False, True):
            with pytest.raises(InstanceMapped, match=f"'{instance}' is a live entry of a pool"):
                await pool.map_run("r1", instance, V, started=started)
    assert (await rows(db, "pool_entries"), await rows(db, "run_mappings")) == before
    # The claim hands it out; from then on it is the claiming run's alone.
    assert (await pool.claim("default", V, "r2"))["id"] == "ready"
    with pytest.raises(InstanceMapped, match="'ready' is mapped to another live run"):
        await pool.map_run("r1", "ready", V)
    assert await pool.map_run("r2", "ready", V, started=True) == {"mapped": True}
    # An expired entry holds nothing, to the millisecond.
    clock.advance(MIN - 1)
    with pytest.raises(InstanceMapped):
        await pool.map_run("r1", "warming", V)
    clock.advance(1)
    assert await pool.map_run("r1", "warming", V) == {"mapped": True}


async def test_adding_or_readying_an_instance_placed_elsewhere_is_refused_whole(
    pool: WarmPool, db: Database, clock: ManualClock
) -> None:
    await pool.map_run("r1", "busy", V)
    await pool.add("default", V, ["mine"])
    await pool.add("other", V, ["theirs"], ttl_ms=MIN)
    before = (await rows(db, "pool_entries"), await rows(db, "run_mappings"))
    refused: list[tuple[Callable[[], Awaitable[object]], str]] = [
        (lambda: pool.add("default", V, ["new", "busy"]), "'busy' is mapped to a live run"),
        (lambda: pool.add("other", "v2", ["busy"], ready=True), "'busy' is mapped to a live run"),
        (lambda: pool.promote("default", V, ["mine", "busy"]), "'busy' is mapped to a live run"),
        (lambda: pool.ready("default", V, "busy"), "'busy' is mapped to a live run"),
        (lambda: pool.add("default", V, ["mine", "theirs"]), "'theirs' is a live entry of another pool"),
    ]
    for attempt, message in refused:
        with pytest.raises(InstanceMapped, match=message):
            await attempt()
    # Nothing written, not even the garbage collection of the refused add of v2 to "other".
    assert (await rows(db, "pool_entries"), await rows(db, "run_mappings")) == before
    # Its own pool may refresh it; once the entry expires another pool may have it.
    assert await pool.add("other", V, ["theirs"], ttl_ms=MIN) == 1
    clock.advance(MIN)
    assert await pool.add("default", V, ["theirs"]) == 1
    # The run ending frees its instance for the pool at once.
    runlog = RunLog(db)
    await runlog.open_run("r1")
    await runlog.set_terminal("r1", "failed", error="gone")
    assert await pool.add("default", V, ["busy"], ready=True) == 1


async def test_a_claim_never_hands_out_an_instance_another_live_run_holds(
    pool: WarmPool, db: Database, clock: ManualClock
) -> None:
    # Rows as a database written before maps and adds refused a second place can hold them.
    await pool.add("default", V, ["held", "ended"], ready=True)
    clock.advance(1)
    await pool.add("default", V, ["free"], ready=True)
    async with db.transaction() as conn:
        for run_id, instance in (("r-held", "held"), ("r-ended", "ended")):
            await conn.execute(
                "INSERT INTO ledger.run_mappings (run_id, pool, instance_id, state, version,"
                " claimed_at, created_at, expires_at) VALUES (%s, 'default', %s, 'claimed', %s,"
                " %s, %s, %s + interval '1 hour')",
                (run_id, instance, V, clock.current, clock.current, clock.current),
            )
    runlog = RunLog(db)
    await runlog.open_run("r-ended")
    await runlog.set_terminal("r-ended", "completed")
    # "free" is newest, then "ended" (its run is over), never "held".
    assert [(await pool.claim("default", V, f"c{n}"))["id"] for n in range(3)] == ["free", "ended", None]
    assert await ids(db) == ["held"]
    # The run holding it may claim it (its mapping is of another version here).
    async with db.transaction() as conn:
        await conn.execute("UPDATE ledger.run_mappings SET version = 'v0' WHERE run_id = 'r-held'")
    assert (await pool.claim("default", V, "r-held"))["id"] == "held"


async def test_expired_mappings_count_as_absent_for_map_and_block(
    pool: WarmPool, db: Database, clock: ManualClock
) -> None:
    await pool.block_run("r1", "i1", V)
    await pool.map_run("r2", "i2", V, started=True)
    clock.advance(60 * MIN)
    assert await pool.map_run("r1", "i1", V) == {"mapped": True}
    assert await pool.block_run("r2", "i2", V) == {"blocked": True, "started": False}
    m = await mapping(db, "r1")
    assert m is not None and (m["state"], m["created_at"]) == ("claimed", now(clock))


async def test_real_database_time_by_default(db: Database) -> None:
    pool = WarmPool(db)
    async with db.connection() as conn:
        before = await (await conn.execute("SELECT now() AS t")).fetchone()
    await pool.add("default", V, ["a"])
    async with db.connection() as conn:
        after = await (await conn.execute("SELECT now() AS t")).fetchone()
    assert before is not None and after is not None
    (entry,) = await pool.list("default", V)
    assert to_ms(before["t"]) <= entry["created_at"] <= to_ms(after["t"])  # type: ignore[operator]
    assert entry["expires_at"] - entry["created_at"] == 8 * MIN


# -- bad input --------------------------------------------------------------------------------------

Call = Callable[[WarmPool], Awaitable[Any]]

BAD: list[tuple[str, Call]] = [
    ("pool", lambda p: p.add("", V, ["a"])),
    ("pool", lambda p: p.count(None, V)),  # type: ignore[arg-type]
    ("pool", lambda p: p.clear("  ")),
    ("version", lambda p: p.add("default", " ", ["a"])),
    ("version", lambda p: p.claim("default", 7, "r1")),  # type: ignore[arg-type]
    ("version", lambda p: p.list("default", "")),
    ("version", lambda p: p.map_run("r1", "i1", "")),
    ("ids", lambda p: p.add("default", V, [])),
    ("ids", lambda p: p.promote("default", V, "a")),
    ("ids[1]", lambda p: p.delete("default", V, ["a", 3])),  # type: ignore[list-item]
    ("ids[0]", lambda p: p.add("default", V, [""])),
    ("ttl_ms", lambda p: p.add("default", V, ["a"], ttl_ms=-1)),
    ("ttl_ms", lambda p: p.add("default", V, ["a"], ttl_ms="5")),  # type: ignore[arg-type]
    ("ready", lambda p: p.add("default", V, ["a"], ready="yes")),  # type: ignore[arg-type]
    ("ready_at", lambda p: p.add("default", V, ["a"], ready_at_ms=-5)),
    ("ready_at", lambda p: p.add("default", V, ["a"], ready=False, ready_at_ms=5)),
    ("min_ready_age_ms", lambda p: p.claim("default", V, "r1", min_ready_age_ms=-1)),
    ("min_ready_age_ms", lambda p: p.count("default", V, min_ready_age_ms=float("nan"))),
    ("run_id", lambda p: p.claim("default", V, "")),
    ("run_id", lambda p: p.block_run("", "i1", V)),
    ("run_id", lambda p: p.resolve_run(None, V)),  # type: ignore[arg-type]
    ("instance_id", lambda p: p.map_run("r1", "", V)),
    ("started", lambda p: p.map_run("r1", "i1", V, started="yes")),  # type: ignore[arg-type]
    ("pool", lambda p: p.map_run("r1", "i1", V, pool="")),
    ("id", lambda p: p.ready("default", V, "")),
]


@pytest.mark.parametrize(("field", "call"), BAD)
async def test_bad_input_is_refused_whole(
    field: str, call: Call, pool: WarmPool, db: Database, clock: ManualClock
) -> None:
    # Garbage and an expired mapping lie around: a call that got as far as GC would remove them.
    await pool.add("default", "v0", ["old"], ttl_ms=MIN)
    await pool.map_run("r1", "i1", "v0")
    clock.advance(60 * MIN)
    before = (await rows(db, "pool_entries"), await rows(db, "run_mappings"))
    with pytest.raises(InvalidInput) as caught:
        await call(pool)
    assert caught.value.field == field
    assert (await rows(db, "pool_entries"), await rows(db, "run_mappings")) == before
