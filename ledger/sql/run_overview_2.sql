-- One row per run for people in psql and `ledger runs`: age, terminal state, the last event's type
-- (joined by the full key, so it reads one partition), the steps of the live per-node progress by
-- state (`ledger.step_state`: `steps_done` counts the completed ones) and row totals summed over
-- them. The sums are numeric: each count may reach the bigint limit, so their sum may pass it, and
-- the view answers for every run whatever one holds. A count is used only when it is a JSON
-- number, so a malformed snapshot shows as NULL instead of breaking the view for every run.
CREATE OR REPLACE VIEW ledger.run_overview AS
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
    coalesce(s.rows_total, 0) AS rows_total,
    coalesce(s.steps_failed, 0) AS steps_failed,
    coalesce(s.steps_cancelled, 0) AS steps_cancelled,
    coalesce(s.steps_skipped, 0) AS steps_skipped
FROM ledger.runs r
LEFT JOIN ledger.run_events e ON e.run_id = r.run_id AND e.seq = r.last_seq AND e.run_created_at = r.created_at
LEFT JOIN LATERAL (
    SELECT
        count(*) AS steps_total,
        count(*) FILTER (WHERE n.state = 'completed') AS steps_done,
        count(*) FILTER (WHERE n.state = 'failed') AS steps_failed,
        count(*) FILTER (WHERE n.state = 'cancelled') AS steps_cancelled,
        count(*) FILTER (WHERE n.state = 'skipped') AS steps_skipped,
        sum(CASE WHEN jsonb_typeof(n.value -> 'completed') = 'number'
                 THEN (n.value ->> 'completed')::numeric END) AS rows_completed,
        sum(CASE WHEN jsonb_typeof(n.value -> 'failed') = 'number'
                 THEN (n.value ->> 'failed')::numeric END) AS rows_failed,
        sum(CASE WHEN jsonb_typeof(n.value -> 'total') = 'number'
                 THEN (n.value ->> 'total')::numeric END) AS rows_total
    FROM jsonb_each(
        CASE WHEN jsonb_typeof(r.live_node_progress) = 'object' THEN r.live_node_progress
             ELSE '{}'::jsonb END
    ) AS each_node(key, value)
    CROSS JOIN LATERAL (SELECT each_node.value, ledger.step_state(each_node.value) AS state) AS n
) s ON true;
