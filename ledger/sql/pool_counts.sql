-- `(available, warming)` of a version's live entries, available exactly within the claim window
-- `[p_oldest, p_newest]` of `ready_at` (`p_oldest` is also the stale limit): the tallies, less the
-- garbage (expired, stale) and too-young entries, which it scans by index, so its cost follows the
-- garbage and young entries, not the pool. `ledger.pool.rules.count` in SQL. The bounds come in as
-- values, not expressions of now, so a generic plan does not recompute them per entry.
CREATE OR REPLACE FUNCTION ledger.pool_counts(
    p_pool text, p_version text, p_now timestamptz, p_oldest timestamptz, p_newest timestamptz
) RETURNS TABLE (available bigint, warming bigint)
LANGUAGE sql STABLE AS $$
    WITH tally AS (
        SELECT coalesce(sum(t.entries), 0)::bigint AS entries, coalesce(sum(t.ready), 0)::bigint AS ready
        FROM ledger.pool_tallies t WHERE t.pool = p_pool AND t.version = p_version
    ), expired AS (
        SELECT count(*) AS n,
               count(*) FILTER (WHERE e.ready_at >= p_oldest AND e.ready_at <= p_newest) AS in_window
        FROM ledger.pool_entries e
        WHERE e.pool = p_pool AND e.version = p_version AND e.expires_at <= p_now
    ), stale AS (
        SELECT count(*) AS n, count(*) FILTER (WHERE e.expires_at > p_now) AS unexpired
        FROM ledger.pool_entries e
        WHERE e.pool = p_pool AND e.version = p_version AND e.state = 'ready' AND e.ready_at < p_oldest
    ), young AS (
        SELECT count(*) AS n FROM ledger.pool_entries e
        WHERE e.pool = p_pool AND e.version = p_version AND e.state = 'ready' AND e.ready_at > p_newest
    ), live AS (
        SELECT tally.entries - expired.n - stale.unexpired AS n,
               CASE WHEN p_newest < p_oldest THEN 0
                    ELSE tally.ready - stale.n - young.n - expired.in_window END AS available
        FROM tally, expired, stale, young
    )
    SELECT live.available, live.n - live.available FROM live
$$;
