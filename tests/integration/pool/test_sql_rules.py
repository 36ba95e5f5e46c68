"""The pool's SQL functions against `ledger.pool.rules`, directly: random entries on and next to
every limit (stale at 7 min, expiry, the minimum ready age, ties, another version, ready in the
future), to the microsecond, some of them instances mapped to runs (live or expired mappings,
ended runs, the claiming run's own). The database must count what `rules.count` counts, claim what
`rules.choose_claim` chooses (never an instance `rules.serves_live_run` says another run holds),
collect what `rules.is_garbage` calls garbage, and find an instance in a pool or with a run exactly
where `rules.holds_instance` and `rules.serves_live_run` put it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.pool import rules, store
from ledger.pool.rules import PoolEntry, PoolSettings, RunMapping

S = PoolSettings()
NOW = datetime(2026, 1, 1, 12, 0, 0, 500_000, tzinfo=UTC)
US = timedelta(microseconds=1)
MS = timedelta(milliseconds=1)
STALE_US = S.ready_max_age_ms * 1000

READY_AGO_US = st.sampled_from(
    [None, None, -1, 0, 1, 999, 1_000, 60_000_000, STALE_US - 1, STALE_US, STALE_US + 1, 10**12]
)
EXPIRES_IN_US = st.sampled_from([-1, 0, 1, 60_000_000, 60_000_000])
MIN_AGE_MS = st.sampled_from([0, 0, 1, 60_000, S.ready_max_age_ms, S.max_ttl_ms])
ENTRY = st.tuples(st.sampled_from(["v1", "v1", "v1", "v2"]), READY_AGO_US, EXPIRES_IN_US)
ENTRIES = st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e", "f"]), ENTRY, max_size=6)
# Rows written before maps and adds refused a second place: entries whose instance is mapped to
# another run (the mapping live or expired, the run ended or not), or to the claiming run itself
# (for another version: its own mapping of this version would answer the claim).
INSTANCES = st.sampled_from(["a", "b", "c", "d", "e", "f"])
OTHERS = st.dictionaries(INSTANCES, st.tuples(EXPIRES_IN_US, st.booleans()), max_size=3)
OWN = st.one_of(st.none(), INSTANCES)

INSERT = """
INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)
VALUES ('p', %(id)s, %(version)s, %(state)s, %(created_at)s, %(ready_at)s, %(expires_at)s)
"""
INSERT_MAPPING = """
INSERT INTO ledger.run_mappings (run_id, pool, instance_id, state, blocked_instance_id, version,
                                 claimed_at, started_at, created_at, expires_at)
VALUES (%(run_id)s, %(pool)s, %(instance_id)s, %(state)s, %(blocked_instance_id)s, %(version)s,
        %(claimed_at)s, %(started_at)s, %(created_at)s, %(expires_at)s)
"""
INSERT_ENDED_RUN = """
INSERT INTO ledger.runs (run_id, status, terminal_status, completed_at)
VALUES (%s, 'completed', 'completed', %s)
"""

Mapped = tuple[RunMapping, bool]  # the mapping, and whether its run has ended


def _entries(drawn: dict[str, tuple[str, int | None, int]]) -> list[PoolEntry]:
    return [
        PoolEntry(
            id=entry_id,
            version=version,
            state="warming" if ready_ago is None else "ready",
            created_at=NOW - timedelta(hours=1),
            ready_at=None if ready_ago is None else NOW - ready_ago * US,
            expires_at=NOW + expires_in * US,
        )
        for entry_id, (version, ready_ago, expires_in) in drawn.items()
    ]


def _mapping(run_id: str, instance_id: str, version: str, expires_in_us: int) -> RunMapping:
    return RunMapping(
        run_id=run_id,
        pool="p",
        instance_id=instance_id,
        state="claimed",
        blocked_instance_id=None,
        version=version,
        claimed_at=NOW - timedelta(minutes=1),
        started_at=None,
        created_at=NOW - timedelta(hours=2),
        expires_at=NOW + expires_in_us * US,
    )


def _mappings(others: dict[str, tuple[int, bool]], own: str | None) -> list[Mapped]:
    mapped = [(_mapping(f"m-{i}", i, "v1", expires_in), ended) for i, (expires_in, ended) in others.items()]
    if own is not None:
        mapped.append((_mapping("run", own, "v0", 60_000_000), False))
    return mapped


def _check(
    conn: psycopg.Connection[tuple[object, ...]],
    entries: list[PoolEntry],
    min_age_ms: int,
    mapped: list[Mapped],
) -> None:
    min_age = min_age_ms * MS
    limits = (min_age_ms, S.ready_max_age_ms)
    with conn.transaction(force_rollback=True):
        for e in entries:
            conn.execute(INSERT, e.__dict__)
        for m, ended in mapped:
            conn.execute(INSERT_MAPPING, m.__dict__)
            if ended:
                conn.execute(INSERT_ENDED_RUN, (m.run_id, NOW - timedelta(minutes=1)))
        busy = {
            m.instance_id for m, ended in mapped if m.run_id != "run" and rules.serves_live_run(m, ended, NOW)
        }
        _check_placed(conn, entries, mapped)
        oldest, newest = rules.claim_window(NOW, min_age, S)
        counts = conn.execute(
            "SELECT * FROM ledger.pool_counts('p', 'v1', %s, %s, %s)", (NOW, oldest, newest)
        ).fetchone()
        expected = rules.count(entries, "v1", NOW, min_age, S)
        assert counts == (expected.available, expected.warming)

        claimed = conn.execute(
            "SELECT * FROM ledger.pool_claim_v2('p', 'v1', 'run', 'lock', false, %s, %s, %s, %s)",
            (NOW, *limits, S.mapping_ttl_ms),
        ).fetchone()
        choice = rules.choose_claim(entries, "v1", NOW, min_age, S, busy)
        after = rules.count([e for e in entries if e != choice], "v1", NOW, min_age, S)
        assert claimed == (None if choice is None else choice.id, after.available, after.warming)

        left = [e for e in entries if e != choice]
        deleted = conn.execute(
            "SELECT ledger.pool_collect_v2('p', 'v1', %s, %s)", (NOW, S.ready_max_age_ms)
        ).fetchone()
        kept = conn.execute("SELECT id FROM ledger.pool_entries ORDER BY id").fetchall()
        survivors = sorted(e.id for e in left if not rules.is_garbage(e, "v1", NOW, S))
        assert [r[0] for r in kept] == survivors
        assert deleted == (len(left) - len(survivors),)


def _check_placed(
    conn: psycopg.Connection[tuple[object, ...]], entries: list[PoolEntry], mapped: list[Mapped]
) -> None:
    """Where the store finds an instance (`store.SELECT_PLACED`) is where the rules put it."""
    for instance in "abcdef":
        found = conn.execute(
            store.SELECT_PLACED, {"ids": [instance], "now": NOW, "pool": None, "run_id": None}
        ).fetchall()
        pooled = any(e.id == instance and rules.holds_instance(e, NOW) for e in entries)
        serving = any(
            m.instance_id == instance and rules.serves_live_run(m, ended, NOW) for m, ended in mapped
        )
        assert sorted(str(pool) for _, pool in found) == sorted(
            [*(["p"] if pooled else []), *(["None"] if serving else [])]
        ), instance


def test_sql_functions_agree_with_the_rules(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("DELETE FROM ledger.pool_entries")
        conn.execute("DELETE FROM ledger.run_mappings")
        conn.commit()

        @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(drawn=ENTRIES, min_age_ms=MIN_AGE_MS, others=OTHERS, own=OWN)
        def check(
            drawn: dict[str, tuple[str, int | None, int]],
            min_age_ms: int,
            others: dict[str, tuple[int, bool]],
            own: str | None,
        ) -> None:
            _check(conn, _entries(drawn), min_age_ms, _mappings(others, own))

        check()
