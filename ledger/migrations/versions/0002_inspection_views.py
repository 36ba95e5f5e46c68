"""SQL inspection: views a person can query with psql, and the read-only role `ledger_reader`.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 15:30:00.000000

The view SQL is written out literally here (not imported from the package) so that this migration
stays frozen: a later change to a view is a new migration.

- `run_overview`: one row per run, with its age, terminal state and row totals summed over the
  steps of the live per-node progress snapshot (`runs.live_node_progress`).
- `step_progress`: one row per key of a run's `live_node_progress` (epoch-ms times as timestamptz).
- `pool_availability`: per pool and version, unexpired entries split into `available` (ready and
  not stale: ready at most 7 min ago), `warming` (not ready yet, or ready_at still ahead) and `stale` (ready too long ago;
  neither available nor warming, the next pool GC deletes them).
- `stalled_runs`: non-terminal runs with no event for 5 minutes (the watchdog's default).

`ledger_reader` is a NOLOGIN role (grant it to a login role): USAGE on the schema and SELECT on its
tables and views, nothing else. Roles are cluster-wide, so it is created only if absent, and the
downgrade drops it only when no other database still grants it anything.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Node progress values are the reporter's JSON: a count is used only when it is a JSON number, so a
# malformed snapshot shows as NULL instead of breaking the view for every run.
RUN_OVERVIEW = """
CREATE VIEW ledger.run_overview AS
SELECT
    r.run_id,
    r.status,
    coalesce(r.play_name, r.terminal_play_name) AS play_name,
    r.created_at,
    r.updated_at,
    now() - r.created_at AS age,
    now() - r.updated_at AS idle,
    r.last_seq,
    e.type AS last_event_type,
    r.terminal_status,
    r.terminal_error,
    r.terminal_total_rows,
    r.terminal_duration_ms,
    r.completed_at,
    coalesce(s.steps_total, 0) AS steps_total,
    coalesce(s.steps_done, 0) AS steps_done,
    coalesce(s.rows_completed, 0) AS rows_completed,
    coalesce(s.rows_failed, 0) AS rows_failed,
    coalesce(s.rows_total, 0) AS rows_total
FROM ledger.runs r
LEFT JOIN ledger.run_events e ON e.run_id = r.run_id AND e.seq = r.last_seq
LEFT JOIN LATERAL (
    SELECT
        count(*) AS steps_total,
        count(*) FILTER (WHERE jsonb_typeof(n.value -> 'completed_at') = 'number') AS steps_done,
        sum(CASE WHEN jsonb_typeof(n.value -> 'completed') = 'number'
                 THEN (n.value ->> 'completed')::numeric END)::bigint AS rows_completed,
        sum(CASE WHEN jsonb_typeof(n.value -> 'failed') = 'number'
                 THEN (n.value ->> 'failed')::numeric END)::bigint AS rows_failed,
        sum(CASE WHEN jsonb_typeof(n.value -> 'total') = 'number'
                 THEN (n.value ->> 'total')::numeric END)::bigint AS rows_total
    FROM jsonb_each(
        CASE WHEN jsonb_typeof(r.live_node_progress) = 'object' THEN r.live_node_progress
             ELSE '{}'::jsonb END
    ) AS n
) s ON true
"""

STEP_PROGRESS = """
CREATE VIEW ledger.step_progress AS
SELECT
    r.run_id,
    n.key AS node_id,
    CASE WHEN jsonb_typeof(n.value -> 'started_at') = 'number'
         THEN to_timestamp((n.value ->> 'started_at')::numeric / 1000) END AS started_at,
    CASE WHEN jsonb_typeof(n.value -> 'completed_at') = 'number'
         THEN to_timestamp((n.value ->> 'completed_at')::numeric / 1000) END AS completed_at,
    CASE WHEN jsonb_typeof(n.value -> 'completed') = 'number'
         THEN (n.value ->> 'completed')::numeric::bigint END AS completed,
    CASE WHEN jsonb_typeof(n.value -> 'failed') = 'number'
         THEN (n.value ->> 'failed')::numeric::bigint END AS failed,
    CASE WHEN jsonb_typeof(n.value -> 'total') = 'number'
         THEN (n.value ->> 'total')::numeric::bigint END AS total,
    CASE WHEN jsonb_typeof(n.value -> 'message') = 'string' THEN n.value ->> 'message' END AS message,
    CASE WHEN jsonb_typeof(n.value -> 'updated_at') = 'number'
         THEN to_timestamp((n.value ->> 'updated_at')::numeric / 1000) END AS updated_at
FROM ledger.runs r
CROSS JOIN LATERAL jsonb_each(
    CASE WHEN jsonb_typeof(r.live_node_progress) = 'object' THEN r.live_node_progress
         ELSE '{}'::jsonb END
) AS n
"""

# The pool's default limits: an entry ready for more than 7 minutes is stale (its instance is presumed
# recycled, so it is never claimed) and an expired entry is not counted at all.
POOL_AVAILABILITY = """
CREATE VIEW ledger.pool_availability AS
SELECT
    p.pool,
    p.version,
    count(*) FILTER (
        WHERE p.state = 'ready' AND p.ready_at BETWEEN now() - interval '7 minutes' AND now()
    ) AS available,
    -- A ready_at in the future (an add that announced it) is not claimable yet: warming, as the API says.
    count(*) FILTER (WHERE p.state = 'warming' OR p.ready_at > now()) AS warming,
    count(*) FILTER (
        WHERE p.state = 'ready' AND p.ready_at < now() - interval '7 minutes'
    ) AS stale,
    max(p.ready_at) FILTER (
        WHERE p.state = 'ready' AND p.ready_at BETWEEN now() - interval '7 minutes' AND now()
    ) AS newest_ready_at
FROM ledger.pool_entries p
WHERE p.expires_at > now()
GROUP BY p.pool, p.version
"""

# The watchdog's default stall limit: a non-terminal run with no event for 5 minutes is failed.
STALLED_RUNS = """
CREATE VIEW ledger.stalled_runs AS
SELECT
    r.run_id,
    r.status,
    coalesce(r.play_name, r.terminal_play_name) AS play_name,
    r.updated_at,
    now() - r.updated_at AS idle,
    r.last_seq
FROM ledger.runs r
WHERE r.terminal_status IS NULL AND r.updated_at < now() - interval '5 minutes'
"""

VIEWS = ("run_overview", "step_progress", "pool_availability", "stalled_runs")

# Two databases migrating at once may race to create the cluster-wide role: either error means
# it exists now.
CREATE_READER_ROLE = """
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ledger_reader') THEN
        CREATE ROLE ledger_reader NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$
"""

GRANTS = (
    "GRANT USAGE ON SCHEMA ledger TO ledger_reader",
    "GRANT SELECT ON ALL TABLES IN SCHEMA ledger TO ledger_reader",
)

# The role may be gone already (dropped by hand): then there is nothing to revoke.
REVOKE_READER = """
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ledger_reader') THEN
        REVOKE ALL ON ALL TABLES IN SCHEMA ledger FROM ledger_reader;
        REVOKE ALL ON SCHEMA ledger FROM ledger_reader;
    END IF;
END
$$
"""

# Another database on the same server may still grant the role something (its own migrated
# schema): then the role stays, it belongs to that database too.
DROP_READER_ROLE = """
DO $$
BEGIN
    DROP ROLE IF EXISTS ledger_reader;
EXCEPTION WHEN dependent_objects_still_exist THEN
    NULL;
END
$$
"""


def upgrade() -> None:
    for statement in (RUN_OVERVIEW, STEP_PROGRESS, POOL_AVAILABILITY, STALLED_RUNS):
        op.execute(statement)
    op.execute(CREATE_READER_ROLE)
    for statement in GRANTS:
        op.execute(statement)


def downgrade() -> None:
    op.execute(REVOKE_READER)
    for view in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS ledger.{view}")
    op.execute(DROP_READER_ROLE)
