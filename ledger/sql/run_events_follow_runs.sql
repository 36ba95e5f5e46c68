-- The event log keeps no foreign key to `runs` (detaching a partition would then lock `runs`), so
-- triggers on `runs` do what the key did: every inserted run gets its partition (one call per day
-- of the new runs), a deleted run's events go with it (from its one partition), and a run whose
-- `created_at` is changed by hand takes its events to the new partition.
CREATE OR REPLACE FUNCTION ledger.run_events_follow_run() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM ledger.run_events e WHERE e.run_id = OLD.run_id AND e.run_created_at = OLD.created_at;
    ELSIF NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        PERFORM ledger.ensure_run_events_partition(NEW.created_at);
        UPDATE ledger.run_events e SET run_created_at = NEW.created_at
        WHERE e.run_id = OLD.run_id AND e.run_created_at = OLD.created_at;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION ledger.run_events_partitions_for_new_runs() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ledger.ensure_run_events_partition(n.created_at)
    FROM (
        SELECT DISTINCT ON (date_trunc('day', created_at, 'UTC')) created_at FROM new_runs
        ORDER BY date_trunc('day', created_at, 'UTC'), created_at
    ) n;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER runs_make_partitions
    AFTER INSERT ON ledger.runs
    REFERENCING NEW TABLE AS new_runs
    FOR EACH STATEMENT EXECUTE FUNCTION ledger.run_events_partitions_for_new_runs();
CREATE OR REPLACE TRIGGER runs_delete_events
    AFTER DELETE ON ledger.runs
    FOR EACH ROW EXECUTE FUNCTION ledger.run_events_follow_run();
CREATE OR REPLACE TRIGGER runs_move_events
    AFTER UPDATE OF created_at ON ledger.runs
    FOR EACH ROW EXECUTE FUNCTION ledger.run_events_follow_run();
