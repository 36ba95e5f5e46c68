"""The raw baselines `python -m bench` sets our measures beside: the least Postgres can do for each.

Throughput baselines are pgbench (the embedded wheel's client program; it works against any
server) running one-statement scripts, each transaction one statement in autocommit:

- append with NOTIFY: advance `runs.last_seq` (the row lock that keeps seq gapless), insert the
  events after it into the run's partition of the event log (the run's `created_at` rides along),
  and `pg_notify` the run and its last seq; for batches, also the same append trimming the run to
  its retention as ours does (from the watermark up to the cutoff, in the same statement), so a
  batched append that trims is compared with one that trims too;
- claim: the `FOR UPDATE SKIP LOCKED` pick of the newest ready entry and its delete, one CTE,
  prepared (`-M prepared`), for a fixed time on a pool that outlasts it, vacuumed and analyzed
  once filled. Each matters: drained to the last entry by a fixed count of claims per client, a
  run timed its clients' start and finish skew as much as the claims; and a pool filled just
  before the run is planned from the statistics of the table before it (a sort of every entry
  per claim when they were of an empty table: 40-150 claims/s where the same pool analyzed
  gives 300-2,200 in the same run).

pgbench cannot LISTEN, and a duplicate upload is a read, so those two baselines are psycopg loops:
one bare LISTEN connection (COMMIT to notification arrival plus one re-read, `bench_runlog`'s
`raw_wake_latency`) and one indexed read of a run's upload position per round trip.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from ledger.runlog.listener import CHANNEL

# `@PREFIX@`, `@N@` and `@CHANNEL@` are filled in by `append_script` (the SQL is full of braces).
APPEND_WITH_NOTIFY = """
WITH advanced AS (
  UPDATE ledger.runs SET last_seq = last_seq + @N@, updated_at = clock_timestamp()
  WHERE run_id = '@PREFIX@' || :client_id
  RETURNING last_seq, created_at
), inserted AS (
  INSERT INTO ledger.run_events (run_id, seq, run_created_at, type, ts, payload)
  SELECT '@PREFIX@' || :client_id, advanced.last_seq - @N@ + s, advanced.created_at, 'log', clock_timestamp(),
         '{"line": "x"}'::jsonb
  FROM advanced, generate_series(1, @N@) AS s
)
SELECT pg_notify('@CHANNEL@', '{"run_id":"@PREFIX@' || :client_id || '","seq":' || last_seq || '}')
FROM advanced;
"""

# The same append trimming as ours does (`ledger.append_events_v3`): past `@KEEP@` events the run's
# oldest are deleted, from its watermark `events_trimmed_through` up to the new cutoff, the terminal
# event kept; the watermark moves in the update the append makes. Ours deletes by whole chunks of
# 1,000 seqs; with the bench's 1,000 events a call that is the same 1,000 rows a call as here.
# With `@N@` events a call and `@KEEP@` >= `@N@`, the watermark moves by at most `@N@` a call, so
# the range above the old one is `(new - @N@, new]` (RETURNING gives new values only before
# PostgreSQL 18).
APPEND_TRIMMING_WITH_NOTIFY = """
WITH advanced AS (
  UPDATE ledger.runs SET last_seq = last_seq + @N@, updated_at = clock_timestamp(),
         events_trimmed_through = GREATEST(events_trimmed_through, last_seq + @N@ - @KEEP@)
  WHERE run_id = '@PREFIX@' || :client_id
  RETURNING last_seq, created_at, events_trimmed_through AS trimmed_through
), inserted AS (
  INSERT INTO ledger.run_events (run_id, seq, run_created_at, type, ts, payload)
  SELECT '@PREFIX@' || :client_id, advanced.last_seq - @N@ + s, advanced.created_at, 'log', clock_timestamp(),
         '{"line": "x"}'::jsonb
  FROM advanced, generate_series(1, @N@) AS s
), trimmed AS (
  DELETE FROM ledger.run_events e USING advanced
  WHERE e.run_id = '@PREFIX@' || :client_id AND e.run_created_at = advanced.created_at
    AND e.seq > advanced.trimmed_through - @N@ AND e.seq <= advanced.trimmed_through AND e.type <> 'terminal'
)
SELECT pg_notify('@CHANNEL@', '{"run_id":"@PREFIX@' || :client_id || '","seq":' || last_seq || '}')
FROM advanced;
"""


def append_statement(batch: int = 1) -> str:
    """`APPEND_WITH_NOTIFY` of `batch` events as psycopg runs it: the same statement, its run id a
    parameter (`%(run_id)s`) in place of pgbench's client variable, so a Python client can run the
    baseline's very work (bench/append_floor.py)."""
    quoted_run_id = "' || to_json(%(run_id)s::text)::text || '"
    return (
        APPEND_WITH_NOTIFY.replace("\"@PREFIX@' || :client_id || '\"", quoted_run_id)
        .replace("'@PREFIX@' || :client_id", "%(run_id)s")
        .replace("@N@", str(batch))
        .replace("@CHANNEL@", CHANNEL)
    )


CLAIM_SKIP_LOCKED = """
WITH picked AS (
  SELECT pool, id FROM ledger.pool_entries
  WHERE pool = '@POOL@' AND version = 'v1' AND state = 'ready' AND expires_at > now()
  ORDER BY ready_at DESC, id
  LIMIT 1
  FOR UPDATE SKIP LOCKED
)
DELETE FROM ledger.pool_entries e USING picked
WHERE e.pool = picked.pool AND e.id = picked.id
RETURNING e.id;
"""

# Each entry ready a millisecond before the next, as entries readied one by one are (ours drains
# the same shape); ids carry the pool's name, as an instance id names one instance in every pool.
FILL_POOL_SQL = """
INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)
SELECT %(pool)s, %(pool)s || '-i' || n, 'v1', 'ready', now(), now() - n * interval '1 millisecond',
       now() + interval '5 minutes'
FROM generate_series(1, %(entries)s) AS n
"""

UPLOAD_POSITION_SQL = "SELECT producer_attempt, last_upload_seq FROM ledger.runs WHERE run_id = %(run_id)s"


def _pgbench(bin_dir: Path, url: str, script: str, clients: int, limit: list[str]) -> float:
    """Transactions per second of `script` run by `clients` pgbench clients (`limit`: -T or -t, and
    any other option)."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as file:
        file.write(script)
    os.chmod(file.name, 0o644)
    try:
        out = subprocess.run(
            [
                str(bin_dir / "pgbench"),
                "-n",
                "-f",
                file.name,
                "-c",
                str(clients),
                "-j",
                str(clients),
                *limit,
                url,
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        os.unlink(file.name)
    match = re.search(r"tps = ([0-9.]+)", out)
    if match is None:
        raise RuntimeError(f"pgbench printed no tps:\n{out}")
    return float(match.group(1))


def append_rate(bin_dir: Path, url: str, runs: int, batch: int, seconds: float, keep: int = 0) -> float:
    """Events/s of the one-statement append with NOTIFY, `runs` clients on a run each; with `keep`,
    trimming each run to its last `keep` events as ours does (0: no trim, a bare insert; else at
    least `batch`)."""
    if 0 < keep < batch:
        raise ValueError("keep must be 0 or at least batch")
    prefix = f"raw-{runs}-{batch}-{keep}-{time.time_ns()}-"
    with psycopg.connect(url, autocommit=True) as conn:
        for client in range(runs):
            conn.execute("INSERT INTO ledger.runs (run_id) VALUES (%s)", (f"{prefix}{client}",))
        conn.execute("SELECT ledger.ensure_run_events_partition(now())")
    script = (
        (APPEND_TRIMMING_WITH_NOTIFY.replace("@KEEP@", str(keep)) if keep else APPEND_WITH_NOTIFY)
        .replace("@PREFIX@", prefix)
        .replace("@N@", str(batch))
        .replace("@CHANNEL@", CHANNEL)
    )
    return _pgbench(bin_dir, url, script, runs, ["-T", str(max(1, round(seconds)))]) * batch


def claim_rate(bin_dir: Path, url: str, claimers: int, seconds: float, entries: int = 20_000) -> float:
    """Claims/s of the one-statement SKIP LOCKED claim, `claimers` clients for `seconds`.

    The pool holds `entries` ready ones; a run that empties it timed claims that found nothing, so
    it is measured again on a pool four times the size.
    """
    while True:
        pool = f"raw-claim-{claimers}-{time.time_ns()}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(FILL_POOL_SQL, {"pool": pool, "entries": entries})
            conn.execute("VACUUM ANALYZE ledger.pool_entries")
        try:
            rate = _pgbench(
                bin_dir,
                url,
                CLAIM_SKIP_LOCKED.replace("@POOL@", pool),
                claimers,
                ["-M", "prepared", "-T", str(max(1, round(seconds)))],
            )
        finally:
            with psycopg.connect(url, autocommit=True) as conn:
                left = conn.execute("DELETE FROM ledger.pool_entries WHERE pool = %s", (pool,)).rowcount
        if left > 0:
            return rate
        entries *= 4


async def upload_position_reads(url: str, run_id: str, seconds: float) -> float:
    """Reads/s of one run's upload position, one indexed read per round trip on one connection."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        done, deadline = 0, time.perf_counter() + seconds
        started = time.perf_counter()
        while time.perf_counter() < deadline:
            await conn.execute(UPLOAD_POSITION_SQL, {"run_id": run_id})
            done += 1
        return done / (time.perf_counter() - started)
