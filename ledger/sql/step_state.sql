-- A step's state as the views show it: the `state` its node of the live progress snapshot carries
-- (the ledger stores one with every node it writes), else the one read from its fields the way
-- `ledger.runlog.steps.derived_state` reads them, for a node stored before steps had states:
-- completed (failed when its I/O reports an error, an `error` that is not null, empty, false or 0)
-- once it has `completed_at`, running once it has `started_at`, else pending.
CREATE OR REPLACE FUNCTION ledger.step_state(node jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN node ->> 'state' IN ('pending', 'running', 'completed', 'failed', 'cancelled', 'skipped')
            THEN node ->> 'state'
        WHEN jsonb_typeof(node -> 'completed_at') = 'number' THEN
            CASE WHEN jsonb_typeof(node -> 'node_io') = 'object'
                      AND coalesce(node -> 'node_io' -> 'error', 'null'::jsonb)
                          NOT IN ('null'::jsonb, '""'::jsonb, 'false'::jsonb, '0'::jsonb, '{}'::jsonb, '[]'::jsonb)
                 THEN 'failed' ELSE 'completed' END
        WHEN jsonb_typeof(node -> 'started_at') = 'number' THEN 'running'
        ELSE 'pending'
    END
$$;
