"""The warm pool's and run mappings' rules, as pure functions: the executable specification of the pool.

Design note. Production runs SQL, not this module, wherever the database picks rows itself: the
claim, the collect and the counts are the functions of `ledger/sql/` (`pool_claim_v2`,
`pool_collect_v2`, `pool_counts`), and `ledger.pool.store` calls them. This module says what they
must do, in a form small enough to read and to test exhaustively: every decision is a function of
the rows read and of `now` (whether an entry is garbage, available or warming, which entry a claim
takes, what an add, promote, map or block writes). `tests/integration/pool/test_sql_rules.py`
holds the SQL functions to it, property by property, on random entries on and next to every limit
to the microsecond, and the model-based test (`test_model.py`, against the model in `model.py`)
runs whole operation sequences through the store; a change of rule is made here and in the SQL
together.

The store still runs the rest of it itself: it reads and locks rows, calls these functions and
writes what they return inside one transaction (add, promote, ready, map, block, resolve), and
builds the SQL's bounds from `claim_window` and `gc_bounds`.

The default windows (`PoolSettings`) are `ledger.sql.POOL_WINDOWS`, the one home of those numbers,
from which the file defining `ledger.pool_windows()` (what the views and the SQL functions read)
is rendered.

Validation lives here too: the library is the boundary for both the HTTP service and the CLI, so a
bad argument raises `InvalidInput` naming the field before anything is read or written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

from ledger import sql, validate
from ledger.clock import EPOCH, from_ms
from ledger.errors import InvalidInput

__all__ = [
    "Counts",
    "EntryChange",
    "ExistingClaim",
    "PoolEntry",
    "PoolSettings",
    "Resolution",
    "RunMapping",
    "added",
    "blocked",
    "check_flag",
    "check_id",
    "check_ids",
    "check_pool",
    "check_version",
    "choose_claim",
    "claim_order",
    "claim_window",
    "claimed",
    "count",
    "existing_claim",
    "gc_bounds",
    "holds_instance",
    "is_available",
    "is_expired",
    "is_garbage",
    "is_stale",
    "live",
    "mapped",
    "marked_ready",
    "min_ready_age",
    "promoted",
    "ready_request",
    "resolution",
    "serves_live_run",
    "ttl",
]

_EntryState = Literal["warming", "ready"]
_MappingState = Literal["claimed", "started", "blocked"]

_DEFAULT_POOL = "default"

_MICROSECOND = timedelta(microseconds=1)


# The defaults, from their one home (the SQL's `ledger.pool_windows()` is rendered from it).
_WINDOWS = sql.pool_windows()


@dataclass(frozen=True, kw_only=True)
class PoolSettings:
    """Time limits of the pool, in milliseconds; the defaults are `ledger.pool_windows()`'s: entries
    live 8 minutes (also the most a TTL may ask), an entry ready for more than 7 minutes is stale
    (its instance is presumed recycled), run mappings live an hour, and an entry counts as
    available as soon as it is ready unless a caller asks a minimum ready age."""

    default_ttl_ms: int = _WINDOWS["default_ttl_ms"]
    max_ttl_ms: int = _WINDOWS["max_ttl_ms"]
    ready_max_age_ms: int = _WINDOWS["ready_max_age_ms"]
    mapping_ttl_ms: int = _WINDOWS["mapping_ttl_ms"]
    min_ready_age_ms: int = _WINDOWS["min_ready_age_ms"]

    def __post_init__(self) -> None:
        for name in ("default_ttl_ms", "max_ttl_ms", "ready_max_age_ms", "mapping_ttl_ms"):
            value = getattr(self, name)
            if not validate.is_int(value) or value <= 0:
                raise InvalidInput(name, "must be a positive integer of milliseconds")
        if not validate.is_int(self.min_ready_age_ms) or self.min_ready_age_ms < 0:
            raise InvalidInput("min_ready_age_ms", "must be a non-negative integer of milliseconds")
        if self.default_ttl_ms > self.max_ttl_ms:
            raise InvalidInput("default_ttl_ms", "must not exceed max_ttl_ms")


@dataclass(frozen=True, kw_only=True)
class PoolEntry:
    id: str
    version: str
    state: _EntryState
    created_at: datetime
    ready_at: datetime | None
    expires_at: datetime


@dataclass(frozen=True, kw_only=True)
class RunMapping:
    run_id: str
    pool: str
    instance_id: str  # '' while blocked: a blocked run has no instance
    state: _MappingState
    blocked_instance_id: str | None
    version: str
    claimed_at: datetime | None
    started_at: datetime | None
    created_at: datetime
    expires_at: datetime


EntryChange = Callable[[PoolEntry, datetime], PoolEntry]


@dataclass(frozen=True)
class Counts:
    available: int
    warming: int


# -- validation ------------------------------------------------------------------------------------


def _text(field: str, value: object, *, trim: bool) -> str:
    checked = validate.required_text(field, value, non_empty=True)
    return checked.strip() if trim else checked


def check_pool(value: object) -> str:
    """A pool name: a non-empty string, trimmed like a version."""
    return _text("pool", value, trim=True)


def check_version(value: object) -> str:
    """A code version, trimmed (so `" v42 "` and `"v42"` are one version), non-empty."""
    return _text("version", value, trim=True)


def check_id(field: str, value: object) -> str:
    """An opaque id (instance, run): a non-blank string, kept as given."""
    return _text(field, value, trim=False)


def check_ids(value: object) -> list[str]:
    """A non-empty list of ids, de-duplicated in order (one entry per id)."""
    value = validate.items("ids", value, "strings")
    if not value:
        raise InvalidInput("ids", "must not be empty")
    ids = [check_id(f"ids[{i}]", item) for i, item in enumerate(value)]
    return list(dict.fromkeys(ids))


def _number(field: str, value: object) -> float:
    return validate.number(field, value, minimum=0)


def check_flag(field: str, value: object) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise InvalidInput(field, f"must be true or false, got {type(value).__name__}")
    return value


def ttl(ttl_ms: object, settings: PoolSettings) -> timedelta:
    """The entry lifetime: the default when absent or 0, else clamped to the maximum."""
    if ttl_ms is None:
        return timedelta(milliseconds=settings.default_ttl_ms)
    value = math.floor(_number("ttl_ms", ttl_ms))
    if value == 0:
        return timedelta(milliseconds=settings.default_ttl_ms)
    return timedelta(milliseconds=min(value, settings.max_ttl_ms))


def min_ready_age(min_ready_age_ms: object, settings: PoolSettings) -> timedelta:
    """How long an entry must have been ready to count as available (the settings' default when
    absent), clamped to [0, max TTL]."""
    value = (
        settings.min_ready_age_ms
        if min_ready_age_ms is None
        else math.floor(_number("min_ready_age_ms", min_ready_age_ms))
    )
    return timedelta(milliseconds=min(value, settings.max_ttl_ms))


@dataclass(frozen=True)
class _ReadyRequest:
    """What an add asks about readiness: nothing (keep an entry's own), ready now, or ready at."""

    ready: bool
    at: datetime | None

    def ready_at(self, now: datetime) -> datetime | None:
        """The `ready_at` to write, or None to keep an existing entry's."""
        if not self.ready:
            return None
        return self.at or now


def ready_request(ready: object, ready_at_ms: object) -> _ReadyRequest:
    """Validate add's `ready`/`ready_at`.

    `ready=True` means ready at `ready_at_ms`, else now; a `ready_at_ms` alone implies `ready`;
    `ready=False` is the same as absent: it never takes readiness away from an entry that has it.
    """
    flag = check_flag("ready", ready)
    if ready_at_ms is None:
        return _ReadyRequest(ready=bool(flag), at=None)
    if flag is False:
        raise InvalidInput("ready_at", "cannot be given with ready=false")
    value = _number("ready_at", ready_at_ms)
    # epoch_ms truncates; ready_at is non-negative here, so a fractional millisecond rounds down.
    ms = validate.epoch_ms("ready_at", value)
    assert ms is not None
    return _ReadyRequest(ready=True, at=from_ms(ms))


# -- pool entries ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _GcBounds:
    """An entry is garbage when of another version, `expires_at <= now` or `ready_at < stale_before`."""

    now: datetime
    stale_before: datetime


def gc_bounds(now: datetime, settings: PoolSettings) -> _GcBounds:
    return _GcBounds(now=now, stale_before=now - timedelta(milliseconds=settings.ready_max_age_ms))


def is_expired(entry: PoolEntry, now: datetime) -> bool:
    return entry.expires_at <= now


def is_stale(entry: PoolEntry, now: datetime, settings: PoolSettings) -> bool:
    """Ready for longer than the stale limit: the instance is presumed recycled."""
    return entry.ready_at is not None and entry.ready_at < gc_bounds(now, settings).stale_before


def is_garbage(entry: PoolEntry, version: str, now: datetime, settings: PoolSettings) -> bool:
    """What GC deletes in an operation naming `version`: expired, stale-ready or another version."""
    return entry.version != version or is_expired(entry, now) or is_stale(entry, now, settings)


def claim_window(now: datetime, min_age: timedelta, settings: PoolSettings) -> tuple[datetime, datetime]:
    """The (oldest, newest) `ready_at` a claimable entry may have, both inclusive."""
    return now - timedelta(milliseconds=settings.ready_max_age_ms), now - min_age


def is_available(entry: PoolEntry, now: datetime, min_age: timedelta, settings: PoolSettings) -> bool:
    """Ready, unexpired, not stale and ready for at least `min_age`; everything else is warming."""
    if entry.state != "ready" or entry.ready_at is None or is_expired(entry, now):
        return False
    oldest, newest = claim_window(now, min_age, settings)
    return oldest <= entry.ready_at <= newest


def count(
    entries: Iterable[PoolEntry], version: str, now: datetime, min_age: timedelta, settings: PoolSettings
) -> Counts:
    """Available and warming entries of `version`, garbage left out."""
    available = warming = 0
    for entry in entries:
        if is_garbage(entry, version, now, settings):
            continue
        if is_available(entry, now, min_age, settings):
            available += 1
        else:
            warming += 1
    return Counts(available, warming)


def claim_order(entry: PoolEntry) -> tuple[int, str]:
    """Newest `ready_at` first; ties go to the smallest id (SQL: `ORDER BY ready_at DESC, id`)."""
    assert entry.ready_at is not None
    return (-((entry.ready_at - EPOCH) // _MICROSECOND), entry.id)


def choose_claim(
    entries: Iterable[PoolEntry],
    version: str,
    now: datetime,
    min_age: timedelta,
    settings: PoolSettings,
    busy: Collection[str] = (),
) -> PoolEntry | None:
    """The entry a claim takes: the newest available one of `version` whose instance is not in
    `busy` (the instances serving another live run, see `serves_live_run`), or None.

    Adds, readies and maps keep a live entry's instance from serving a run, so `busy` meets the
    pool only in rows written before they did; a claim still never hands such an instance out.
    """
    candidates = [
        e
        for e in entries
        if not is_garbage(e, version, now, settings)
        and is_available(e, now, min_age, settings)
        and e.id not in busy
    ]
    return min(candidates, key=claim_order, default=None)


def added(
    existing: PoolEntry | None,
    entry_id: str,
    version: str,
    now: datetime,
    lifetime: timedelta,
    ready_at: datetime | None,
) -> PoolEntry:
    """The entry an add writes. A live same-version ready entry keeps its `ready_at` unless one is
    requested; a same-version entry keeps its `created_at`; the lifetime restarts now."""
    same = existing is not None and existing.version == version
    kept_ready_at = (
        existing.ready_at
        if existing is not None and same and not is_expired(existing, now) and existing.state == "ready"
        else None
    )
    next_ready_at = ready_at if ready_at is not None else kept_ready_at
    return PoolEntry(
        id=entry_id,
        version=version,
        state="ready" if next_ready_at is not None else "warming",
        created_at=existing.created_at if existing is not None and same else now,
        ready_at=next_ready_at,
        expires_at=now + lifetime,
    )


def promoted(entry: PoolEntry, now: datetime) -> PoolEntry:
    """promote: ready as of now, even if it was ready before: the stale limit counts from now."""
    return replace(entry, state="ready", ready_at=now)


def marked_ready(entry: PoolEntry, now: datetime) -> PoolEntry:
    """ready: ready, keeping an earlier `ready_at` (an instance reporting twice stays as old)."""
    return replace(entry, state="ready", ready_at=entry.ready_at or now)


# -- one instance, one place -------------------------------------------------------------------------
#
# An instance id names one instance across every pool, and an instance is in at most one place: a
# live entry of one pool, or serving one live run. Only a claim moves it from the first to the
# second (it deletes the entry and maps the run in one statement); a map, add or ready that would
# put it in a second place is refused with `InstanceMapped`, so a run token can never take an
# instance out of a pool, and a claim never hands out an instance another run holds.


def holds_instance(entry: PoolEntry, now: datetime) -> bool:
    """The entry keeps its instance in its pool until it expires, ready or warming alike: stale or
    of another version, it is still there for a claim of its version or an add to refresh."""
    return not is_expired(entry, now)


def serves_live_run(mapping: RunMapping, run_ended: bool, now: datetime) -> bool:
    """The mapping's instance serves its run: the mapping is live, names an instance (a blocked
    run has none) and the run has not ended (a run not opened yet has not)."""
    return live(mapping, now) is not None and mapping.instance_id != "" and not run_ended


# -- run mappings --------------------------------------------------------------------------------


def live(mapping: RunMapping | None, now: datetime) -> RunMapping | None:
    """The mapping unless it has expired: expired mappings count as absent everywhere."""
    if mapping is None or mapping.expires_at <= now:
        return None
    return mapping


@dataclass(frozen=True)
class ExistingClaim:
    """A claim settled by the run's mapping: `instance_id` None means the run is blocked."""

    instance_id: str | None


def existing_claim(mapping: RunMapping | None, version: str) -> ExistingClaim | None:
    """A live same-version mapping answers the claim (idempotent); otherwise a new claim is made."""
    if mapping is None or mapping.version != version:
        return None
    if mapping.state in ("claimed", "started"):
        return ExistingClaim(mapping.instance_id or None)
    return ExistingClaim(None)


def claimed(
    run_id: str, pool: str, instance_id: str, version: str, now: datetime, settings: PoolSettings
) -> RunMapping:
    """The mapping a successful claim creates (it replaces any other-version mapping)."""
    return RunMapping(
        run_id=run_id,
        pool=pool,
        instance_id=instance_id,
        state="claimed",
        blocked_instance_id=None,
        version=version,
        claimed_at=now,
        started_at=None,
        created_at=now,
        expires_at=now + timedelta(milliseconds=settings.mapping_ttl_ms),
    )


def mapped(
    mapping: RunMapping | None,
    run_id: str,
    instance_id: str,
    version: str,
    started: bool,
    pool: str | None,
    now: datetime,
    settings: PoolSettings,
) -> RunMapping | None:
    """What map writes, or None when the run is blocked for this very instance (nothing changes).

    `mapping` is the live one (see `live`). Started when asked or already started on this instance,
    keeping the first `started_at`; a same-version mapping keeps `claimed_at` and `created_at`; the
    lifetime restarts now. The pool is the one given, else the mapping's, else `default`.
    """
    same = mapping is not None and mapping.version == version
    if (
        mapping is not None
        and same
        and mapping.state == "blocked"
        and mapping.blocked_instance_id == instance_id
    ):
        return None
    already_started = (
        mapping is not None
        and same
        and mapping.instance_id == instance_id
        and mapping.state == "started"
        and mapping.started_at is not None
    )
    started_at = mapping.started_at if already_started and mapping is not None else now if started else None
    return RunMapping(
        run_id=run_id,
        pool=pool or (mapping.pool if mapping is not None else _DEFAULT_POOL),
        instance_id=instance_id,
        state="started" if started_at is not None else "claimed",
        blocked_instance_id=None,
        version=version,
        claimed_at=(mapping.claimed_at if mapping is not None and same else None) or now,
        started_at=started_at,
        created_at=mapping.created_at if mapping is not None and same else now,
        expires_at=now + timedelta(milliseconds=settings.mapping_ttl_ms),
    )


def blocked(
    mapping: RunMapping | None,
    run_id: str,
    instance_id: str,
    version: str,
    now: datetime,
    settings: PoolSettings,
) -> RunMapping | None:
    """What block writes, or None when the run already started on this instance (it lost the race).

    Otherwise a block replaces any mapping of the run, whatever its state or instance (created now,
    same-version `claimed_at` kept): the coordinator giving up on an instance wins unless the run
    already started there.
    """
    if (
        mapping is not None
        and mapping.version == version
        and mapping.instance_id == instance_id
        and mapping.state == "started"
        and mapping.started_at is not None
    ):
        return None
    same = mapping is not None and mapping.version == version
    return RunMapping(
        run_id=run_id,
        pool=mapping.pool if mapping is not None else _DEFAULT_POOL,
        instance_id="",
        state="blocked",
        blocked_instance_id=instance_id,
        version=version,
        claimed_at=(mapping.claimed_at if mapping is not None and same else None) or now,
        started_at=None,
        created_at=now,
        expires_at=now + timedelta(milliseconds=settings.mapping_ttl_ms),
    )


@dataclass(frozen=True)
class Resolution:
    instance_id: str | None
    started_at: datetime | None
    delete: bool  # the stored mapping is expired or of another version: remove it


def resolution(stored: RunMapping | None, version: str, now: datetime) -> Resolution:
    """resolve: an expired or other-version mapping is removed and reported as none."""
    if stored is None:
        return Resolution(None, None, delete=False)
    if live(stored, now) is None or stored.version != version:
        return Resolution(None, None, delete=True)
    return Resolution(stored.instance_id or None, stored.started_at, delete=False)
