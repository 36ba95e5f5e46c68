-- Non-terminal runs with neither an event nor a heartbeat for the watchdog's stall limit: what the
-- watchdog will fail next. The limit has one home, `ledger.watchdog_settings`, which the service
-- and `ledger watchdog` write when they start with theirs (5 minutes until one does). GREATEST
-- ignores NULLs, so a run that never sent a heartbeat is judged by its last event alone.
CREATE OR REPLACE VIEW ledger.stalled_runs AS
SELECT
    r.run_id,
    r.status,
    coalesce(r.play_name, r.terminal_play_name) AS play_name,
    r.updated_at,
    now() - greatest(r.updated_at, r.last_heartbeat_at) AS idle,
    r.last_seq,
    r.last_heartbeat_at
FROM ledger.runs r
WHERE r.terminal_status IS NULL
  AND greatest(r.updated_at, r.last_heartbeat_at)
      < now() - coalesce((SELECT w.stall_after FROM ledger.watchdog_settings w), interval '5 minutes');
