-- The whole append in one round trip, the hot path of the ledger: locks the run, writes the batch
-- into the run's partition (`run_created_at` picks it), advances the run (a trailing `terminal`
-- event records its terminal state; appends to an ended run are refused and write nothing), trims
-- past `p_max_events` and notifies `p_channel`.
-- The trim moves the run's watermark `events_trimmed_through` to the cutoff on every append:
-- readers start above it, so a run shows exactly its newest `p_max_events` events after each call
-- (the terminal event is last, above any cutoff). The rows at or below it are deleted by chunk,
-- `trim_chunk` (1,000) seqs at a time: an append deletes, in one range, the whole chunks its move of
-- the watermark completed, so a run at its cap deletes once per 1,000 trimmed events instead of on
-- every call, and stores at most 999 rows below its watermark. The chunks are fixed multiples of
-- seq, so where deletion stands follows from the watermark alone: each row is deleted once, and no
-- delete walks the dead rows of the chunks before.
-- No row: no such run. `refused`: the run had ended, the row is its stored state. Otherwise the run
-- after the append and the batch's `first_seq`. `p_events` is a JSON array of [type, payload]
-- pairs, validated by the caller; `p_status` is the status the batch moves the run to (NULL: none),
-- `p_notify` is false when the caller's transaction has notified for this run already.
CREATE OR REPLACE FUNCTION ledger.append_events_v2(
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
    trim_chunk CONSTANT bigint := 1000;
    locked ledger.runs%ROWTYPE;
    v_ts timestamptz;
    v_last bigint;
    v_terminal jsonb;
    v_trimmed bigint;
    v_deleted_from bigint;
    v_deleted_to bigint;
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
    v_trimmed := locked.events_trimmed_through;
    IF p_max_events > 0 THEN
        v_trimmed := GREATEST(v_trimmed, v_last - p_max_events);
    END IF;
    -- The run's created_at picks the partition: the insert and the delete touch that one alone.
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
        play_name = COALESCE(r.play_name, v_terminal ->> 'play_name'),
        events_trimmed_through = v_trimmed
    WHERE r.run_id = p_run_id
    RETURNING false, locked.last_seq + 1, r.last_seq, r.updated_at, r.status, r.play_name,
        r.terminal_status, r.terminal_result, r.terminal_error, r.terminal_total_rows,
        r.terminal_duration_ms, r.terminal_play_name, r.completed_at;
    v_deleted_from := locked.events_trimmed_through - locked.events_trimmed_through % trim_chunk;
    v_deleted_to := v_trimmed - v_trimmed % trim_chunk;
    IF v_deleted_to > v_deleted_from THEN
        -- The terminal event is never deleted: it is how a reader learns how the run ended.
        DELETE FROM ledger.run_events AS e
        WHERE e.run_id = p_run_id AND e.run_created_at = locked.created_at
          AND e.seq > v_deleted_from AND e.seq <= v_deleted_to AND e.type <> 'terminal';
    END IF;
    IF p_notify THEN
        -- Only the run and the seq it reached: a hint, readers re-read from their cursor.
        PERFORM pg_notify(p_channel, '{"run_id":' || to_json(p_run_id)::text || ',"seq":' || v_last || '}');
    END IF;
END
$$;
