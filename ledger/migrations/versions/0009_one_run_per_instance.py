"""One live run per instance, whatever the order: the claim skips an instance serving another run.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 21:40:00.000000

An instance id names one instance across every pool. Mapping an instance that is a live entry of a
pool, adding or readying one that serves a live run, and adding one that is a live entry of
another pool are refused (`ledger.pool.store` checks under an advisory lock on the instance id);
this migration gives those checks and the claim what they read:

- `ledger.instance_runs (instance_id, run_id, expires_at)`: the mappings that name an instance and
  whose run has not ended (a run with no row yet counts as not ended). Live ones are those with
  `expires_at > now`. The one statement of "mapped to a live run" that the store's checks and the
  claim share.
- `ledger.pool_claim` (same signature as 0007's) passes over an entry whose instance serves
  another live run, so even rows written before these checks existed are never handed out twice.
  It picks as 0007's did (newest ready first off the index, `SKIP LOCKED`, the first row only),
  then checks the picked instance: one index probe, and a pool kept consistent by the store never
  needs a second pick. A passed-over entry stays, locked until the claim ends, and the next pick
  leaves it out. The check is its own statement, not a condition of the pick: as an anti-join it
  turned the generic plan into probing every entry in the window and sorting them (1.5 ms at
  1,000 entries, growing with the pool). The rest of the claim is 0007's.
- `ix_run_mappings_instance_id`: the mappings of an instance, for that probe and the store's checks.
- `ix_pool_entries_id` on `(id) INCLUDE (expires_at)`: whether an instance is a live entry of any
  pool, from the index alone (the primary key leads with the pool).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INSTANCE_RUNS = """
CREATE VIEW ledger.instance_runs AS
SELECT m.instance_id, m.run_id, m.expires_at
FROM ledger.run_mappings m
WHERE m.instance_id <> ''
  AND NOT EXISTS (
      SELECT 1 FROM ledger.runs r WHERE r.run_id = m.run_id AND r.terminal_status IS NOT NULL)
"""

# 0007's claim, its pick followed by the check of the picked instance (see above).
CLAIM = """
CREATE OR REPLACE FUNCTION ledger.pool_claim(
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
    v_passed text[] := '{}';
    v_id text;
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
        LOOP
            v_id := NULL;
            SELECT e.id INTO v_id FROM ledger.pool_entries e
            WHERE e.pool = p_pool AND e.version = p_version AND e.state = 'ready'
              AND e.ready_at >= v_oldest AND e.ready_at <= v_newest AND e.expires_at > v_now
              AND e.id <> ALL (v_passed)
            ORDER BY e.ready_at DESC, e.id
            LIMIT 1
            FOR UPDATE SKIP LOCKED;
            EXIT WHEN v_id IS NULL OR NOT EXISTS (
                SELECT 1 FROM ledger.instance_runs b
                WHERE b.instance_id = v_id AND b.run_id <> p_run_id AND b.expires_at > v_now);
            v_passed := v_passed || v_id;
        END LOOP;
        IF v_id IS NOT NULL THEN
            DELETE FROM ledger.pool_entries d WHERE d.pool = p_pool AND d.id = v_id;
            claimed := v_id;
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


def upgrade() -> None:
    op.create_index(
        "ix_run_mappings_instance_id",
        "run_mappings",
        ["instance_id"],
        unique=False,
        schema="ledger",
        if_not_exists=True,
    )
    op.create_index(
        "ix_pool_entries_id",
        "pool_entries",
        ["id"],
        unique=False,
        schema="ledger",
        postgresql_include=["expires_at"],
        if_not_exists=True,
    )
    op.execute(INSTANCE_RUNS.replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1))
    op.execute(CLAIM)


def downgrade() -> None:
    # 0007's claim exactly as shipped (its module name is not an identifier, hence importlib).
    shipped = importlib.import_module("ledger.migrations.versions.0007_claim_function")
    op.execute(shipped.CLAIM.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
    op.execute("DROP VIEW IF EXISTS ledger.instance_runs")
    op.drop_index("ix_pool_entries_id", table_name="pool_entries", schema="ledger", if_exists=True)
    op.drop_index("ix_run_mappings_instance_id", table_name="run_mappings", schema="ledger", if_exists=True)
