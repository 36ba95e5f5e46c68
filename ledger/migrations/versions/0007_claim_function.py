"""The warm pool's claim in one round trip, and counts that do not read every entry.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 05:30:00.000000

- `ledger.pool_tallies (pool, version, slot, entries, ready)`: how many entries, and ready ones,
  each pool and version holds, garbage included. Statement triggers on `pool_entries` (insert,
  update, delete, truncate) keep it, whoever writes. Each backend adds its changes to its own row
  (`slot` = its pid), so writers never wait on each other and never deadlock on a tally;
  `ledger.pool_fold_tallies(pool)` adds the other backends' rows, when no one holds them, into
  the caller's own, which keeps the rows per pool and version about as many as the backends
  writing between two folds (claims fold when they collect).
- `ledger.pool_counts(pool, version, now, oldest, newest)` → `(available, warming)`: the live
  entries of a version, available exactly within the claim window `[oldest, newest]` of
  `ready_at` (`oldest` is also the stale limit). From the tallies, less what is garbage (expired,
  stale) or too young, which it scans by index: the cost follows the garbage and the young
  entries, not the pool. A count never depends on when garbage was last deleted. The bounds come
  in as values, not expressions of `now`, so a generic plan does not recompute them per entry.
- `ledger.pool_collect(pool, version, now, ready_max_age_ms)` → how many entries it deleted: the
  garbage of an operation naming `version` (expired, stale-ready, of another version), skipping
  rows other transactions hold (whoever holds one is about to delete or rewrite it).
- `ledger.pool_claim(pool, version, run_id, run_lock, now, min_age_ms, ready_max_age_ms,
  mapping_ttl_ms, collect)` → `(claimed, available, warming)`: the whole claim, one statement.
  Takes the run's advisory lock (`run_lock` is the key `ledger.pool.store` locks a run with, so
  map, block and resolve serialise with it), collects garbage and folds the tallies only when
  `collect` is true (the caller amortizes it), answers from a live same-version mapping
  (idempotent per run), else takes the newest ready entry within the claim window with `FOR
  UPDATE SKIP LOCKED`, deletes it and writes the run's `claimed` mapping, then counts. `now`
  NULL means the transaction's `now()`.
- `ix_pool_entries_version_expires_at` on `(pool, version, expires_at) INCLUDE (ready_at)`: the
  counts' scan of expired entries, from the index alone.
- `ix_pool_entries_ready_newest` gains `id` after `ready_at DESC`: the claim's order (newest
  ready first, ties by id) read from the index alone. An add makes its whole batch ready at one
  instant, and the claim sorted that tie on every call (1,667 entries at a 100,000-entry pool).
  It includes `expires_at`, so the counts' scan of stale entries needs no heap: with the heap
  needed, a generic plan could read the whole pool instead (16 ms at 100,000 entries).

Limits travel as milliseconds and become `n * interval '1 millisecond'`: an interval of that form
has no day part, so `now - limit` is exact elapsed time in any session time zone; each function
computes its bounds once per call. Each function is `ledger.pool.rules` written in SQL
(`claim_window`, `gc_bounds`, `count`, `choose_claim`, `existing_claim`, `claimed`); the
model-based tests hold the two together.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TALLIES = """
CREATE TABLE IF NOT EXISTS ledger.pool_tallies (
    pool text NOT NULL,
    version text NOT NULL,
    slot integer NOT NULL,
    entries bigint NOT NULL,
    ready bigint NOT NULL,
    CONSTRAINT pk_pool_tallies PRIMARY KEY (pool, version, slot)
)
"""

# One function for the three row events: each trigger has the transition tables its event has.
TALLY = """
CREATE FUNCTION ledger.pool_tally() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO ledger.pool_tallies AS t (pool, version, slot, entries, ready)
        SELECT a.pool, a.version, pg_backend_pid(), count(*), count(*) FILTER (WHERE a.state = 'ready')
        FROM added a GROUP BY a.pool, a.version ORDER BY a.pool, a.version
        ON CONFLICT (pool, version, slot) DO UPDATE
            SET entries = t.entries + EXCLUDED.entries, ready = t.ready + EXCLUDED.ready;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO ledger.pool_tallies AS t (pool, version, slot, entries, ready)
        SELECT r.pool, r.version, pg_backend_pid(), -count(*), -count(*) FILTER (WHERE r.state = 'ready')
        FROM removed r GROUP BY r.pool, r.version ORDER BY r.pool, r.version
        ON CONFLICT (pool, version, slot) DO UPDATE
            SET entries = t.entries + EXCLUDED.entries, ready = t.ready + EXCLUDED.ready;
    ELSE
        INSERT INTO ledger.pool_tallies AS t (pool, version, slot, entries, ready)
        SELECT c.pool, c.version, pg_backend_pid(), sum(c.entries), sum(c.ready)
        FROM (
            SELECT a.pool, a.version, 1 AS entries, (a.state = 'ready')::int AS ready FROM added a
            UNION ALL
            SELECT r.pool, r.version, -1, -(r.state = 'ready')::int FROM removed r
        ) c
        GROUP BY c.pool, c.version
        HAVING sum(c.entries) <> 0 OR sum(c.ready) <> 0
        ORDER BY c.pool, c.version
        ON CONFLICT (pool, version, slot) DO UPDATE
            SET entries = t.entries + EXCLUDED.entries, ready = t.ready + EXCLUDED.ready;
    END IF;
    RETURN NULL;
END
$$
"""

TALLY_TRUNCATE = """
CREATE FUNCTION ledger.pool_tally_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM ledger.pool_tallies;
    RETURN NULL;
END
$$
"""

TRIGGERS = (
    "CREATE TRIGGER pool_tally_insert AFTER INSERT ON ledger.pool_entries"
    " REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION ledger.pool_tally()",
    "CREATE TRIGGER pool_tally_update AFTER UPDATE ON ledger.pool_entries"
    " REFERENCING OLD TABLE AS removed NEW TABLE AS added"
    " FOR EACH STATEMENT EXECUTE FUNCTION ledger.pool_tally()",
    "CREATE TRIGGER pool_tally_delete AFTER DELETE ON ledger.pool_entries"
    " REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION ledger.pool_tally()",
    "CREATE TRIGGER pool_tally_truncate AFTER TRUNCATE ON ledger.pool_entries"
    " FOR EACH STATEMENT EXECUTE FUNCTION ledger.pool_tally_truncate()",
)

# The entries already there, in one row per pool and version (slot 0), with writers held off.
TALLY_EXISTING = (
    "LOCK TABLE ledger.pool_entries IN SHARE ROW EXCLUSIVE MODE",
    "DELETE FROM ledger.pool_tallies",
    """
    INSERT INTO ledger.pool_tallies (pool, version, slot, entries, ready)
    SELECT pool, version, 0, count(*), count(*) FILTER (WHERE state = 'ready')
    FROM ledger.pool_entries GROUP BY pool, version
    """,
)

# Another backend's rows are taken only when no one holds them, and added to this backend's own
# rows, which it locks first: a fold never waits, and two folds never take each other's rows.
FOLD = """
CREATE FUNCTION ledger.pool_fold_tallies(p_pool text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_slot integer := pg_backend_pid();
BEGIN
    WITH mine AS (
        SELECT t.version FROM ledger.pool_tallies t
        WHERE t.pool = p_pool AND t.slot = v_slot
        FOR UPDATE SKIP LOCKED
    ), theirs AS (
        DELETE FROM ledger.pool_tallies d
        WHERE (d.pool, d.version, d.slot) IN (
            SELECT o.pool, o.version, o.slot FROM ledger.pool_tallies o
            WHERE o.pool = p_pool AND o.slot <> v_slot AND o.version IN (SELECT version FROM mine)
            FOR UPDATE SKIP LOCKED
        )
        RETURNING d.version, d.entries, d.ready
    ), sums AS (
        SELECT version, sum(entries) AS entries, sum(ready) AS ready FROM theirs GROUP BY version
    )
    UPDATE ledger.pool_tallies t SET entries = t.entries + s.entries, ready = t.ready + s.ready
    FROM sums s
    WHERE t.pool = p_pool AND t.slot = v_slot AND t.version = s.version;
    -- What sums to nothing (a retired version, once folded) is dropped.
    DELETE FROM ledger.pool_tallies t
    WHERE t.pool = p_pool AND t.slot = v_slot AND t.entries = 0 AND t.ready = 0;
END
$$
"""

# Live = all - expired - stale but unexpired; available = ready - stale - too young - expired but
# within the window (ready entries split by ready_at into stale, window and young when the window
# is not empty). Each scan but the tallies' reads only garbage or too-young entries.
COUNTS = """
CREATE FUNCTION ledger.pool_counts(
    p_pool text, p_version text, p_now timestamptz, p_oldest timestamptz, p_newest timestamptz
) RETURNS TABLE (available bigint, warming bigint)
LANGUAGE sql STABLE AS $$
    WITH tally AS (
        SELECT coalesce(sum(t.entries), 0)::bigint AS entries, coalesce(sum(t.ready), 0)::bigint AS ready
        FROM ledger.pool_tallies t WHERE t.pool = p_pool AND t.version = p_version
    ), expired AS (
        SELECT count(*) AS n,
               count(*) FILTER (WHERE e.ready_at >= p_oldest AND e.ready_at <= p_newest) AS in_window
        FROM ledger.pool_entries e
        WHERE e.pool = p_pool AND e.version = p_version AND e.expires_at <= p_now
    ), stale AS (
        SELECT count(*) AS n, count(*) FILTER (WHERE e.expires_at > p_now) AS unexpired
        FROM ledger.pool_entries e
        WHERE e.pool = p_pool AND e.version = p_version AND e.state = 'ready' AND e.ready_at < p_oldest
    ), young AS (
        SELECT count(*) AS n FROM ledger.pool_entries e
        WHERE e.pool = p_pool AND e.version = p_version AND e.state = 'ready' AND e.ready_at > p_newest
    ), live AS (
        SELECT tally.entries - expired.n - stale.unexpired AS n,
               CASE WHEN p_newest < p_oldest THEN 0
                    ELSE tally.ready - stale.n - young.n - expired.in_window END AS available
        FROM tally, expired, stale, young
    )
    SELECT live.available, live.n - live.available FROM live
$$
"""

COLLECT = """
CREATE FUNCTION ledger.pool_collect(
    p_pool text, p_version text, p_now timestamptz, p_ready_max_age_ms bigint
) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_stale_before timestamptz := p_now - p_ready_max_age_ms * interval '1 millisecond';
    v_deleted bigint;
BEGIN
    DELETE FROM ledger.pool_entries d
    WHERE (d.pool, d.id) IN (
        SELECT g.pool, g.id FROM ledger.pool_entries g
        WHERE g.pool = p_pool
          AND (g.version <> p_version OR g.expires_at <= p_now OR g.ready_at < v_stale_before)
        FOR UPDATE SKIP LOCKED
    );
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$
"""

CLAIM = """
CREATE FUNCTION ledger.pool_claim(
    p_pool text, p_version text, p_run_id text, p_run_lock text, p_now timestamptz,
    p_min_age_ms bigint, p_ready_max_age_ms bigint, p_mapping_ttl_ms bigint, p_collect boolean,
    OUT claimed text, OUT available bigint, OUT warming bigint
)
LANGUAGE plpgsql VOLATILE
-- Generic plans: planning the counts afresh on every call (what plpgsql does while a custom plan
-- looks cheaper) cost more than the rest of the claim. A generic plan cannot see how narrow the
-- garbage and young ranges are and, in a pool that fills the table, preferred reading it whole:
-- without sequential scans every statement reads by index, bounded by what it matches.
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_oldest timestamptz := v_now - p_ready_max_age_ms * interval '1 millisecond';
    v_newest timestamptz := v_now - p_min_age_ms * interval '1 millisecond';
    v_mapping ledger.run_mappings%ROWTYPE;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_run_lock, 0));
    IF p_collect THEN
        PERFORM ledger.pool_collect(p_pool, p_version, v_now, p_ready_max_age_ms);
        PERFORM ledger.pool_fold_tallies(p_pool);
    END IF;
    SELECT * INTO v_mapping FROM ledger.run_mappings m WHERE m.run_id = p_run_id FOR UPDATE;
    IF FOUND AND v_mapping.expires_at > v_now AND v_mapping.version = p_version THEN
        IF v_mapping.state IN ('claimed', 'started') THEN
            claimed := nullif(v_mapping.instance_id, '');
        END IF;
    ELSE
        WITH picked AS (
            SELECT e.pool, e.id FROM ledger.pool_entries e
            WHERE e.pool = p_pool AND e.version = p_version AND e.state = 'ready'
              AND e.ready_at >= v_oldest AND e.ready_at <= v_newest AND e.expires_at > v_now
            ORDER BY e.ready_at DESC, e.id
            LIMIT 1
            FOR UPDATE SKIP LOCKED
        )
        DELETE FROM ledger.pool_entries d USING picked
        WHERE d.pool = picked.pool AND d.id = picked.id
        RETURNING d.id INTO claimed;
        IF claimed IS NOT NULL THEN
            INSERT INTO ledger.run_mappings AS m (
                run_id, pool, instance_id, state, blocked_instance_id, version,
                claimed_at, started_at, created_at, expires_at)
            VALUES (p_run_id, p_pool, claimed, 'claimed', NULL, p_version,
                    v_now, NULL, v_now, v_now + p_mapping_ttl_ms * interval '1 millisecond')
            ON CONFLICT (run_id) DO UPDATE SET
                pool = EXCLUDED.pool, instance_id = EXCLUDED.instance_id, state = EXCLUDED.state,
                blocked_instance_id = EXCLUDED.blocked_instance_id, version = EXCLUDED.version,
                claimed_at = EXCLUDED.claimed_at, started_at = EXCLUDED.started_at,
                created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at;
        END IF;
    END IF;
    SELECT c.available, c.warming INTO available, warming
    FROM ledger.pool_counts(p_pool, p_version, v_now, v_oldest, v_newest) c;
END
$$
"""

FUNCTIONS = (
    "ledger.pool_claim(text, text, text, text, timestamptz, bigint, bigint, bigint, boolean)",
    "ledger.pool_collect(text, text, timestamptz, bigint)",
    "ledger.pool_counts(text, text, timestamptz, timestamptz, timestamptz)",
    "ledger.pool_fold_tallies(text)",
    "ledger.pool_tally()",
    "ledger.pool_tally_truncate()",
)


def _newest_first_index(columns: list[str | sa.TextClause], include: list[str]) -> None:
    op.drop_index("ix_pool_entries_ready_newest", table_name="pool_entries", schema="ledger")
    op.create_index(
        "ix_pool_entries_ready_newest",
        "pool_entries",
        columns,
        unique=False,
        schema="ledger",
        postgresql_where=sa.text("state = 'ready'"),
        postgresql_include=include,
    )


def upgrade() -> None:
    _newest_first_index(["pool", "version", sa.text("ready_at DESC"), "id"], ["expires_at"])
    op.create_index(
        "ix_pool_entries_version_expires_at",
        "pool_entries",
        ["pool", "version", "expires_at"],
        unique=False,
        schema="ledger",
        postgresql_include=["ready_at"],
        if_not_exists=True,
    )
    op.execute(TALLIES)
    for statement in (TALLY, TALLY_TRUNCATE, FOLD, COUNTS, COLLECT, CLAIM):
        op.execute(statement.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
    for trigger in TRIGGERS:
        name = trigger.split()[2]
        op.execute(f"DROP TRIGGER IF EXISTS {name} ON ledger.pool_entries")
        op.execute(trigger)
    for statement in TALLY_EXISTING:
        op.execute(statement)


def downgrade() -> None:
    for trigger in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {trigger.split()[2]} ON ledger.pool_entries")
    for signature in FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {signature}")
    op.execute("DROP TABLE IF EXISTS ledger.pool_tallies")
    op.drop_index("ix_pool_entries_version_expires_at", table_name="pool_entries", schema="ledger")
    _newest_first_index(["pool", "version", sa.text("ready_at DESC")], [])
