-- Per pool and version, the unexpired entries counted by condition (`pool_entry_conditions`):
-- available, warming and stale (neither: the next collect deletes them), with the newest available
-- `ready_at`. The view people query in psql to see whether a pool keeps up.
CREATE OR REPLACE VIEW ledger.pool_availability AS
SELECT
    c.pool,
    c.version,
    count(*) FILTER (WHERE c.condition = 'available') AS available,
    count(*) FILTER (WHERE c.condition = 'warming') AS warming,
    count(*) FILTER (WHERE c.condition = 'stale') AS stale,
    max(c.ready_at) FILTER (WHERE c.condition = 'available') AS newest_ready_at
FROM ledger.pool_entry_conditions c
GROUP BY c.pool, c.version;
