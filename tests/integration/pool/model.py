"""A reference model of the warm pool and run mappings in plain Python.

Written from the rules as `ledger.pool.rules` documents them (add, claim, count, promote, ready,
delete, clear, map, block, resolve), independently of that module's code: times are epoch ms,
state is two dicts, every operation runs to completion before the next (as if each held a lock on
everything). The model-based test runs the same operations here and on Postgres.

An instance is in one place at a time: an unexpired entry of one pool, or the instance of one live
mapping (runs never end here: the model has no runs). A map, add, promote or ready that would put
it in a second place is refused before anything changes, its garbage collection included.

Claims collect garbage only now and then: the first claim of a pool and version, then one once
`claim_gc_interval` ms (of the model's clock) have passed since the last claim that collected (0:
every claim). Garbage left in place is invisible: never claimed, counted or listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_TTL = 8 * 60_000
MAX_TTL = 8 * 60_000
READY_MAX_AGE = 7 * 60_000
MAPPING_TTL = 60 * 60_000


class ModelInvalid(Exception):
    """The model's rejection of bad input (the implementation raises InvalidInput)."""


class ModelConflict(Exception):
    """The model's refusal to place an instance a second time (the implementation raises
    InstanceMapped)."""


@dataclass
class Entry:
    version: str
    state: str
    created_at: int
    ready_at: int | None
    expires_at: int


@dataclass
class Mapping:
    pool: str
    instance_id: str
    state: str
    blocked_instance_id: str | None
    version: str
    claimed_at: int | None
    started_at: int | None
    created_at: int
    expires_at: int


@dataclass
class PoolModel:
    now: int
    claim_gc_interval: float = 0
    entries: dict[tuple[str, str], Entry] = field(default_factory=dict)
    mappings: dict[str, Mapping] = field(default_factory=dict)
    claim_gc_at: dict[tuple[str, str], int] = field(default_factory=dict)

    # -- helpers -------------------------------------------------------------------------------

    def _gc(self, pool: str, version: str) -> None:
        for key, e in list(self.entries.items()):
            if key[0] != pool:
                continue
            stale = e.state == "ready" and e.ready_at is not None and self.now - e.ready_at > READY_MAX_AGE
            if e.expires_at <= self.now or stale or e.version != version:
                del self.entries[key]

    def _claim_collects(self, pool: str, version: str) -> bool:
        last = self.claim_gc_at.get((pool, version))
        if last is not None and self.now - last < self.claim_gc_interval:
            return False
        self.claim_gc_at[(pool, version)] = self.now
        return True

    def _live(self, e: Entry) -> bool:
        stale = e.state == "ready" and e.ready_at is not None and self.now - e.ready_at > READY_MAX_AGE
        return e.expires_at > self.now and not stale

    def _usable(self, e: Entry, min_age: int) -> bool:
        return (
            e.state == "ready"
            and e.ready_at is not None
            and e.expires_at > self.now
            and min_age <= self.now - e.ready_at <= READY_MAX_AGE
        )

    def _counts(self, pool: str, version: str, min_age: int) -> dict[str, int]:
        available = warming = 0
        for (p, _), e in self.entries.items():
            if p != pool or e.version != version or not self._live(e):
                continue
            if self._usable(e, min_age):
                available += 1
            else:
                warming += 1
        return {"available": available, "warming": warming}

    @staticmethod
    def _min_age(value: int | None) -> int:
        if value is None:
            return 0
        if value < 0:
            raise ModelInvalid("min_ready_age_ms")
        return min(value, MAX_TTL)

    def _mapping(self, run_id: str) -> Mapping | None:
        m = self.mappings.get(run_id)
        return m if m is not None and m.expires_at > self.now else None

    def _serving(self, instance_id: str, other_than: str | None = None) -> bool:
        """A live mapping other than `other_than`'s has the instance."""
        return any(
            run_id != other_than and m.expires_at > self.now and m.instance_id == instance_id
            for run_id, m in self.mappings.items()
        )

    def _pooled(self, instance_id: str, other_than: str | None = None) -> bool:
        """An unexpired entry of a pool other than `other_than` is the instance."""
        return any(
            p != other_than and i == instance_id and e.expires_at > self.now
            for (p, i), e in self.entries.items()
        )

    def _refuse_placed(self, pool: str, ids: list[str]) -> None:
        if any(self._serving(i) or self._pooled(i, other_than=pool) for i in ids):
            raise ModelConflict("instance_mapped")

    # -- pool ----------------------------------------------------------------------------------

    def add(
        self,
        pool: str,
        version: str,
        ids: list[str],
        ttl_ms: int | None = None,
        ready: bool | None = None,
        ready_at_ms: int | None = None,
    ) -> int:
        if ttl_ms is not None and ttl_ms < 0:
            raise ModelInvalid("ttl_ms")
        if ready is False and ready_at_ms is not None:
            raise ModelInvalid("ready_at")
        ttl = min(ttl_ms, MAX_TTL) if ttl_ms else DEFAULT_TTL
        wants_ready = ready is True or ready_at_ms is not None
        ready_at = (ready_at_ms if ready_at_ms is not None else self.now) if wants_ready else None
        unique = list(dict.fromkeys(ids))
        self._refuse_placed(pool, unique)
        self._gc(pool, version)
        for entry_id in unique:
            old = self.entries.get((pool, entry_id))
            kept = (
                old.ready_at
                if old is not None
                and old.version == version
                and old.expires_at > self.now
                and old.state == "ready"
                else None
            )
            next_ready = ready_at if wants_ready else kept
            self.entries[(pool, entry_id)] = Entry(
                version=version,
                state="ready" if next_ready is not None else "warming",
                created_at=old.created_at if old is not None and old.version == version else self.now,
                ready_at=next_ready,
                expires_at=self.now + ttl,
            )
        return len(unique)

    def claim(
        self, pool: str, version: str, run_id: str, min_ready_age_ms: int | None = None
    ) -> dict[str, Any]:
        min_age = self._min_age(min_ready_age_ms)
        if self._claim_collects(pool, version):
            self._gc(pool, version)
        mapping = self._mapping(run_id)
        claimed: str | None = None
        if mapping is not None and mapping.version == version:
            if mapping.state in ("claimed", "started"):
                claimed = mapping.instance_id or None
        else:
            usable = [
                (e.ready_at, entry_id)
                for (p, entry_id), e in self.entries.items()
                if p == pool
                and e.version == version
                and self._usable(e, min_age)
                and not self._serving(entry_id, other_than=run_id)
            ]
            if usable:
                newest = max(r for r, _ in usable)
                claimed = min(i for r, i in usable if r == newest)
                del self.entries[(pool, claimed)]
                self.mappings[run_id] = Mapping(
                    pool=pool,
                    instance_id=claimed,
                    state="claimed",
                    blocked_instance_id=None,
                    version=version,
                    claimed_at=self.now,
                    started_at=None,
                    created_at=self.now,
                    expires_at=self.now + MAPPING_TTL,
                )
        return {"id": claimed, **self._counts(pool, version, min_age)}

    def count(self, pool: str, version: str, min_ready_age_ms: int | None = None) -> dict[str, int]:
        min_age = self._min_age(min_ready_age_ms)
        self._gc(pool, version)
        return self._counts(pool, version, min_age)

    def list(self, pool: str, version: str) -> list[dict[str, Any]]:
        self._gc(pool, version)
        return [
            {
                "id": entry_id,
                "version": e.version,
                "state": e.state,
                "created_at": e.created_at,
                "ready_at": e.ready_at,
                "expires_at": e.expires_at,
            }
            for (p, entry_id), e in sorted(self.entries.items())
            if p == pool and e.version == version
        ]

    def promote(self, pool: str, version: str, ids: list[str]) -> int:
        self._refuse_placed(pool, ids)
        self._gc(pool, version)
        done = 0
        for entry_id in dict.fromkeys(ids):
            e = self.entries.get((pool, entry_id))
            if e is not None and e.version == version and e.expires_at > self.now:
                e.state, e.ready_at = "ready", self.now
                done += 1
        return done

    def ready(self, pool: str, version: str, id: str) -> bool:
        self._refuse_placed(pool, [id])
        self._gc(pool, version)
        e = self.entries.get((pool, id))
        if e is None or e.version != version or e.expires_at <= self.now:
            return False
        e.state = "ready"
        e.ready_at = e.ready_at if e.ready_at is not None else self.now
        return True

    def delete(self, pool: str, version: str, ids: list[str]) -> int:
        self._gc(pool, version)
        done = 0
        for entry_id in dict.fromkeys(ids):
            e = self.entries.get((pool, entry_id))
            if e is not None and e.version == version:
                del self.entries[(pool, entry_id)]
                done += 1
        return done

    def clear(self, pool: str) -> int:
        keys = [k for k in self.entries if k[0] == pool]
        for k in keys:
            del self.entries[k]
        return len(keys)

    # -- mappings --------------------------------------------------------------------------------

    def map_run(self, run_id: str, instance_id: str, version: str, started: bool = False) -> dict[str, bool]:
        old = self._mapping(run_id)
        same = old is not None and old.version == version
        if old is not None and same and old.state == "blocked" and old.blocked_instance_id == instance_id:
            return {"mapped": False}
        already = (
            old is not None
            and same
            and old.instance_id == instance_id
            and old.state == "started"
            and old.started_at is not None
        )
        started_at = old.started_at if already and old is not None else (self.now if started else None)
        # Only a claim takes an instance out of a pool, whichever pool and version it waits in.
        if self._serving(instance_id, other_than=run_id) or self._pooled(instance_id):
            raise ModelConflict("instance_mapped")
        self.mappings[run_id] = Mapping(
            pool=old.pool if old is not None else "default",
            instance_id=instance_id,
            state="started" if started_at is not None else "claimed",
            blocked_instance_id=None,
            version=version,
            claimed_at=old.claimed_at
            if old is not None and same and old.claimed_at is not None
            else self.now,
            started_at=started_at,
            created_at=old.created_at if old is not None and same else self.now,
            expires_at=self.now + MAPPING_TTL,
        )
        return {"mapped": True}

    def block_run(self, run_id: str, instance_id: str, version: str) -> dict[str, bool]:
        old = self._mapping(run_id)
        if (
            old is not None
            and old.version == version
            and old.instance_id == instance_id
            and old.state == "started"
            and old.started_at is not None
        ):
            return {"blocked": False, "started": True}
        same = old is not None and old.version == version
        self.mappings[run_id] = Mapping(
            pool=old.pool if old is not None else "default",
            instance_id="",
            state="blocked",
            blocked_instance_id=instance_id,
            version=version,
            claimed_at=old.claimed_at
            if old is not None and same and old.claimed_at is not None
            else self.now,
            started_at=None,
            created_at=self.now,
            expires_at=self.now + MAPPING_TTL,
        )
        return {"blocked": True, "started": False}

    def resolve_run(self, run_id: str, version: str) -> dict[str, Any]:
        stored = self.mappings.get(run_id)
        if stored is None:
            return {"instance_id": None, "started_at": None}
        if stored.expires_at <= self.now or stored.version != version:
            del self.mappings[run_id]
            return {"instance_id": None, "started_at": None}
        return {"instance_id": stored.instance_id or None, "started_at": stored.started_at}

    # -- state, as the test reads it from Postgres -------------------------------------------------

    def snapshot(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        entries = sorted(
            (p, i, e.version, e.state, e.created_at, e.ready_at, e.expires_at)
            for (p, i), e in self.entries.items()
        )
        mappings = sorted(
            (
                r,
                m.pool,
                m.instance_id,
                m.state,
                m.blocked_instance_id,
                m.version,
                m.claimed_at,
                m.started_at,
                m.created_at,
                m.expires_at,
            )
            for r, m in self.mappings.items()
        )
        return entries, mappings
