-- The garbage an operation naming `p_version` deletes: entries of another version, expired ones
-- (`expires_at <= now`) and stale ready ones (ready before `now - ready_max_age`), as
-- `ledger.pool.rules.is_garbage` says; rows another transaction holds are skipped (whoever holds
-- one is about to delete or rewrite it). Returns how many it deleted.
-- v2 (was `pool_collect`): `p_now` and `p_ready_max_age_ms` may be NULL, meaning the transaction's
-- `now()` and the stale window of `ledger.pool_windows()`.
CREATE OR REPLACE FUNCTION ledger.pool_collect_v2(
    p_pool text, p_version text, p_now timestamptz DEFAULT NULL, p_ready_max_age_ms bigint DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_stale_before timestamptz := v_now
        - coalesce(p_ready_max_age_ms, (ledger.pool_windows()).ready_max_age_ms) * interval '1 millisecond';
    v_deleted bigint;
BEGIN
    DELETE FROM ledger.pool_entries d
    WHERE (d.pool, d.id) IN (
        SELECT g.pool, g.id FROM ledger.pool_entries g
        WHERE g.pool = p_pool
          AND (g.version <> p_version OR g.expires_at <= v_now OR g.ready_at < v_stale_before)
        FOR UPDATE SKIP LOCKED
    );
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;
