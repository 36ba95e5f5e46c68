"""Retention's trim remembers how far it went, so it never walks the events it already removed.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 01:00:00.000000

- `ledger.runs.events_trimmed_through`: every non-terminal event of the run at or below this seq
  has been trimmed by retention (0 = none). Adding it with a constant default is a catalog change
  only: no rewrite of `runs`, no lock held longer than the `ALTER`.
- `ledger.append_events` (same signature) trims only `seq > events_trimmed_through`, and moves the
  watermark in the update it makes anyway. The trim used to start at the run's first seq: a bitmap
  scan never marks dead index entries, so until vacuum came round every call paid again for every
  event trimmed before it, and a long run's batched appends slowed down as it grew.
- A read's `first_seq` is the least seq above the watermark, for the same reason.

A retention lowered later only moves the watermark up; one raised later never brings back what
is gone, and the watermark stays where it was (nothing below it exists to trim again).

SQL is written out literally here so that this migration stays frozen.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SIGNATURE = """
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
    v_terminal jsonb;{declare}
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
    END IF;{cutoff}
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
        play_name = COALESCE(r.play_name, v_terminal ->> 'play_name'){watermark}
    WHERE r.run_id = p_run_id
    RETURNING false, locked.last_seq + 1, r.last_seq, r.updated_at, r.status, r.play_name,
        r.terminal_status, r.terminal_result, r.terminal_error, r.terminal_total_rows,
        r.terminal_duration_ms, r.terminal_play_name, r.completed_at;
{trim}
    IF p_notify THEN
        -- Only the run and the seq it reached: a hint, readers re-read from their cursor.
        PERFORM pg_notify(p_channel, '{{"run_id":' || to_json(p_run_id)::text || ',"seq":' || v_last || '}}');
    END IF;
END
$$
"""

APPEND_EVENTS = _SIGNATURE.format(
    declare="\n    v_cutoff bigint := 0;",
    cutoff="""
    IF p_max_events > 0 THEN
        v_cutoff := v_last - p_max_events;
    END IF;""",
    watermark=",\n        events_trimmed_through = GREATEST(r.events_trimmed_through, v_cutoff)",
    trim="""    IF v_cutoff > locked.events_trimmed_through THEN
        -- The terminal event is kept past retention: it is how a reader learns how the run ended.
        -- Bounded below by the watermark: what lies there is gone, dead rows vacuum has yet to clear.
        DELETE FROM ledger.run_events AS e
        WHERE e.run_id = p_run_id AND e.run_created_at = locked.created_at
          AND e.seq > locked.events_trimmed_through AND e.seq <= v_cutoff AND e.type <> 'terminal';
    END IF;""",
)

# 0011's function, for the downgrade.
APPEND_EVENTS_0011 = _SIGNATURE.format(
    declare="",
    cutoff="",
    watermark="",
    trim="""    IF p_max_events > 0 AND v_last - p_max_events >= 1 THEN
        -- The terminal event is kept past retention: it is how a reader learns how the run ended.
        DELETE FROM ledger.run_events AS e
        WHERE e.run_id = p_run_id AND e.run_created_at = locked.created_at
          AND e.seq <= v_last - p_max_events AND e.type <> 'terminal';
    END IF;""",
)


def upgrade() -> None:
    op.execute("ALTER TABLE ledger.runs ADD COLUMN events_trimmed_through bigint DEFAULT 0 NOT NULL")
    op.execute(APPEND_EVENTS)


def downgrade() -> None:
    op.execute(APPEND_EVENTS_0011)
    op.execute("ALTER TABLE ledger.runs DROP COLUMN events_trimmed_through")
