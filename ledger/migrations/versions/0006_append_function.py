"""The append function: one call locks a run, appends a batch, advances the run, trims and notifies.

`ledger.append_events` is the whole append in one round trip (the caller runs it in autocommit, or
inside its own transaction after locking the run): before it, an append was BEGIN, a locking
SELECT, the insert statement and COMMIT. See `ledger.runlog.store` for how it is called.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 05:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SIGNATURE = "ledger.append_events(text, jsonb, text, bigint, timestamptz, text, boolean)"

# No row: no such run. `refused`: the run is terminal and nothing was written; the row then holds
# its stored terminal state. Otherwise the row is the run after the append and `first_seq` the
# batch's first seq. The batch is a JSON array of [type, payload] pairs, validated by the caller;
# `p_status` is the run status the batch moves the run to (NULL: none). A trailing `terminal` event
# records the run's terminal state: appends to a terminal run are refused, so the first one stays.
# The inserted rows are visible to the trimming DELETE (a batch larger than the retention trims
# itself). `p_notify` is false when the caller's transaction has already notified for this run.
CREATE_APPEND_EVENTS = """
CREATE FUNCTION ledger.append_events(
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


def upgrade() -> None:
    op.execute(CREATE_APPEND_EVENTS)


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {SIGNATURE}")
