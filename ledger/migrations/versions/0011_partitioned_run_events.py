"""The event log partitioned by the run's creation time; retention can then drop whole partitions.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 22:00:00.000000

- `ledger.run_events` becomes `PARTITION BY RANGE (run_created_at)`: each event carries its run's
  `created_at` (the append reads it off the run row it locks anyway), the primary key is
  `(run_id, seq, run_created_at)`, and every run-scoped statement names both, so it reads or
  writes one partition. Partitions live in the schema `ledger_partitions`, one per UTC day or
  month (`ledger.run_event_partitioning.period`, `day` unless `LEDGER_PARTITION_INTERVAL` said
  `month` when this ran; `ledger db partitions --interval` changes it for partitions made from
  then on). There is no default partition: it would forbid `DETACH ... CONCURRENTLY`.
- `ledger.ensure_run_events_partition(at)` returns the partition holding runs created at `at`,
  creating it first when missing (a plain table, then `ATTACH`: that takes `SHARE UPDATE
  EXCLUSIVE` on the parent, which appends and reads never wait on, where `CREATE TABLE ...
  PARTITION OF` would take `ACCESS EXCLUSIVE`). A statement trigger on `runs` calls it for the
  runs each insert makes (opening a run, or any insert), so every run has its partition; the
  watchdog and `ledger db partitions` call it ahead of time. `ledger.run_event_partitions` lists the
  partitions with their bounds.
- The event log keeps no foreign key to `ledger.runs`: detaching or dropping a partition would
  then lock `runs` (its referential triggers live there), stalling every append for the moment.
  The append function is the only writer and locks the run first; a row trigger on `runs` deletes
  a deleted run's events (from its one partition), and one moves them if a run's `created_at`
  is ever changed by hand.
- `ledger.append_events` (same signature as in 0006) writes `run_created_at` and trims within
  the run's partition; `run_overview` joins the last event by `(run_id, seq, run_created_at)`.

On an empty event log (a fresh database) the table is simply replaced. A filled one is moved
aside as `ledger_partitions.run_events_unpartitioned` (a rename: instant) and its rows are
copied over in batches by `ledger db convert`; `ledger serve` refuses to start until that is
done. Appends go to the new table from this revision on, whoever calls the function.

The downgrade copies every event back into one plain table (an offline step: it holds the
tables for the whole copy).

SQL is written out literally here so that this migration stays frozen.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EVENT_TYPE_CHECK = (
    "type IN ('status', 'log', 'progress', 'terminal', 'step.started', 'step.progress', "
    "'step.completed', 'dataset.lifecycle', 'activity.observed', 'log.gap')"
)

PARTITIONING = """
CREATE TABLE ledger.run_event_partitioning (
    id boolean DEFAULT true NOT NULL,
    period text NOT NULL,
    CONSTRAINT pk_run_event_partitioning PRIMARY KEY (id),
    CONSTRAINT ck_run_event_partitioning_one_row CHECK (id),
    CONSTRAINT ck_run_event_partitioning_period CHECK (period IN ('day', 'month'))
)
"""

PARTITIONED_TABLE = f"""
CREATE TABLE ledger.run_events (
    run_id text NOT NULL,
    seq bigint NOT NULL,
    run_created_at timestamptz NOT NULL,
    type text NOT NULL,
    ts timestamptz DEFAULT now() NOT NULL,
    payload jsonb DEFAULT '{{}}'::jsonb NOT NULL,
    CONSTRAINT pk_run_events PRIMARY KEY (run_id, seq, run_created_at),
    CONSTRAINT ck_run_events_seq_positive CHECK (seq >= 1),
    CONSTRAINT ck_run_events_type CHECK ({EVENT_TYPE_CHECK})
) PARTITION BY RANGE (run_created_at)
"""

# The bounds as Postgres prints them back (in the session's time zone, which reads back exactly).
# `to_regclass` is evaluated when the view is read, so the view follows whichever table is
# `ledger.run_events` now. `detach_pending`: a concurrent detach was interrupted; it is finished
# (FINALIZE) before the partition is dropped.
PARTITIONS_VIEW = """
CREATE VIEW ledger.run_event_partitions AS
SELECT c.relname::text AS name, b[1]::timestamptz AS from_at, b[2]::timestamptz AS to_at,
       i.inhdetachpending AS detach_pending
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
CROSS JOIN LATERAL regexp_match(
    pg_get_expr(c.relpartbound, c.oid), 'FROM \\(''([^'']*)''\\) TO \\(''([^'']*)''\\)'
) AS b
WHERE i.inhparent = to_regclass('ledger.run_events')
"""

# The fast path (the partition this period would have exists) is one catalog lookup: opening a run
# pays that. Otherwise, under a transaction-scoped advisory lock (two openers, one creation), a
# partition already covering `p_at` is the answer (made under another period), else one is made:
# the period's range, clipped to the neighbours so that a change of period never overlaps. The
# period boundaries are UTC days or months whatever the session's time zone.
ENSURE_PARTITION = """
CREATE FUNCTION ledger.ensure_run_events_partition(p_at timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_period text;
    v_from timestamptz;
    v_to timestamptz;
    v_name text;
BEGIN
    SELECT p.period INTO v_period FROM ledger.run_event_partitioning p;
    v_period := COALESCE(v_period, 'day');
    v_from := date_trunc(v_period, p_at, 'UTC');
    v_to := ((v_from AT TIME ZONE 'UTC') + ('1 ' || v_period)::interval) AT TIME ZONE 'UTC';
    v_name := 'run_events_' || to_char(v_from AT TIME ZONE 'UTC', 'YYYYMMDD')
        || '_' || to_char(v_to AT TIME ZONE 'UTC', 'YYYYMMDD');
    IF EXISTS (
        SELECT 1 FROM pg_class c
        WHERE c.oid = to_regclass('ledger_partitions.' || quote_ident(v_name)) AND c.relispartition
    ) THEN
        RETURN v_name;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('ledger.run_events partitions'));
    SELECT p.name INTO v_name FROM ledger.run_event_partitions p
    WHERE p.from_at <= p_at AND p_at < p.to_at;
    IF FOUND THEN
        RETURN v_name;
    END IF;
    SELECT greatest(v_from, max(p.to_at)) INTO v_from
    FROM ledger.run_event_partitions p WHERE p.to_at <= p_at;
    SELECT least(v_to, min(p.from_at)) INTO v_to
    FROM ledger.run_event_partitions p WHERE p.from_at > p_at;
    v_name := 'run_events_' || to_char(v_from AT TIME ZONE 'UTC', 'YYYYMMDD')
        || '_' || to_char(v_to AT TIME ZONE 'UTC', 'YYYYMMDD');
    EXECUTE format(
        'CREATE TABLE ledger_partitions.%I (LIKE ledger.run_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
        v_name
    );
    EXECUTE format(
        'ALTER TABLE ledger.run_events ATTACH PARTITION ledger_partitions.%I FOR VALUES FROM (%L) TO (%L)',
        v_name, v_from, v_to
    );
    RETURN v_name;
END
$$
"""

# A deleted run takes its events along (what the foreign key's cascade did), from its partition.
DELETE_WITH_RUN = """
CREATE FUNCTION ledger.run_events_follow_run() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM ledger.run_events e WHERE e.run_id = OLD.run_id AND e.run_created_at = OLD.created_at;
    ELSIF NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        PERFORM ledger.ensure_run_events_partition(NEW.created_at);
        UPDATE ledger.run_events e SET run_created_at = NEW.created_at
        WHERE e.run_id = OLD.run_id AND e.run_created_at = OLD.created_at;
    END IF;
    RETURN NULL;
END
$$
"""

# Every run has its partition from the statement that inserts it on, however it is inserted: one
# call per day of the new runs (a bulk insert of a million runs makes a handful), each one catalog
# lookup when the partition exists already (the watchdog makes them ahead).
PARTITIONS_FOR_NEW_RUNS = """
CREATE FUNCTION ledger.run_events_partitions_for_new_runs() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ledger.ensure_run_events_partition(n.created_at)
    FROM (
        SELECT DISTINCT ON (date_trunc('day', created_at, 'UTC')) created_at FROM new_runs
        ORDER BY date_trunc('day', created_at, 'UTC'), created_at
    ) n;
    RETURN NULL;
END
$$
"""

TRIGGERS = (
    "CREATE TRIGGER runs_make_partitions AFTER INSERT ON ledger.runs REFERENCING NEW TABLE AS new_runs"
    " FOR EACH STATEMENT EXECUTE FUNCTION ledger.run_events_partitions_for_new_runs()",
    "CREATE TRIGGER runs_delete_events AFTER DELETE ON ledger.runs"
    " FOR EACH ROW EXECUTE FUNCTION ledger.run_events_follow_run()",
    "CREATE TRIGGER runs_move_events AFTER UPDATE OF created_at ON ledger.runs"
    " FOR EACH ROW EXECUTE FUNCTION ledger.run_events_follow_run()",
)

APPEND_EVENTS = """
CREATE OR REPLACE FUNCTION ledger.append_events(
    p_run_id text, p_events jsonb, p_status text, p_max_events bigint, p_now timestamptz,
    p_channel text, p_notify boolean
)
RETURNS TABLE (
    refused boolean, first_seq bigint, last_seq bigint, updated_at timestamptz, status text,
    play_name text, terminal_status text, terminal_result jsonb, terminal_error text,
    terminal_total_rows bigint, terminal_duration_ms bigint, terminal_play_name text,
    completed_at timestamptz
)
LANGUAGE plpgsql
AS $$
DECLARE
    locked ledger.runs%ROWTYPE;
    v_ts timestamptz;
    v_last bigint;
    v_terminal jsonb;
BEGIN
    SELECT * INTO locked FROM ledger.runs AS r WHERE r.run_id = p_run_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF locked.terminal_status IS NOT NULL THEN
        RETURN QUERY SELECT true, NULL::bigint, locked.last_seq, locked.updated_at, locked.status,
            locked.play_name, locked.terminal_status, locked.terminal_result, locked.terminal_error,
            locked.terminal_total_rows, locked.terminal_duration_ms, locked.terminal_play_name,
            locked.completed_at;
        RETURN;
    END IF;
    -- Read after the lock, so timestamps are ordered like seqs.
    v_ts := COALESCE(p_now, clock_timestamp());
    v_last := locked.last_seq + jsonb_array_length(p_events);
    IF p_events -> -1 ->> 0 = 'terminal' THEN
        v_terminal := p_events -> -1 -> 1;
    END IF;
    -- The run's created_at picks the partition: the insert and the trim touch that one alone.
    INSERT INTO ledger.run_events (run_id, seq, run_created_at, type, ts, payload)
    SELECT p_run_id, locked.last_seq + e.ord, locked.created_at, e.item ->> 0, v_ts, e.item -> 1
    FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(item, ord);
    RETURN QUERY UPDATE ledger.runs AS r
    SET last_seq = v_last, updated_at = v_ts, status = COALESCE(p_status, r.status),
        terminal_status = v_terminal ->> 'status',
        terminal_result = NULLIF(v_terminal -> 'result', 'null'::jsonb),
        terminal_error = v_terminal ->> 'error',
        terminal_total_rows = (v_terminal ->> 'total_rows')::bigint,
        terminal_duration_ms = (v_terminal ->> 'duration_ms')::bigint,
        terminal_play_name = v_terminal ->> 'play_name',
        completed_at = CASE WHEN v_terminal IS NOT NULL THEN v_ts END,
        play_name = COALESCE(r.play_name, v_terminal ->> 'play_name')
    WHERE r.run_id = p_run_id
    RETURNING false, locked.last_seq + 1, r.last_seq, r.updated_at, r.status, r.play_name,
        r.terminal_status, r.terminal_result, r.terminal_error, r.terminal_total_rows,
        r.terminal_duration_ms, r.terminal_play_name, r.completed_at;
    IF p_max_events > 0 AND v_last - p_max_events >= 1 THEN
        -- The terminal event is kept past retention: it is how a reader learns how the run ended.
        DELETE FROM ledger.run_events AS e
        WHERE e.run_id = p_run_id AND e.run_created_at = locked.created_at
          AND e.seq <= v_last - p_max_events AND e.type <> 'terminal';
    END IF;
    IF p_notify THEN
        -- Only the run and the seq it reached: a hint, readers re-read from their cursor.
        PERFORM pg_notify(p_channel, '{"run_id":' || to_json(p_run_id)::text || ',"seq":' || v_last || '}');
    END IF;
END
$$
"""

# 0006's function, for the downgrade.
APPEND_EVENTS_0006 = """
CREATE OR REPLACE FUNCTION ledger.append_events(
    p_run_id text, p_events jsonb, p_status text, p_max_events bigint, p_now timestamptz,
    p_channel text, p_notify boolean
)
RETURNS TABLE (
    refused boolean, first_seq bigint, last_seq bigint, updated_at timestamptz, status text,
    play_name text, terminal_status text, terminal_result jsonb, terminal_error text,
    terminal_total_rows bigint, terminal_duration_ms bigint, terminal_play_name text,
    completed_at timestamptz
)
LANGUAGE plpgsql
AS $$
DECLARE
    locked ledger.runs%ROWTYPE;
    v_ts timestamptz;
    v_last bigint;
    v_terminal jsonb;
BEGIN
    SELECT * INTO locked FROM ledger.runs AS r WHERE r.run_id = p_run_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF locked.terminal_status IS NOT NULL THEN
        RETURN QUERY SELECT true, NULL::bigint, locked.last_seq, locked.updated_at, locked.status,
            locked.play_name, locked.terminal_status, locked.terminal_result, locked.terminal_error,
            locked.terminal_total_rows, locked.terminal_duration_ms, locked.terminal_play_name,
            locked.completed_at;
        RETURN;
    END IF;
    -- Read after the lock, so timestamps are ordered like seqs.
    v_ts := COALESCE(p_now, clock_timestamp());
    v_last := locked.last_seq + jsonb_array_length(p_events);
    IF p_events -> -1 ->> 0 = 'terminal' THEN
        v_terminal := p_events -> -1 -> 1;
    END IF;
    INSERT INTO ledger.run_events (run_id, seq, type, ts, payload)
    SELECT p_run_id, locked.last_seq + e.ord, e.item ->> 0, v_ts, e.item -> 1
    FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(item, ord);
    RETURN QUERY UPDATE ledger.runs AS r
    SET last_seq = v_last, updated_at = v_ts, status = COALESCE(p_status, r.status),
        terminal_status = v_terminal ->> 'status',
        terminal_result = NULLIF(v_terminal -> 'result', 'null'::jsonb),
        terminal_error = v_terminal ->> 'error',
        terminal_total_rows = (v_terminal ->> 'total_rows')::bigint,
        terminal_duration_ms = (v_terminal ->> 'duration_ms')::bigint,
        terminal_play_name = v_terminal ->> 'play_name',
        completed_at = CASE WHEN v_terminal IS NOT NULL THEN v_ts END,
        play_name = COALESCE(r.play_name, v_terminal ->> 'play_name')
    WHERE r.run_id = p_run_id
    RETURNING false, locked.last_seq + 1, r.last_seq, r.updated_at, r.status, r.play_name,
        r.terminal_status, r.terminal_result, r.terminal_error, r.terminal_total_rows,
        r.terminal_duration_ms, r.terminal_play_name, r.completed_at;
    IF p_max_events > 0 AND v_last - p_max_events >= 1 THEN
        -- The terminal event is kept past retention: it is how a reader learns how the run ended.
        DELETE FROM ledger.run_events AS e
        WHERE e.run_id = p_run_id AND e.seq <= v_last - p_max_events AND e.type <> 'terminal';
    END IF;
    IF p_notify THEN
        -- Only the run and the seq it reached: a hint, readers re-read from their cursor.
        PERFORM pg_notify(p_channel, '{"run_id":' || to_json(p_run_id)::text || ',"seq":' || v_last || '}');
    END IF;
END
$$
"""

# `run_overview` as 0002 wrote it, but for the join on the last event: `{event_join}`.
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
LEFT JOIN ledger.run_events e ON {event_join}
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
             ELSE '{{}}'::jsonb END
    ) AS n
) s ON true
"""
JOIN_PARTITIONED = "e.run_id = r.run_id AND e.seq = r.last_seq AND e.run_created_at = r.created_at"
JOIN_0002 = "e.run_id = r.run_id AND e.seq = r.last_seq"

# The table as 0001 made it, for the downgrade.
FLAT_TABLE = f"""
CREATE TABLE ledger.run_events (
    run_id text NOT NULL,
    seq bigint NOT NULL,
    type text NOT NULL,
    ts timestamptz DEFAULT now() NOT NULL,
    payload jsonb DEFAULT '{{}}'::jsonb NOT NULL,
    CONSTRAINT pk_run_events PRIMARY KEY (run_id, seq),
    CONSTRAINT fk_run_events_run_id_runs FOREIGN KEY (run_id)
        REFERENCES ledger.runs (run_id) ON DELETE CASCADE,
    CONSTRAINT ck_run_events_seq_positive CHECK (seq >= 1),
    CONSTRAINT ck_run_events_type CHECK ({EVENT_TYPE_CHECK})
)
"""


# Only running runs can be appended to: they are few, found through the partial index of running
# runs, so this holds the upgrade's locks for milliseconds, not for a scan of every run (the
# conversion makes the partitions of the others before it copies their events).
EXISTING_PERIODS = """
SELECT ledger.ensure_run_events_partition(p.at)
FROM (
    SELECT DISTINCT date_trunc((SELECT period FROM ledger.run_event_partitioning), created_at, 'UTC') AS at
    FROM ledger.runs WHERE terminal_status IS NULL
) p
ORDER BY p.at
"""


def _grant_reader(relation: str) -> str:
    # The role is created by revision 0002 but may have been dropped by hand since.
    return f"""
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ledger_reader') THEN
        GRANT SELECT ON {relation} TO ledger_reader;
    END IF;
END
$$
"""


def _period() -> str:
    # The setting this database starts with; `ledger db partitions --interval` changes it later.
    raw = os.environ.get("LEDGER_PARTITION_INTERVAL", "").strip().lower()
    return "month" if raw == "month" else "day"


def upgrade() -> None:
    conn = op.get_bind()
    filled = conn.exec_driver_sql("SELECT EXISTS (SELECT 1 FROM ledger.run_events)").scalar()
    op.execute("CREATE SCHEMA IF NOT EXISTS ledger_partitions")
    op.execute(PARTITIONING)
    op.execute(f"INSERT INTO ledger.run_event_partitioning (period) VALUES ('{_period()}')")
    op.execute("DROP VIEW ledger.run_overview")
    if filled:
        # Copied over by `ledger db convert`, batch by batch; until then `ledger serve` refuses.
        op.execute("ALTER TABLE ledger.run_events SET SCHEMA ledger_partitions")
        op.execute("ALTER TABLE ledger_partitions.run_events RENAME TO run_events_unpartitioned")
    else:
        op.execute("DROP TABLE ledger.run_events")
    op.execute(PARTITIONED_TABLE)
    op.execute(PARTITIONS_VIEW)
    op.execute(ENSURE_PARTITION)
    op.execute(DELETE_WITH_RUN)
    op.execute(PARTITIONS_FOR_NEW_RUNS)
    for trigger in TRIGGERS:
        op.execute(trigger)
    op.execute(APPEND_EVENTS)
    op.execute(RUN_OVERVIEW.format(event_join=JOIN_PARTITIONED))
    # A partition for every period running runs were created in, so their appends go on; today's
    # and the next one, so the first new runs need not create one.
    op.execute(EXISTING_PERIODS)
    op.execute("SELECT ledger.ensure_run_events_partition(now())")
    op.execute(
        "SELECT ledger.ensure_run_events_partition("
        "(SELECT to_at FROM ledger.run_event_partitions WHERE from_at <= now() AND now() < to_at))"
    )
    for relation in ("ledger.run_events", "ledger.run_overview", "ledger.run_event_partitions"):
        op.execute(_grant_reader(relation))
    op.execute(_grant_reader("ledger.run_event_partitioning"))


def downgrade() -> None:
    op.execute("DROP VIEW ledger.run_overview")
    op.execute("DROP VIEW ledger.run_event_partitions")
    for name in ("runs_move_events", "runs_delete_events", "runs_make_partitions"):
        op.execute(f"DROP TRIGGER {name} ON ledger.runs")
    op.execute("DROP FUNCTION ledger.run_events_follow_run()")
    op.execute("DROP FUNCTION ledger.run_events_partitions_for_new_runs()")
    op.execute("DROP FUNCTION ledger.ensure_run_events_partition(timestamptz)")
    op.execute("ALTER TABLE ledger.run_events RENAME TO run_events_partitioned")
    op.execute("ALTER INDEX ledger.pk_run_events RENAME TO pk_run_events_partitioned")
    op.execute(FLAT_TABLE)
    op.execute(
        "INSERT INTO ledger.run_events (run_id, seq, type, ts, payload)"
        " SELECT e.run_id, e.seq, e.type, e.ts, e.payload FROM ledger.run_events_partitioned e"
        " JOIN ledger.runs r ON r.run_id = e.run_id"
    )
    conn = op.get_bind()
    leftover = conn.exec_driver_sql(
        "SELECT to_regclass('ledger_partitions.run_events_unpartitioned') IS NOT NULL"
    ).scalar()
    if leftover:
        # A conversion that never finished: its rows not copied yet come back too.
        op.execute(
            "INSERT INTO ledger.run_events (run_id, seq, type, ts, payload)"
            " SELECT run_id, seq, type, ts, payload FROM ledger_partitions.run_events_unpartitioned"
            " ON CONFLICT DO NOTHING"
        )
        op.execute("DROP TABLE ledger_partitions.run_events_unpartitioned")
    op.execute("DROP TABLE ledger.run_events_partitioned")
    op.execute("DROP SCHEMA ledger_partitions CASCADE")
    op.execute(APPEND_EVENTS_0006)
    op.execute(RUN_OVERVIEW.format(event_join=JOIN_0002))
    op.execute(_grant_reader("ledger.run_events"))
    op.execute(_grant_reader("ledger.run_overview"))
    op.execute("DROP TABLE ledger.run_event_partitioning")
