-- The mappings that name an instance and whose run has not ended (a run not opened yet has not):
-- live ones are those with `expires_at > now`. The one statement of "this instance serves a live
-- run" that the store's checks and the claim share (`ledger.pool.rules.serves_live_run`).
CREATE OR REPLACE VIEW ledger.instance_runs AS
SELECT m.instance_id, m.run_id, m.expires_at
FROM ledger.run_mappings m
WHERE m.instance_id <> ''
  AND NOT EXISTS (
      SELECT 1 FROM ledger.runs r WHERE r.run_id = m.run_id AND r.terminal_status IS NOT NULL);
