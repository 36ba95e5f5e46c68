"""The warm pool's claim in one round trip: three functions and an index for the counts.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 05:30:00.000000

- `ledger.pool_counts(pool, version, now, min_age_ms, ready_max_age_ms)` → `(available, warming)`:
  the live entries of a version, available exactly within the claim window. Garbage (expired,
  stale-ready) is left out, so a count never depends on when garbage was last deleted.
- `ledger.pool_collect(pool, version, now, ready_max_age_ms)` → how many entries it deleted: the
  garbage of an operation naming `version` (expired, stale-ready, of another version), skipping
  rows other transactions hold (whoever holds one is about to delete or rewrite it).
- `ledger.pool_claim(pool, version, run_id, run_lock, now, min_age_ms, ready_max_age_ms,
  mapping_ttl_ms, collect)` → `(claimed, available, warming)`: the whole claim, one statement.
  Takes the run's advisory lock (`run_lock` is the key `ledger.pool.store` locks a run with, so
  map, block and resolve serialise with it), collects garbage only when `collect` is true (the
  caller amortizes it), answers from a live same-version mapping (idempotent per run), else takes
  the newest ready entry within the claim window with `FOR UPDATE SKIP LOCKED`, deletes it and
  writes the run's `claimed` mapping, then counts. `now` NULL means the transaction's `now()`.
- `ix_pool_entries_version_expires_at` on `(pool, version, expires_at) INCLUDE (ready_at)`: serves
  `pool_counts` from the index alone (every column it reads is in it).

Limits travel as milliseconds and become `n * interval '1 millisecond'`: an interval of that form
has no day part, so `now - limit` is exact elapsed time in any session time zone. Each function is
`ledger.pool.rules` written in SQL (`claim_window`, `gc_bounds`, `count`, `choose_claim`,
`existing_claim`, `claimed`); the model-based tests hold the two together. Entry state is read
from `ready_at` alone where the check constraint `ready_at_iff_ready` makes the two the same, so
the counts need no column outside the index.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COUNTS = """
CREATE FUNCTION ledger.pool_counts(
    p_pool text, p_version text, p_now timestamptz, p_min_age_ms bigint, p_ready_max_age_ms bigint
) RETURNS TABLE (available bigint, warming bigint)
LANGUAGE sql STABLE AS $$
    SELECT
        count(*) FILTER (
            WHERE e.ready_at >= p_now - p_ready_max_age_ms * interval '1 millisecond'
              AND e.ready_at <= p_now - p_min_age_ms * interval '1 millisecond'),
        count(*) FILTER (
            WHERE e.ready_at IS NULL OR e.ready_at > p_now - p_min_age_ms * interval '1 millisecond')
    FROM ledger.pool_entries e
    WHERE e.pool = p_pool AND e.version = p_version AND e.expires_at > p_now
      AND (e.ready_at IS NULL OR e.ready_at >= p_now - p_ready_max_age_ms * interval '1 millisecond')
$$
"""

COLLECT = """
CREATE FUNCTION ledger.pool_collect(
    p_pool text, p_version text, p_now timestamptz, p_ready_max_age_ms bigint
) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_deleted bigint;
BEGIN
    DELETE FROM ledger.pool_entries d
    WHERE (d.pool, d.id) IN (
        SELECT g.pool, g.id FROM ledger.pool_entries g
        WHERE g.pool = p_pool
          AND (g.version <> p_version OR g.expires_at <= p_now
               OR g.ready_at < p_now - p_ready_max_age_ms * interval '1 millisecond')
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
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_oldest timestamptz := v_now - p_ready_max_age_ms * interval '1 millisecond';
    v_newest timestamptz := v_now - p_min_age_ms * interval '1 millisecond';
    v_mapping ledger.run_mappings%ROWTYPE;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_run_lock, 0));
    IF p_collect THEN
        PERFORM ledger.pool_collect(p_pool, p_version, v_now, p_ready_max_age_ms);
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
    FROM ledger.pool_counts(p_pool, p_version, v_now, p_min_age_ms, p_ready_max_age_ms) c;
END
$$
"""

FUNCTIONS = (
    "ledger.pool_claim(text, text, text, text, timestamptz, bigint, bigint, bigint, boolean)",
    "ledger.pool_collect(text, text, timestamptz, bigint)",
    "ledger.pool_counts(text, text, timestamptz, bigint, bigint)",
)


def upgrade() -> None:
    op.create_index(
        "ix_pool_entries_version_expires_at",
        "pool_entries",
        ["pool", "version", "expires_at"],
        unique=False,
        schema="ledger",
        postgresql_include=["ready_at"],
        if_not_exists=True,
    )
    for statement in (COUNTS, COLLECT, CLAIM):
        op.execute(statement.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))


def downgrade() -> None:
    for signature in FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {signature}")
    op.drop_index("ix_pool_entries_version_expires_at", table_name="pool_entries", schema="ledger")
