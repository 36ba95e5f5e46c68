"""The warm pool and run mappings on Postgres: `WarmPool`.

Design note. Each operation is one transaction that reads and locks what its decision reads, asks
`ledger.pool.rules` what to do, and writes the answer. The locks:

- A claim takes its entry with `FOR UPDATE SKIP LOCKED … LIMIT 1`, so concurrent claimers never
  wait on, nor take, the same entry; the GC skips locked rows too (whoever holds one is about to
  delete or rewrite it), and readers filter garbage themselves.
- A run's mapping may not exist yet, and `FOR UPDATE` cannot lock a missing row, so every mapping
  operation (claim, map, block, resolve) first takes a transaction advisory lock on the run id: the
  map-versus-block race and concurrent claims for one run are serialised per run, nothing else.
- Writers of named entries (add, promote, ready, delete, clear) take an advisory lock on the pool,
  then `FOR UPDATE` the rows they rewrite: adds of one id cannot interleave, and claims (which never
  take that lock) only ever skip those rows.
- An instance is in one place at a time (`rules.holds_instance`, `rules.serves_live_run`): a map,
  and an add, promote or ready, take an advisory lock on each instance id (in the order of the lock
  keys, so overlapping sets never wait in a cycle) before they look at where the instance is, so a
  map and an add of one instance see each other's commit. An add or ready checks after it has
  locked the pool's rows: a claim deleting one of them has committed its mapping by then. Locks
  are always taken run or pool first, then instances, then rows; a claim takes no instance lock
  and waits on nothing after its run's, so none of them can wait in a cycle.

The claim is the hot path, so it is one statement in autocommit, one round trip: the function
`ledger.pool_claim_v2` (`ledger/sql/pool_claim_v2.sql`) locks the run, answers from its mapping or
takes and maps an entry whose instance serves no other live run, and counts. It,
`ledger.pool_counts` and `ledger.pool_collect_v2` are `rules.existing_claim`, `rules.choose_claim`,
`rules.claimed`, `rules.count` and the GC of `rules.is_garbage` written in SQL over the limits of
`PoolSettings` (`rules.claim_window`, `rules.gc_bounds`), which the store always passes: by default
they are the numbers of `ledger.pool_windows()`; the model-based tests hold the two together. Claims
collect garbage only when `GcCadence` says so (see `ledger.pool.cadence` for why); every other
operation naming a version still collects first. Counting reads per-version tallies that triggers
keep (`ledger.pool_tallies`), less the garbage and too-young entries it scans, so a claim costs the
same in a pool of a hundred or of a hundred thousand entries.

Time comes from `clock` (the transaction's `now()` unless a test injects one). The public surface
speaks epoch milliseconds; datetimes are used inside.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ledger import shapes, validate
from ledger.clock import Clock, DatabaseClock, to_ms
from ledger.db import Conn, Database, Row
from ledger.errors import InstanceMapped, RunTerminal
from ledger.pool import rules
from ledger.pool.cadence import GcCadence
from ledger.pool.rules import PoolEntry, PoolSettings, RunMapping
from ledger.runlog.store import terminal_from_row

__all__ = [
    "LOCK",
    "SELECT_PLACED",
    "GcCadence",
    "PoolSettings",
    "WarmPool",
    "instance_key",
    "sweep_expired_mappings",
]

_ENTRY_COLUMNS = "id, version, state, created_at, ready_at, expires_at"
_MAPPING_COLUMNS = (
    "run_id, pool, instance_id, state, blocked_instance_id, version, "
    "claimed_at, started_at, created_at, expires_at"
)

LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))"

# Many keys, in the order of the locks themselves (not of the ids): two transactions locking
# overlapping sets take the shared ones in the same order, so neither holds one the other waits on.
_LOCK_MANY = """
SELECT pg_advisory_xact_lock(k) FROM (
    SELECT DISTINCT hashtextextended(key, 0) AS k FROM unnest(%(keys)s::text[]) AS key ORDER BY k
) AS ordered
"""

# Garbage of an operation naming a version (see rules.is_garbage); rows locked by others are theirs.
_COLLECT = (
    "SELECT ledger.pool_collect_v2(%(pool)s, %(version)s, %(now)s::timestamptz, %(ready_max_age_ms)s::bigint)"
)

# rules.count over the live entries of a version: garbage (expired, stale) left out, and available
# exactly within the claim window; readers cannot rely on GC, which skips rows others hold (and
# which a claim runs only now and then).
_COUNTS = """
SELECT available, warming FROM ledger.pool_counts(
    %(pool)s, %(version)s, %(now)s::timestamptz, %(oldest)s::timestamptz, %(newest)s::timestamptz)
"""

# The whole claim; `now` NULL is the statement's own `now()` (the default database clock), so
# reading the time costs no round trip of its own. A run that has ended takes nothing: its row is
# read first, locked as an end locks it (an end in progress is waited for, then seen), and the claim
# function runs only when the run is unknown or live (it is a lateral subquery on the run's row, and
# its `OFFSET 0` keeps it a subplan of its own, whose condition on that row is checked once, before
# the function is called). The answer holds the run's terminal columns when it had ended, and no
# claim. The run is read in a lateral subquery rather than a `FOR SHARE` CTE: measured on the
# database server, the CTE form cost about one and a half times the server time per claim.
_CLAIM = """
SELECT run.*, c.claimed, c.available, c.warming
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT terminal_status, terminal_result, terminal_error, terminal_total_rows,
           terminal_duration_ms, terminal_play_name, completed_at
    FROM ledger.runs WHERE run_id = %(run_id)s FOR SHARE
) AS run ON true
LEFT JOIN LATERAL (
    SELECT claimed, available, warming FROM ledger.pool_claim_v2(
        %(pool)s, %(version)s, %(run_id)s, %(run_lock)s, %(collect)s::boolean, %(now)s::timestamptz,
        %(min_age_ms)s::bigint, %(ready_max_age_ms)s::bigint, %(mapping_ttl_ms)s::bigint)
    WHERE run.terminal_status IS NULL
    OFFSET 0
) AS c ON true
"""

_SELECT_VERSION_ENTRIES = f"""
SELECT {_ENTRY_COLUMNS} FROM ledger.pool_entries
WHERE pool = %(pool)s AND version = %(version)s
ORDER BY id
"""

_LOCK_ENTRIES = f"""
SELECT {_ENTRY_COLUMNS} FROM ledger.pool_entries
WHERE pool = %(pool)s AND id = ANY(%(ids)s)
ORDER BY id
FOR UPDATE
"""

# All of an operation's entries in one statement (ids are distinct): one round trip, and the
# tally triggers run once for the batch instead of once per entry.
_UPSERT_ENTRIES = """
INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)
SELECT %(pool)s, e.* FROM unnest(
    %(id)s::text[], %(version)s::text[], %(state)s::text[], %(created_at)s::timestamptz[],
    %(ready_at)s::timestamptz[], %(expires_at)s::timestamptz[]
) AS e
ON CONFLICT (pool, id) DO UPDATE SET
    version = EXCLUDED.version, state = EXCLUDED.state, created_at = EXCLUDED.created_at,
    ready_at = EXCLUDED.ready_at, expires_at = EXCLUDED.expires_at
"""

_DELETE_ENTRIES = "DELETE FROM ledger.pool_entries WHERE pool = %(pool)s AND id = ANY(%(ids)s)"

_CLEAR_POOL = "DELETE FROM ledger.pool_entries WHERE pool = %(pool)s"

_SELECT_MAPPING = f"SELECT {_MAPPING_COLUMNS} FROM ledger.run_mappings WHERE run_id = %(run_id)s FOR UPDATE"

_UPSERT_MAPPING = f"""
INSERT INTO ledger.run_mappings ({_MAPPING_COLUMNS})
VALUES (%(run_id)s, %(pool)s, %(instance_id)s, %(state)s, %(blocked_instance_id)s, %(version)s,
        %(claimed_at)s, %(started_at)s, %(created_at)s, %(expires_at)s)
ON CONFLICT (run_id) DO UPDATE SET
    pool = EXCLUDED.pool, instance_id = EXCLUDED.instance_id, state = EXCLUDED.state,
    blocked_instance_id = EXCLUDED.blocked_instance_id, version = EXCLUDED.version,
    claimed_at = EXCLUDED.claimed_at, started_at = EXCLUDED.started_at,
    created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
"""

_DELETE_MAPPING = "DELETE FROM ledger.run_mappings WHERE run_id = %(run_id)s"

# Where the instances already are, other than where the operation would put them: a live entry
# (rules.holds_instance) of a pool other than `pool` (NULL: of any pool), and a live run
# (rules.serves_live_run, the view `ledger.instance_runs`) other than `run_id` (NULL: any run).
# At most one row of each kind is enough to refuse.
SELECT_PLACED = """
(SELECT id AS instance_id, pool FROM ledger.pool_entries
 WHERE id = ANY(%(ids)s) AND expires_at > %(now)s AND (%(pool)s::text IS NULL OR pool <> %(pool)s)
 ORDER BY id, pool LIMIT 1)
UNION ALL
(SELECT instance_id, NULL FROM ledger.instance_runs
 WHERE instance_id = ANY(%(ids)s) AND expires_at > %(now)s
   AND (%(run_id)s::text IS NULL OR run_id <> %(run_id)s)
 ORDER BY instance_id LIMIT 1)
"""

# Expired mappings count as absent everywhere (rules.live); this only reclaims their rows. A mapping
# another transaction holds is skipped: whoever holds it rewrites or deletes it itself.
_SWEEP_EXPIRED_MAPPINGS = """
DELETE FROM ledger.run_mappings
WHERE run_id IN (
    SELECT run_id FROM ledger.run_mappings
    WHERE expires_at <= %(now)s
    ORDER BY expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
"""


async def sweep_expired_mappings(conn: Conn, now: datetime, *, limit: int) -> int:
    """Delete up to `limit` run mappings expired at `now`, skipping locked ones; how many."""
    cur = await conn.execute(_SWEEP_EXPIRED_MAPPINGS, {"now": now, "limit": limit})
    return max(cur.rowcount, 0)


# `WarmPool.list` shadows the builtin inside the class body.
_Entries = list[PoolEntry]
_Ids = list[str]


def _pool_key(pool: str) -> str:
    return f"ledger.pool_entries:{pool}"


def _run_key(run_id: str) -> str:
    return f"ledger.run_mappings:{run_id}"


def instance_key(instance_id: str) -> str:
    """The advisory lock key an add and a mapping of one instance both take (`LOCK`): whoever
    holds it may write that instance's entry or mapping, so a test that stands in for one holds it."""
    return f"ledger.run_mappings.instance:{instance_id}"


def _entry(row: Row) -> PoolEntry:
    return PoolEntry(
        id=row["id"],
        version=row["version"],
        state=row["state"],
        created_at=row["created_at"],
        ready_at=row["ready_at"],
        expires_at=row["expires_at"],
    )


def _entries_params(pool: str, entries: _Entries) -> dict[str, Any]:
    columns = ("id", "version", "state", "created_at", "ready_at", "expires_at")
    return {"pool": pool, **{c: [getattr(e, c) for e in entries] for c in columns}}


def _mapping(row: Row) -> RunMapping:
    return RunMapping(**row)


def _entry_out(entry: PoolEntry) -> shapes.PoolEntryBody:
    return {
        "id": entry.id,
        "version": entry.version,
        "state": entry.state,
        "created_at": to_ms(entry.created_at),
        "ready_at": to_ms(entry.ready_at),
        "expires_at": to_ms(entry.expires_at),
    }


def _counts_out(counts: rules.Counts) -> shapes.PoolCountsBody:
    return {"available": counts.available, "warming": counts.warming}


def _ms(value: timedelta) -> int:
    return value // timedelta(milliseconds=1)


class WarmPool:
    """Warm pool entries and run mappings; every method is one atomic transaction.

    Arguments are validated first (`ledger.errors.InvalidInput` naming the field; nothing is
    written). Times in and out are epoch milliseconds.
    """

    def __init__(
        self,
        db: Database,
        *,
        clock: Clock | None = None,
        settings: PoolSettings | None = None,
        cadence: GcCadence | None = None,
    ) -> None:
        self.db = db
        self.clock: Clock = clock or DatabaseClock()
        self.settings = settings or PoolSettings()
        self.cadence = cadence or GcCadence()

    # -- pool entries --------------------------------------------------------------------------

    async def add(
        self,
        pool: str,
        version: str,
        ids: Sequence[str],
        ttl_ms: float | None = None,
        ready: bool | None = None,
        ready_at_ms: float | None = None,
    ) -> int:
        """Add (or refresh) entries; returns how many distinct ids were written. `InstanceMapped`
        (nothing written) when one of them serves a live run or is a live entry of another pool."""
        pool, version, ids = rules.check_pool(pool), rules.check_version(version), rules.check_ids(ids)
        lifetime = rules.ttl(ttl_ms, self.settings)
        readiness = rules.ready_request(ready, ready_at_ms)
        async with self.db.transaction() as conn:
            now = await self.clock.now(conn)
            ready_at = readiness.ready_at(now)
            await conn.execute(LOCK, {"key": _pool_key(pool)})
            await self._gc(conn, pool, version, now)
            await self._lock_instances(conn, ids)
            existing = {e.id: e for e in await self._lock_entries(conn, pool, ids)}
            await self._refuse_placed(conn, ids, now, pool=pool)
            writes = [
                rules.added(existing.get(entry_id), entry_id, version, now, lifetime, ready_at)
                for entry_id in ids
            ]
            await self._write_entries(conn, pool, writes)
        return len(writes)

    async def claim(
        self, pool: str, version: str, run_id: str, min_ready_age_ms: float | None = None
    ) -> shapes.ClaimResult:
        """Take the newest available entry for `run_id` (idempotent per run); `{id, available, warming}`
        with the counts as they are after the claim. A run that has ended is `RunTerminal`, and
        takes nothing."""
        pool, version = rules.check_pool(pool), rules.check_version(version)
        run_id = validate.run_id("run_id", run_id)
        min_age = rules.min_ready_age(min_ready_age_ms, self.settings)
        params = {
            "pool": pool,
            "version": version,
            "run_id": run_id,
            "run_lock": _run_key(run_id),
            "min_age_ms": _ms(min_age),
            "ready_max_age_ms": self.settings.ready_max_age_ms,
            "mapping_ttl_ms": self.settings.mapping_ttl_ms,
            "collect": self.cadence.due(pool, version),
        }
        async with self.db.autocommit() as conn:
            # The database clock is the statement's own now(); another clock is asked first.
            now = None if isinstance(self.clock, DatabaseClock) else await self.clock.now(conn)
            row = await (await conn.execute(_CLAIM, {**params, "now": now})).fetchone()
        assert row is not None
        terminal = terminal_from_row(row)
        if terminal is not None:
            raise RunTerminal(
                f"run {run_id!r} already ended {terminal['status']}: a claim for it takes no instance",
                run_id,
                dict(terminal),
            )
        return {"id": row["claimed"], "available": row["available"], "warming": row["warming"]}

    async def count(
        self, pool: str, version: str, min_ready_age_ms: float | None = None
    ) -> shapes.PoolCountsBody:
        """`{available, warming}` of `version` in `pool` (after GC)."""
        pool, version = rules.check_pool(pool), rules.check_version(version)
        min_age = rules.min_ready_age(min_ready_age_ms, self.settings)
        async with self.db.transaction() as conn:
            now = await self.clock.now(conn)
            await self._gc(conn, pool, version, now)
            counts = await self._count(conn, pool, version, now, min_age)
        return _counts_out(counts)

    async def list(self, pool: str, version: str) -> list[shapes.PoolEntryBody]:
        """The live entries of `version` in `pool` (after GC), by id."""
        pool, version = rules.check_pool(pool), rules.check_version(version)
        async with self.db.transaction() as conn:
            now = await self.clock.now(conn)
            await self._gc(conn, pool, version, now)
            entries = await self._version_entries(conn, pool, version)
        return [_entry_out(e) for e in entries if not rules.is_garbage(e, version, now, self.settings)]

    async def promote(self, pool: str, version: str, ids: Sequence[str]) -> int:
        """Mark live entries of `version` ready as of now; returns how many were promoted.
        `InstanceMapped` (nothing written) when one of them serves a live run."""
        return await self._rewrite(pool, version, ids, rules.promoted)

    async def ready(self, pool: str, version: str, id: str) -> bool:
        """Mark one entry ready, keeping an earlier `ready_at`; False if absent, expired or of another
        version. `InstanceMapped` when the instance serves a live run."""
        entry_id = rules.check_id("id", id)
        return await self._rewrite(pool, version, [entry_id], rules.marked_ready) == 1

    async def delete(self, pool: str, version: str, ids: Sequence[str]) -> int:
        """Delete live entries of `version`; returns how many were deleted."""
        pool, version, ids = rules.check_pool(pool), rules.check_version(version), rules.check_ids(ids)
        async with self.db.transaction() as conn:
            now = await self.clock.now(conn)
            await conn.execute(LOCK, {"key": _pool_key(pool)})
            await self._gc(conn, pool, version, now)
            entries = await self._lock_entries(conn, pool, ids)
            await conn.execute(_DELETE_ENTRIES, {"pool": pool, "ids": [e.id for e in entries]})
        return len([e for e in entries if not rules.is_garbage(e, version, now, self.settings)])

    async def clear(self, pool: str) -> int:
        """Delete every entry of `pool`, whatever its version (run mappings stay)."""
        pool = rules.check_pool(pool)
        async with self.db.transaction() as conn:
            await conn.execute(LOCK, {"key": _pool_key(pool)})
            cur = await conn.execute(_CLEAR_POOL, {"pool": pool})
            return cur.rowcount

    # -- run mappings --------------------------------------------------------------------------

    async def map_run(
        self, run_id: str, instance_id: str, version: str, started: bool = False, pool: str | None = None
    ) -> shapes.MapResult:
        """Map `run_id` to `instance_id`; `{mapped: False}` if the run is blocked for that instance;
        `InstanceMapped` (nothing written) when the instance serves another live run or is a live
        entry of any pool (only a claim takes an instance out of a pool)."""
        run_id, instance_id = validate.run_id("run_id", run_id), rules.check_id("instance_id", instance_id)
        version = rules.check_version(version)
        flag = bool(rules.check_flag("started", started))
        pool_name = None if pool is None else rules.check_pool(pool)
        async with self.db.transaction() as conn:
            now = await self.clock.now(conn)
            await conn.execute(LOCK, {"key": _run_key(run_id)})
            mapping = rules.live(await self._lock_mapping(conn, run_id), now)
            write = rules.mapped(mapping, run_id, instance_id, version, flag, pool_name, now, self.settings)
            if write is not None:
                # Serialises maps of one instance to different runs (each holds only its run's
                # lock), and with adds and readies of it.
                await conn.execute(LOCK, {"key": instance_key(instance_id)})
                await self._refuse_placed(conn, [instance_id], now, run_id=run_id)
                await conn.execute(_UPSERT_MAPPING, write.__dict__)
        return {"mapped": write is not None}

    async def block_run(self, run_id: str, instance_id: str, version: str) -> shapes.BlockResult:
        """Block `instance_id` from serving `run_id`, unless the run already started on it."""
        run_id, instance_id = validate.run_id("run_id", run_id), rules.check_id("instance_id", instance_id)
        version = rules.check_version(version)
        async with self.db.transaction() as conn:
            now = await self.clock.now(conn)
            await conn.execute(LOCK, {"key": _run_key(run_id)})
            mapping = rules.live(await self._lock_mapping(conn, run_id), now)
            write = rules.blocked(mapping, run_id, instance_id, version, now, self.settings)
            if write is not None:
                await conn.execute(_UPSERT_MAPPING, write.__dict__)
        return {"blocked": write is not None, "started": write is None}

    async def resolve_run(self, run_id: str, version: str) -> shapes.ResolvedMapping:
        """`{instance_id, started_at}` of the run's live same-version mapping, else nones (an
        expired or other-version mapping is deleted)."""
        run_id, version = validate.run_id("run_id", run_id), rules.check_version(version)
        async with self.db.transaction() as conn:
            now = await self.clock.now(conn)
            await conn.execute(LOCK, {"key": _run_key(run_id)})
            found = rules.resolution(await self._lock_mapping(conn, run_id), version, now)
            if found.delete:
                await conn.execute(_DELETE_MAPPING, {"run_id": run_id})
        return {"instance_id": found.instance_id, "started_at": to_ms(found.started_at)}

    # -- steps -----------------------------------------------------------------------------------

    async def _rewrite(self, pool: str, version: str, ids: Sequence[str], change: rules.EntryChange) -> int:
        pool, version, ids = rules.check_pool(pool), rules.check_version(version), rules.check_ids(ids)
        async with self.db.transaction() as conn:
            now = await self.clock.now(conn)
            await conn.execute(LOCK, {"key": _pool_key(pool)})
            await self._gc(conn, pool, version, now)
            await self._lock_instances(conn, ids)
            entries = await self._lock_entries(conn, pool, ids)
            await self._refuse_placed(conn, ids, now, pool=pool)
            writes = [change(e, now) for e in entries if not rules.is_garbage(e, version, now, self.settings)]
            await self._write_entries(conn, pool, writes)
        return len(writes)

    async def _gc(self, conn: Conn, pool: str, version: str, now: datetime) -> None:
        params = {
            "pool": pool,
            "version": version,
            "now": now,
            "ready_max_age_ms": self.settings.ready_max_age_ms,
        }
        await conn.execute(_COLLECT, params)

    async def _count(
        self, conn: Conn, pool: str, version: str, now: datetime, min_age: timedelta
    ) -> rules.Counts:
        oldest, newest = rules.claim_window(now, min_age, self.settings)
        params = {"pool": pool, "version": version, "now": now, "oldest": oldest, "newest": newest}
        row = await (await conn.execute(_COUNTS, params)).fetchone()
        assert row is not None
        return rules.Counts(available=row["available"], warming=row["warming"])

    async def _version_entries(self, conn: Conn, pool: str, version: str) -> _Entries:
        cur = await conn.execute(_SELECT_VERSION_ENTRIES, {"pool": pool, "version": version})
        return [_entry(r) for r in await cur.fetchall()]

    async def _lock_instances(self, conn: Conn, ids: _Ids) -> None:
        await conn.execute(_LOCK_MANY, {"keys": [instance_key(i) for i in ids]})

    async def _refuse_placed(
        self, conn: Conn, ids: _Ids, now: datetime, *, pool: str | None = None, run_id: str | None = None
    ) -> None:
        """`InstanceMapped` if one of `ids` is a live entry of a pool other than `pool` (any, when
        None) or serves a live run other than `run_id` (any, when None); the caller holds their
        instance locks."""
        params = {"ids": ids, "now": now, "pool": pool, "run_id": run_id}
        rows = await (await conn.execute(SELECT_PLACED, params)).fetchall()
        serving = [r["instance_id"] for r in rows if r["pool"] is None]
        if serving:
            run = "another live run" if run_id is not None else "a live run"
            raise InstanceMapped(serving[0], f"is mapped to {run}")
        if rows:
            where = "a pool: only a claim hands it to a run" if pool is None else "another pool"
            raise InstanceMapped(rows[0]["instance_id"], f"is a live entry of {where}")

    async def _lock_entries(self, conn: Conn, pool: str, ids: _Ids) -> _Entries:
        cur = await conn.execute(_LOCK_ENTRIES, {"pool": pool, "ids": ids})
        return [_entry(r) for r in await cur.fetchall()]

    async def _write_entries(self, conn: Conn, pool: str, entries: _Entries) -> None:
        if entries:
            await conn.execute(_UPSERT_ENTRIES, _entries_params(pool, entries))

    async def _lock_mapping(self, conn: Conn, run_id: str) -> RunMapping | None:
        cur = await conn.execute(_SELECT_MAPPING, {"run_id": run_id})
        row = await cur.fetchone()
        return None if row is None else _mapping(row)
