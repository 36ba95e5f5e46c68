-- The event log's partitions: `run_event_partitions` lists them with their bounds (as Postgres
-- prints them back; `to_regclass` is read when the view is, so it follows whichever table is
-- `ledger.run_events`; `detach_pending`: an interrupted concurrent detach, finished before a drop).
-- `ensure_run_events_partition(at)` returns the partition holding runs created at `at`, making it
-- first when missing: a plain table then `ATTACH` (SHARE UPDATE EXCLUSIVE on the parent, which
-- appends and reads never wait on), under an advisory lock, clipped to its neighbours so a change
-- of period never overlaps; periods are UTC days or months. Opening a run pays one catalog lookup.
CREATE OR REPLACE VIEW ledger.run_event_partitions AS
SELECT c.relname::text AS name, b[1]::timestamptz AS from_at, b[2]::timestamptz AS to_at,
       i.inhdetachpending AS detach_pending
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
CROSS JOIN LATERAL regexp_match(
    pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']*)''\) TO \(''([^'']*)''\)'
) AS b
WHERE i.inhparent = to_regclass('ledger.run_events');

CREATE OR REPLACE FUNCTION ledger.ensure_run_events_partition(p_at timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_period text;
    v_from timestamptz;
    v_to timestamptz;
    v_name text;
BEGIN
    SELECT p.period INTO v_period FROM ledger.run_event_partitioning p;
    v_period := COALESCE(v_period, 'day');
    v_from := date_trunc(v_period, p_at, 'UTC');
    v_to := ((v_from AT TIME ZONE 'UTC') + ('1 ' || v_period)::interval) AT TIME ZONE 'UTC';
    v_name := 'run_events_' || to_char(v_from AT TIME ZONE 'UTC', 'YYYYMMDD')
        || '_' || to_char(v_to AT TIME ZONE 'UTC', 'YYYYMMDD');
    IF EXISTS (
        SELECT 1 FROM pg_class c
        WHERE c.oid = to_regclass('ledger_partitions.' || quote_ident(v_name)) AND c.relispartition
    ) THEN
        RETURN v_name;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('ledger.run_events partitions'));
    SELECT p.name INTO v_name FROM ledger.run_event_partitions p
    WHERE p.from_at <= p_at AND p_at < p.to_at;
    IF FOUND THEN
        RETURN v_name;
    END IF;
    SELECT greatest(v_from, max(p.to_at)) INTO v_from
    FROM ledger.run_event_partitions p WHERE p.to_at <= p_at;
    SELECT least(v_to, min(p.from_at)) INTO v_to
    FROM ledger.run_event_partitions p WHERE p.from_at > p_at;
    v_name := 'run_events_' || to_char(v_from AT TIME ZONE 'UTC', 'YYYYMMDD')
        || '_' || to_char(v_to AT TIME ZONE 'UTC', 'YYYYMMDD');
    EXECUTE format(
        'CREATE TABLE ledger_partitions.%I (LIKE ledger.run_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
        v_name
    );
    EXECUTE format(
        'ALTER TABLE ledger.run_events ATTACH PARTITION ledger_partitions.%I FOR VALUES FROM (%L) TO (%L)',
        v_name, v_from, v_to
    );
    RETURN v_name;
END
$$;
