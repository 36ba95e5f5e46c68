-- A run's events as its readers are shown them: above the run's trim watermark. The rows at or
-- below it are already out of retention (a page never shows them, a cursor there is 410) and wait
-- only for their chunk's delete, so a person querying the log by hand reads this, not the table.
CREATE OR REPLACE VIEW ledger.event_log AS
SELECT e.run_id, e.seq, e.type, e.ts, e.payload
FROM ledger.run_events e
JOIN ledger.runs r ON r.run_id = e.run_id AND r.created_at = e.run_created_at
WHERE e.seq > r.events_trimmed_through;
