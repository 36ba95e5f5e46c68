-- Every unexpired pool entry with the condition a claim sees it in: `warming` (not ready, or not
-- ready for the minimum age yet, which covers a `ready_at` announced for later), `stale` (ready
-- longer than the stale window: never claimed, the next collect deletes it) or `available`. The
-- dashboard lists it and `pool_availability` counts it, so both split entries alike; the windows
-- are the defaults of `ledger.pool_windows()`.
CREATE OR REPLACE VIEW ledger.pool_entry_conditions AS
SELECT
    p.pool,
    p.version,
    p.id,
    p.state,
    p.created_at,
    p.ready_at,
    p.expires_at,
    CASE
        WHEN p.state = 'warming' OR p.ready_at > now() - w.min_ready_age_ms * interval '1 millisecond'
            THEN 'warming'
        WHEN p.ready_at < now() - w.ready_max_age_ms * interval '1 millisecond' THEN 'stale'
        ELSE 'available'
    END AS condition
FROM ledger.pool_entries p
CROSS JOIN ledger.pool_windows() w
WHERE p.expires_at > now();
