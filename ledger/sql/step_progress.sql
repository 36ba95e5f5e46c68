-- One row per node of a run's live progress snapshot (epoch-ms times as timestamptz); a value of
-- the wrong JSON type shows as NULL.
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
         THEN to_timestamp((n.value ->> 'updated_at')::numeric / 1000) END AS updated_at
FROM ledger.runs r
CROSS JOIN LATERAL jsonb_each(
    CASE WHEN jsonb_typeof(r.live_node_progress) = 'object' THEN r.live_node_progress
         ELSE '{}'::jsonb END
) AS n;
