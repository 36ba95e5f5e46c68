-- The whole claim in one statement, the hot path of the pool. Takes the run's advisory lock
-- (`p_run_lock` is the key `ledger.pool.store` locks a run with, so map, block and resolve
-- serialise with it); collects garbage and folds the tallies only when `p_collect` (the caller
-- amortizes it); answers from a live same-version mapping (idempotent per run); else takes the
-- newest ready entry within the claim window with `FOR UPDATE SKIP LOCKED`, passing over one whose
-- instance serves another live run (`instance_runs`), deletes it and writes the run's `claimed`
-- mapping; then counts. Returns `(claimed, available, warming)`.
-- It is `ledger.pool.rules` (`existing_claim`, `choose_claim`, `claimed`, `count`) in SQL; the
-- model-based test holds the two together.
-- v2 (was `pool_claim`): `p_collect` comes fifth and everything after it may be left out or NULL,
-- meaning the transaction's `now()` and the windows of `ledger.pool_windows()`.
CREATE OR REPLACE FUNCTION ledger.pool_claim_v2(
    p_pool text, p_version text, p_run_id text, p_run_lock text, p_collect boolean,
    p_now timestamptz DEFAULT NULL, p_min_age_ms bigint DEFAULT NULL,
    p_ready_max_age_ms bigint DEFAULT NULL, p_mapping_ttl_ms bigint DEFAULT NULL,
    OUT claimed text, OUT available bigint, OUT warming bigint
)
LANGUAGE plpgsql VOLATILE
-- Generic plans: planning the counts afresh on every call (what plpgsql does while a custom plan
-- looks cheaper) cost more than the rest of the claim. A generic plan cannot see how narrow the
-- garbage and young ranges are and, in a pool that fills the table, preferred reading it whole:
-- without sequential scans every statement reads by index, bounded by what it matches.
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    -- `pool_windows()` is immutable: the planner folds it to constants, the claim pays nothing.
    v_ready_max_age_ms bigint := coalesce(p_ready_max_age_ms, (ledger.pool_windows()).ready_max_age_ms);
    v_mapping_ttl_ms bigint := coalesce(p_mapping_ttl_ms, (ledger.pool_windows()).mapping_ttl_ms);
    v_oldest timestamptz := v_now - v_ready_max_age_ms * interval '1 millisecond';
    v_newest timestamptz := v_now
        - coalesce(p_min_age_ms, (ledger.pool_windows()).min_ready_age_ms) * interval '1 millisecond';
    v_mapping ledger.run_mappings%ROWTYPE;
    v_passed text[] := '{}';
    v_id text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_run_lock, 0));
    IF p_collect THEN
        PERFORM ledger.pool_collect_v2(p_pool, p_version, v_now, v_ready_max_age_ms);
        PERFORM ledger.pool_fold_tallies(p_pool);
    END IF;
    SELECT * INTO v_mapping FROM ledger.run_mappings m WHERE m.run_id = p_run_id FOR UPDATE;
    IF FOUND AND v_mapping.expires_at > v_now AND v_mapping.version = p_version THEN
        IF v_mapping.state IN ('claimed', 'started') THEN
            claimed := nullif(v_mapping.instance_id, '');
        END IF;
    ELSE
        -- The pick, then the check of the picked instance: one index probe. As an anti-join in the
        -- pick, the check turned the generic plan into probing and sorting every entry in the window.
        LOOP
            v_id := NULL;
            SELECT e.id INTO v_id FROM ledger.pool_entries e
            WHERE e.pool = p_pool AND e.version = p_version AND e.state = 'ready'
              AND e.ready_at >= v_oldest AND e.ready_at <= v_newest AND e.expires_at > v_now
              AND e.id <> ALL (v_passed)
            ORDER BY e.ready_at DESC, e.id
            LIMIT 1
            FOR UPDATE SKIP LOCKED;
            EXIT WHEN v_id IS NULL OR NOT EXISTS (
                SELECT 1 FROM ledger.instance_runs b
                WHERE b.instance_id = v_id AND b.run_id <> p_run_id AND b.expires_at > v_now);
            v_passed := v_passed || v_id;
        END LOOP;
        IF v_id IS NOT NULL THEN
            DELETE FROM ledger.pool_entries d WHERE d.pool = p_pool AND d.id = v_id;
            claimed := v_id;
            INSERT INTO ledger.run_mappings AS m (
                run_id, pool, instance_id, state, blocked_instance_id, version,
                claimed_at, started_at, created_at, expires_at)
            VALUES (p_run_id, p_pool, claimed, 'claimed', NULL, p_version,
                    v_now, NULL, v_now, v_now + v_mapping_ttl_ms * interval '1 millisecond')
            ON CONFLICT (run_id) DO UPDATE SET
                pool = EXCLUDED.pool, instance_id = EXCLUDED.instance_id, state = EXCLUDED.state,
                blocked_instance_id = EXCLUDED.blocked_instance_id, version = EXCLUDED.version,
                claimed_at = EXCLUDED.claimed_at, started_at = EXCLUDED.started_at,
                created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at;
        END IF;
    END IF;
    SELECT c.available, c.warming INTO available, warming
    FROM ledger.pool_counts(p_pool, p_version, v_now, v_oldest, v_newest) c;
END
$$;
