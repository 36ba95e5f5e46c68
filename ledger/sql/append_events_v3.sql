-- The whole append in one round trip, the hot path of the ledger: advances the run with the
-- statement that locks it (one `UPDATE ... RETURNING`, no lock statement before it: a lock taken
-- apart cost its own WAL record and statement), writes the batch into the run's partition
-- (`run_created_at` picks it) under the seqs it returned, trims past `p_max_events` and notifies
-- `p_channel`. A trailing `terminal` event records the run's terminal state; appends to an ended
-- run are refused and write nothing. With `p_ingest`, the status upload's ingestion state is
-- written by the same statement (a round trip less per upload).
-- Timestamps are ordered like seqs: the clock is read in the UPDATE's SET list, which Postgres
-- evaluates again on the newest row version when the UPDATE waited for another appender's commit.
-- The trim moves the run's watermark `events_trimmed_through` to the cutoff on every append:
-- readers start above it, so a run shows exactly its newest `p_max_events` events after each call
-- (the terminal event is last, above any cutoff). The rows at or below it are deleted by chunk,
-- `trim_chunk` (1,000) seqs at a time: an append deletes, in one range, the whole chunks its move of
-- the watermark completed, so a run at its cap deletes once per 1,000 trimmed events instead of on
-- every call, and stores at most 999 rows below its watermark. The chunks are fixed multiples of
-- seq, so where deletion stands follows from the watermark alone. The watermark before the move is
-- read (only once a chunk may be complete) by the UPDATE as of its snapshot, never above the one it
-- replaced, since the watermark only grows: no chunk is ever missed. It is the one replaced unless
-- the UPDATE waited for a concurrent appender; then it may be lower, and a delete may walk again
-- the chunk that appender has just deleted. Otherwise no delete walks the dead rows of the chunks
-- before.
-- No row: no such run. `refused`: the run had ended, the row is its stored state. Otherwise the run
-- after the append and the batch's `first_seq`. `p_events` is a JSON array of [type, payload]
-- pairs, validated by the caller; `p_status` is the status the call moves the run to (NULL: none),
-- `p_notify` is false when the caller's transaction has notified for this run already. `p_ingest`
-- (NULL: left alone) is an object of the ingestion columns `producer_attempt`, `last_upload_seq`,
-- `live_log_count`, `live_node_progress`, `activity_watermarks` and `replay_digest`, each written.
CREATE OR REPLACE FUNCTION ledger.append_events_v3(
    p_run_id text, p_events jsonb, p_status text, p_max_events bigint, p_now timestamptz,
    p_channel text, p_notify boolean, p_ingest jsonb
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
    v_count CONSTANT bigint := jsonb_array_length(p_events);
    v_terminal jsonb;
    v_ended_at timestamptz;
    v_created_at timestamptz;
    v_trimmed bigint;
    v_trimmed_before bigint;
    v_deleted_to bigint;
BEGIN
    IF p_events -> -1 ->> 0 = 'terminal' THEN
        v_terminal := p_events -> -1 -> 1;
        -- A run ends once: its ending append locks it first, so the one clock reading both its
        -- `updated_at` and its `completed_at` take is made after the lock, as the SET list's is.
        PERFORM FROM ledger.runs AS r WHERE r.run_id = p_run_id FOR UPDATE;
        v_ended_at := COALESCE(p_now, clock_timestamp());
    END IF;
    UPDATE ledger.runs AS r
    SET last_seq = r.last_seq + v_count,
        updated_at = COALESCE(v_ended_at, p_now, clock_timestamp()),
        status = COALESCE(p_status, r.status),
        terminal_status = v_terminal ->> 'status',
        terminal_result = NULLIF(v_terminal -> 'result', 'null'::jsonb),
        terminal_error = v_terminal ->> 'error',
        terminal_total_rows = (v_terminal ->> 'total_rows')::bigint,
        terminal_duration_ms = (v_terminal ->> 'duration_ms')::bigint,
        terminal_play_name = v_terminal ->> 'play_name',
        completed_at = v_ended_at,
        play_name = COALESCE(r.play_name, v_terminal ->> 'play_name'),
        events_trimmed_through = CASE WHEN p_max_events > 0
            THEN GREATEST(r.events_trimmed_through, r.last_seq + v_count - p_max_events)
            ELSE r.events_trimmed_through END,
        producer_attempt = COALESCE((p_ingest ->> 'producer_attempt')::integer, r.producer_attempt),
        last_upload_seq = COALESCE((p_ingest ->> 'last_upload_seq')::bigint, r.last_upload_seq),
        live_log_count = COALESCE((p_ingest ->> 'live_log_count')::bigint, r.live_log_count),
        live_node_progress = COALESCE(p_ingest -> 'live_node_progress', r.live_node_progress),
        activity_watermarks = COALESCE(p_ingest -> 'activity_watermarks', r.activity_watermarks),
        replay_digest = CASE WHEN p_ingest IS NULL THEN r.replay_digest ELSE p_ingest ->> 'replay_digest' END
    WHERE r.run_id = p_run_id AND r.terminal_status IS NULL
    RETURNING false, r.last_seq - v_count + 1, r.last_seq, r.updated_at, r.status, r.play_name,
        r.terminal_status, r.terminal_result, r.terminal_error, r.terminal_total_rows,
        r.terminal_duration_ms, r.terminal_play_name, r.completed_at, r.created_at,
        r.events_trimmed_through,
        -- Only a watermark at or past a whole chunk may have completed one (a lazy subquery).
        CASE WHEN r.events_trimmed_through >= trim_chunk THEN
            COALESCE((SELECT b.events_trimmed_through FROM ledger.runs AS b WHERE b.run_id = p_run_id), 0)
        END
    INTO refused, first_seq, last_seq, updated_at, status, play_name, terminal_status,
        terminal_result, terminal_error, terminal_total_rows, terminal_duration_ms,
        terminal_play_name, completed_at, v_created_at, v_trimmed, v_trimmed_before;
    IF NOT FOUND THEN
        -- Unknown, or ended: an ended run's state never changes, so no lock is needed to answer it.
        RETURN QUERY SELECT true, NULL::bigint, r.last_seq, r.updated_at, r.status, r.play_name,
            r.terminal_status, r.terminal_result, r.terminal_error, r.terminal_total_rows,
            r.terminal_duration_ms, r.terminal_play_name, r.completed_at
        FROM ledger.runs AS r WHERE r.run_id = p_run_id AND r.terminal_status IS NOT NULL;
        RETURN;
    END IF;
    -- The run's created_at picks the partition: the insert and the delete touch that one alone.
    INSERT INTO ledger.run_events (run_id, seq, run_created_at, type, ts, payload)
    SELECT p_run_id, first_seq - 1 + e.ord, v_created_at, e.item ->> 0, updated_at, e.item -> 1
    FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(item, ord);
    v_deleted_to := v_trimmed - v_trimmed % trim_chunk;
    IF v_deleted_to > 0 THEN
        v_trimmed_before := v_trimmed_before - v_trimmed_before % trim_chunk;
        IF v_deleted_to > v_trimmed_before THEN
            -- The terminal event is never deleted: it is how a reader learns how the run ended.
            DELETE FROM ledger.run_events AS e
            WHERE e.run_id = p_run_id AND e.run_created_at = v_created_at
              AND e.seq > v_trimmed_before AND e.seq <= v_deleted_to AND e.type <> 'terminal';
        END IF;
    END IF;
    IF p_notify THEN
        -- Only the run and the seq it reached: a hint, readers re-read from their cursor.
        PERFORM pg_notify(p_channel, '{"run_id":' || to_json(p_run_id)::text || ',"seq":' || last_seq || '}');
    END IF;
    RETURN NEXT;
END
$$;
