"""Model-based test: random operation sequences and clock moves give the same answers and the same
stored state on Postgres as on the reference model (tests/integration/pool/model.py).

Claims collect garbage on a cadence; the test runs with claims collecting every time, once a
minute of the test clock, and only the first time, so both a claim that collects and one that
leaves garbage in place (which must stay invisible) meet every other operation.

After every step the instance invariants of the fault suite hold at the test clock's time: no
instance serves two live runs, none serving one is a live pool entry, none is in two pools."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg.rows import dict_row

from ledger.clock import ManualClock, to_ms
from ledger.db import Database
from ledger.errors import InstanceMapped, InvalidInput
from ledger.pool.store import GcCadence, WarmPool
from tests.conftest import delete_all_rows
from tests.faults.invariants import instance_problems
from tests.integration.pool.model import ModelConflict, ModelInvalid, PoolModel

# Skewed towards one pool and one version so that operations meet each other's entries.
POOLS = st.sampled_from(["default"] * 6 + ["p2"])
VERSIONS = st.sampled_from(["v1"] * 9 + ["v2"])
IDS = st.sampled_from(["a", "b", "c", "d"])
RUNS = st.sampled_from(["r1", "r2", "r3"])
# Claims also use fresh runs, so that they take entries rather than answer from a mapping.
CLAIM_RUNS = st.sampled_from(["r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8"])
ID_LISTS = st.lists(IDS, min_size=1, max_size=4)
MIN_AGES = st.sampled_from([None, None, None, 0, 1, 1_000, 60_000, 420_000, 10**9, -1])
# Moves that land on and next to the limits: stale at 7 min, TTL 8 min, mappings 60 min.
MOVES = st.sampled_from(
    [1, 1, 999, 1_000, 1_000, 30_000, 60_000, 60_000, 419_999, 420_000, 480_000, 3_600_000]
)

Op = tuple[Any, ...]

ADD = st.tuples(
    st.just("add"),
    POOLS,
    VERSIONS,
    ID_LISTS,
    st.sampled_from([None, None, 0, 1, 60_000, 480_000, 10**9, -5]),
    st.sampled_from([None, True, True, False]),
    # ready_at as an offset back from now, resolved when the op runs.
    st.sampled_from([None, None, None, 0, 1_000, 60_000, 420_000, 420_001]),
)
CLAIM = st.tuples(st.just("claim"), POOLS, VERSIONS, CLAIM_RUNS, MIN_AGES)
ADVANCE = st.tuples(st.just("advance"), MOVES)
MAP = st.tuples(st.just("map_run"), RUNS, IDS, VERSIONS, st.booleans())
BLOCK = st.tuples(st.just("block_run"), RUNS, IDS, VERSIONS)

ARGS: dict[str, st.SearchStrategy[Op]] = {
    "add": ADD,
    "claim": CLAIM,
    "advance": ADVANCE,
    "map_run": MAP,
    "block_run": BLOCK,
    "count": st.tuples(st.just("count"), POOLS, VERSIONS, MIN_AGES),
    "list": st.tuples(st.just("list"), POOLS, VERSIONS),
    "promote": st.tuples(st.just("promote"), POOLS, VERSIONS, ID_LISTS),
    "ready": st.tuples(st.just("ready"), POOLS, VERSIONS, IDS),
    "delete": st.tuples(st.just("delete"), POOLS, VERSIONS, ID_LISTS),
    "resolve_run": st.tuples(st.just("resolve_run"), RUNS, VERSIONS),
    "clear": st.tuples(st.just("clear"), st.sampled_from(["p2", "p2", "default"])),
}
# Repeats weight the choice: builders and claims often, the wiping `clear` rarely.
KINDS = (
    ["add"] * 6
    + ["claim"] * 6
    + ["advance"] * 4
    + ["map_run", "block_run"] * 2
    + ["count", "list", "promote", "ready", "delete", "resolve_run", "clear"]
)


@st.composite
def _op(draw: st.DrawFn) -> Op:
    return draw(ARGS[draw(st.sampled_from(KINDS))])


OPS = _op()
OP_LISTS = st.lists(OPS, min_size=10, max_size=40)

# Edges that random sequences reach only rarely, always run first.
EDGES_STARTED: list[Op] = [
    ("map_run", "r1", "a", "v1", False),
    ("advance", 1_000),
    ("map_run", "r1", "a", "v1", True),
    ("advance", 1_000),
    ("map_run", "r1", "a", "v1", True),
    ("block_run", "r1", "a", "v1"),
    ("resolve_run", "r1", "v1"),
    ("block_run", "r2", "b", "v1"),
    ("map_run", "r2", "b", "v1", True),
    ("claim", "default", "v1", "r2", None),
    ("advance", 3_600_000),
    ("resolve_run", "r1", "v1"),
]
EDGES_STALE: list[Op] = [
    ("add", "default", "v1", ["a", "b"], None, True, None),
    ("add", "default", "v1", ["c"], 60_000, None, None),
    ("advance", 60_000),
    ("count", "default", "v1", None),
    ("add", "default", "v1", ["b"], None, None, None),
    ("advance", 360_000),
    ("count", "default", "v1", None),
    ("advance", 1),
    ("list", "default", "v1"),
    ("claim", "default", "v1", "r1", None),
]
# A claim that does not collect leaves an expired entry in place: not claimed, not counted, and
# deleted by the next claim that collects.
EDGES_AMORTIZED: list[Op] = [
    ("add", "default", "v1", ["a", "b"], 30_000, True, None),
    ("claim", "default", "v1", "r1", None),
    ("add", "default", "v1", ["c"], None, True, None),
    ("advance", 30_000),
    ("claim", "default", "v1", "r2", None),
    ("claim", "default", "v1", "r3", None),
    ("advance", 30_000),
    ("claim", "default", "v1", "r4", None),
    ("advance", 420_000),
    ("claim", "default", "v1", "r5", None),
]
# One instance, one place, whatever the order: a map of an instance waiting in a pool (any pool,
# warming or of another version too) is refused and the claim then hands it out; once claimed, a
# map to another run, an add to any pool, a promote or a ready of it are refused; once its entry
# expires or its mapping does, it is free again.
EDGES_ONE_PLACE: list[Op] = [
    ("add", "default", "v1", ["a", "b"], None, True, None),
    ("add", "p2", "v2", ["c"], None, None, None),
    ("map_run", "r1", "a", "v1", True),
    ("map_run", "r1", "c", "v1", False),
    ("add", "p2", "v1", ["a"], None, True, None),
    ("claim", "default", "v1", "r2", None),
    ("map_run", "r1", "a", "v1", True),
    ("map_run", "r2", "a", "v1", True),
    ("add", "default", "v1", ["a"], None, True, None),
    ("add", "p2", "v2", ["c", "a"], None, None, None),
    ("promote", "default", "v1", ["b", "a"]),
    ("ready", "p2", "v2", "a"),
    ("map_run", "r3", "d", "v1", False),
    ("add", "default", "v1", ["d"], None, True, None),
    ("claim", "default", "v1", "r4", None),
    ("advance", 480_000),
    ("map_run", "r1", "c", "v1", False),
    ("add", "p2", "v1", ["b"], None, True, None),
    ("advance", 3_600_000),
    ("add", "default", "v1", ["a"], None, True, None),
    ("claim", "default", "v1", "r5", None),
]
EDGES_TIES: list[Op] = [
    ("add", "default", "v1", ["d", "b", "c"], None, True, None),
    ("add", "p2", "v1", ["a"], None, True, None),
    ("advance", 1_000),
    ("promote", "default", "v1", ["c"]),
    ("claim", "default", "v1", "r1", 1_000),
    ("claim", "default", "v1", "r2", None),
    ("claim", "default", "v1", "r3", None),
    ("add", "default", "v2", ["a"], None, True, None),
    ("list", "p2", "v1"),
]

SNAPSHOT_ENTRIES = (
    "SELECT pool, id, version, state, created_at, ready_at, expires_at FROM ledger.pool_entries"
)
SNAPSHOT_MAPPINGS = (
    "SELECT run_id, pool, instance_id, state, blocked_instance_id, version, claimed_at, started_at,"
    " created_at, expires_at FROM ledger.run_mappings"
)


def _ms_row(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(to_ms(v) if hasattr(v, "tzinfo") else v for v in row.values())


async def _snapshot(db: Database) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    async with db.connection() as conn:
        entries = await (await conn.execute(SNAPSHOT_ENTRIES)).fetchall()
        mappings = await (await conn.execute(SNAPSHOT_MAPPINGS)).fetchall()
    return sorted(_ms_row(r) for r in entries), sorted(_ms_row(r) for r in mappings)


async def _run(
    db: Database,
    url: str,
    checker: psycopg.Connection[dict[str, Any]],
    ops: list[Op],
    claim_gc_interval: float,
) -> None:
    delete_all_rows(url)
    # Far in the future: a service's watchdog sharing this database (the acceptance suite's, in the
    # same worker) sweeps mappings expired by the real clock, and must find none of these.
    clock = ManualClock(datetime(2100, 1, 1, tzinfo=UTC))
    # The cadence follows the test clock, in milliseconds, as the model's does.
    cadence = GcCadence(claim_gc_interval, ticker=lambda: to_ms(clock.current))
    pool = WarmPool(db, clock=clock, cadence=cadence)
    model = PoolModel(now=to_ms(clock.current) or 0, claim_gc_interval=claim_gc_interval)
    for step, op in enumerate(ops):
        name, args = op[0], list(op[1:])
        if name == "advance":
            clock.advance(args[0])
            model.now += args[0]
            continue
        if name == "add" and args[5] is not None:
            args[5] = model.now - args[5]
        try:
            expected: Any = getattr(model, name)(*args)
        except ModelInvalid as exc:
            expected = ("invalid", str(exc))
        except ModelConflict as exc:
            expected = ("conflict", str(exc))
        try:
            actual: Any = await getattr(pool, name)(*args)
        except InvalidInput as exc:
            actual = ("invalid", exc.field)
        except InstanceMapped:
            actual = ("conflict", "instance_mapped")
        assert actual == expected, f"step {step}: {op}"
        assert await _snapshot(db) == model.snapshot(), f"state after step {step}: {op}"
        assert instance_problems(checker, clock.current) == [], f"after step {step}: {op}"


@pytest.mark.parametrize("claim_gc_interval", [0, 60_000, math.inf], ids=["every", "minute", "first"])
def test_postgres_matches_the_model(database_url: str, claim_gc_interval: float) -> None:
    with (
        asyncio.Runner() as runner,
        psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as checker,
    ):
        db = Database(database_url, min_size=1, max_size=2)
        runner.run(db.open())
        try:

            @settings(
                max_examples=40,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            )
            @given(ops=OP_LISTS)
            @example(ops=EDGES_STARTED)
            @example(ops=EDGES_STALE)
            @example(ops=EDGES_TIES)
            @example(ops=EDGES_AMORTIZED)
            @example(ops=EDGES_ONE_PLACE)
            def check(ops: list[Op]) -> None:
                runner.run(_run(db, database_url, checker, ops, claim_gc_interval))

            check()
        finally:
            runner.run(db.close())
