-- The warm pool's time windows, in one place. The views, the claim and collect functions (for a
-- window their caller leaves NULL) and `ledger.pool.rules.PoolSettings` (which reads this file for
-- its defaults) all take the numbers from here, so "available" and "stale" cannot mean one thing
-- to the dashboard and another to the claim.
--   ready_max_age_ms  an entry ready longer than this is stale: its instance is presumed recycled
--   default_ttl_ms    an entry's lifetime when an add names none
--   max_ttl_ms        the longest lifetime an add may ask (and the largest minimum ready age)
--   mapping_ttl_ms    how long a run's mapping to its instance lives
--   min_ready_age_ms  how long an entry must have been ready to count, when a caller names none
-- Python parses the `<number>::bigint AS <name>` lines below: keep that form.
CREATE OR REPLACE FUNCTION ledger.pool_windows(
    OUT ready_max_age_ms bigint,
    OUT default_ttl_ms bigint,
    OUT max_ttl_ms bigint,
    OUT mapping_ttl_ms bigint,
    OUT min_ready_age_ms bigint
)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT
        420000::bigint AS ready_max_age_ms,
        480000::bigint AS default_ttl_ms,
        480000::bigint AS max_ttl_ms,
        3600000::bigint AS mapping_ttl_ms,
        0::bigint AS min_ready_age_ms
$$;
