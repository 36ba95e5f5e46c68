-- Counts that do not read every entry: statement triggers on `pool_entries` keep, per pool and
-- version, how many entries and ready ones there are (garbage included) in `pool_tallies`. Each
-- backend adds to its own row (`slot` = its pid), so writers never wait on each other nor deadlock
-- on a tally; `pool_fold_tallies(pool)` adds the other backends' rows into the caller's when no one
-- holds them (it never waits, and two folds never take each other's rows), which keeps the rows
-- per pool and version about as many as the backends writing between two folds.
CREATE OR REPLACE FUNCTION ledger.pool_tally() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO ledger.pool_tallies AS t (pool, version, slot, entries, ready)
        SELECT a.pool, a.version, pg_backend_pid(), count(*), count(*) FILTER (WHERE a.state = 'ready')
        FROM added a GROUP BY a.pool, a.version ORDER BY a.pool, a.version
        ON CONFLICT (pool, version, slot) DO UPDATE
            SET entries = t.entries + EXCLUDED.entries, ready = t.ready + EXCLUDED.ready;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO ledger.pool_tallies AS t (pool, version, slot, entries, ready)
        SELECT r.pool, r.version, pg_backend_pid(), -count(*), -count(*) FILTER (WHERE r.state = 'ready')
        FROM removed r GROUP BY r.pool, r.version ORDER BY r.pool, r.version
        ON CONFLICT (pool, version, slot) DO UPDATE
            SET entries = t.entries + EXCLUDED.entries, ready = t.ready + EXCLUDED.ready;
    ELSE
        INSERT INTO ledger.pool_tallies AS t (pool, version, slot, entries, ready)
        SELECT c.pool, c.version, pg_backend_pid(), sum(c.entries), sum(c.ready)
        FROM (
            SELECT a.pool, a.version, 1 AS entries, (a.state = 'ready')::int AS ready FROM added a
            UNION ALL
            SELECT r.pool, r.version, -1, -(r.state = 'ready')::int FROM removed r
        ) c
        GROUP BY c.pool, c.version
        HAVING sum(c.entries) <> 0 OR sum(c.ready) <> 0
        ORDER BY c.pool, c.version
        ON CONFLICT (pool, version, slot) DO UPDATE
            SET entries = t.entries + EXCLUDED.entries, ready = t.ready + EXCLUDED.ready;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION ledger.pool_tally_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM ledger.pool_tallies;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION ledger.pool_fold_tallies(p_pool text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_slot integer := pg_backend_pid();
BEGIN
    WITH mine AS (
        SELECT t.version FROM ledger.pool_tallies t
        WHERE t.pool = p_pool AND t.slot = v_slot
        FOR UPDATE SKIP LOCKED
    ), theirs AS (
        DELETE FROM ledger.pool_tallies d
        WHERE (d.pool, d.version, d.slot) IN (
            SELECT o.pool, o.version, o.slot FROM ledger.pool_tallies o
            WHERE o.pool = p_pool AND o.slot <> v_slot AND o.version IN (SELECT version FROM mine)
            FOR UPDATE SKIP LOCKED
        )
        RETURNING d.version, d.entries, d.ready
    ), sums AS (
        SELECT version, sum(entries) AS entries, sum(ready) AS ready FROM theirs GROUP BY version
    )
    UPDATE ledger.pool_tallies t SET entries = t.entries + s.entries, ready = t.ready + s.ready
    FROM sums s
    WHERE t.pool = p_pool AND t.slot = v_slot AND t.version = s.version;
    -- What sums to nothing (a retired version, once folded) is dropped.
    DELETE FROM ledger.pool_tallies t
    WHERE t.pool = p_pool AND t.slot = v_slot AND t.entries = 0 AND t.ready = 0;
END
$$;

CREATE OR REPLACE TRIGGER pool_tally_insert
    AFTER INSERT ON ledger.pool_entries
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION ledger.pool_tally();
CREATE OR REPLACE TRIGGER pool_tally_update
    AFTER UPDATE ON ledger.pool_entries
    REFERENCING OLD TABLE AS removed NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION ledger.pool_tally();
CREATE OR REPLACE TRIGGER pool_tally_delete
    AFTER DELETE ON ledger.pool_entries
    REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION ledger.pool_tally();
CREATE OR REPLACE TRIGGER pool_tally_truncate
    AFTER TRUNCATE ON ledger.pool_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger.pool_tally_truncate();
