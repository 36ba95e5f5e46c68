-- The warm pool's time windows, as the database reads them. The views, and the claim and collect
-- functions for a window their caller leaves NULL, take the numbers from here, so "available" and
-- "stale" cannot mean one thing to the dashboard and another to the claim.
-- Rendered by `ledger.sql.render_pool_windows()` from `ledger.sql.POOL_WINDOWS`, the one home of
-- these numbers, which `ledger.pool.rules.PoolSettings` reads for its defaults: a change is made
-- there and rendered into a new file.
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
