-- Non-terminal runs with neither an event nor a heartbeat for 5 minutes (the watchdog's default
-- stall limit): what the watchdog will fail next. GREATEST ignores NULLs, so a run that never sent a
-- heartbeat is judged by its last event alone.
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
  AND greatest(r.updated_at, r.last_heartbeat_at) < now() - interval '5 minutes';
