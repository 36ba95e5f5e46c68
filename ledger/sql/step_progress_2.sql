-- One row per node of a run's live progress snapshot (epoch-ms times as timestamptz); a value of
-- the wrong JSON type shows as NULL. `state` is the step's state (`ledger.step_state`), `reason`
-- why it settled as it did (a failed, cancelled or skipped step), `position` its index in the
-- pipeline when the reporter sent the pipeline's steps.
CREATE OR REPLACE VIEW ledger.step_progress AS
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
         THEN to_timestamp((n.value ->> 'updated_at')::numeric / 1000) END AS updated_at,
    ledger.step_state(n.value) AS state,
    CASE WHEN jsonb_typeof(n.value -> 'reason') = 'string' THEN n.value ->> 'reason' END AS reason,
    CASE WHEN jsonb_typeof(n.value -> 'position') = 'number'
         THEN (n.value ->> 'position')::numeric::integer END AS position
FROM ledger.runs r
CROSS JOIN LATERAL jsonb_each(
    CASE WHEN jsonb_typeof(r.live_node_progress) = 'object' THEN r.live_node_progress
         ELSE '{}'::jsonb END
) AS n;
