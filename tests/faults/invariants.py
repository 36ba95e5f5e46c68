"""What must hold in every table after any fault, checked over the whole database.

One check for every fault test: each query names the rows that break one rule, so a failure says
which run, entry or key is wrong and how. Rules the schema's own constraints already enforce are
not restated; these are the ones that span rows or tables.

Seqs are checked as the run's trim watermark + 1..last_seq (1..last_seq for a run never trimmed):
retention at the event cap moves the watermark past a run's oldest events, and deletes them by
whole chunks of `TRIM_CHUNK` seqs, so a row at or below the watermark may be stored only inside the
chunk the watermark is in (the terminal event is never deleted).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ledger.idempotency import IdempotencyScope

# Seqs per chunk retention deletes at once (`trim_chunk` in `ledger/sql/append_events_v3.sql`).
TRIM_CHUNK = 1000

# (what the rule says, a query returning the rows that break it)
RULES: tuple[tuple[str, str], ...] = (
    (
        "a run's events are seq watermark+1..last_seq without a gap (last_seq = max(seq))",
        """
        SELECT r.run_id, r.last_seq, r.events_trimmed_through AS watermark,
               count(e.seq) FILTER (WHERE e.seq > r.events_trimmed_through) AS events,
               min(e.seq) FILTER (WHERE e.seq > r.events_trimmed_through) AS first, max(e.seq) AS last
        FROM ledger.runs r LEFT JOIN ledger.run_events e USING (run_id)
        GROUP BY r.run_id, r.last_seq, r.events_trimmed_through
        HAVING count(e.seq) FILTER (WHERE e.seq > r.events_trimmed_through)
                 <> r.last_seq - r.events_trimmed_through
            OR coalesce(max(e.seq), 0) <> r.last_seq
            OR coalesce(min(e.seq) FILTER (WHERE e.seq > r.events_trimmed_through),
                        r.events_trimmed_through + 1) <> r.events_trimmed_through + 1
        """,
    ),
    (
        "a trimmed row is stored only inside the chunk its run's watermark is in",
        f"""
        SELECT r.run_id, r.events_trimmed_through AS watermark, min(e.seq) AS lowest
        FROM ledger.runs r JOIN ledger.run_events e USING (run_id)
        WHERE e.type <> 'terminal'
          AND e.seq <= r.events_trimmed_through - r.events_trimmed_through % {TRIM_CHUNK}
        GROUP BY r.run_id, r.events_trimmed_through
        """,
    ),
    (
        "a run has at most one terminal event, and it is the run's last event",
        """
        SELECT run_id, count(*) FILTER (WHERE type = 'terminal') AS terminals,
               max(seq) FILTER (WHERE type = 'terminal') AS terminal_seq, max(seq) AS last
        FROM ledger.run_events GROUP BY run_id
        HAVING count(*) FILTER (WHERE type = 'terminal') > 1
            OR max(seq) FILTER (WHERE type = 'terminal') <> max(seq)
        """,
    ),
    (
        "a run has a terminal event exactly when its terminal state is set, and they agree",
        """
        SELECT r.run_id, r.status, r.terminal_status, r.terminal_error, r.completed_at, e.seq, e.ts, e.payload
        FROM ledger.runs r
        LEFT JOIN ledger.run_events e ON e.run_id = r.run_id AND e.type = 'terminal'
        WHERE (r.terminal_status IS NULL) <> (e.seq IS NULL)
           OR (e.seq IS NOT NULL AND (
                e.payload ->> 'status' IS DISTINCT FROM r.terminal_status
             OR e.payload ->> 'error' IS DISTINCT FROM r.terminal_error
             OR r.status IS DISTINCT FROM r.terminal_status
             OR r.completed_at IS DISTINCT FROM e.ts))
        """,
    ),
    (
        "a pool entry is ready exactly when it has a ready_at, and expires after it was created",
        """
        SELECT pool, id, state, created_at, ready_at, expires_at FROM ledger.pool_entries
        WHERE state NOT IN ('warming', 'ready') OR (state = 'ready') <> (ready_at IS NOT NULL)
           OR expires_at <= created_at
        """,
    ),
    (
        "each pool and version's tallies add up to its entries, and its ready entries",
        """
        SELECT coalesce(t.pool, e.pool) AS pool, coalesce(t.version, e.version) AS version,
               t.entries AS tallied, e.entries, t.ready AS tallied_ready, e.ready
        FROM (SELECT pool, version, sum(entries) AS entries, sum(ready) AS ready
              FROM ledger.pool_tallies GROUP BY pool, version) t
        FULL JOIN (SELECT pool, version, count(*) AS entries,
                          count(*) FILTER (WHERE state = 'ready') AS ready
                   FROM ledger.pool_entries GROUP BY pool, version) e
          ON e.pool = t.pool AND e.version = t.version
        WHERE coalesce(t.entries, 0) <> coalesce(e.entries, 0) OR coalesce(t.ready, 0) <> coalesce(e.ready, 0)
        """,
    ),
    (
        "a mapping's timestamps fit its state (claimed/started: claimed_at; started: started_at"
        " not before it; blocked: the blocked instance)",
        """
        SELECT run_id, state, instance_id, blocked_instance_id, claimed_at, started_at, expires_at
        FROM ledger.run_mappings
        WHERE state NOT IN ('claimed', 'started', 'blocked')
           OR (state IN ('claimed', 'started') AND claimed_at IS NULL)
           OR (state = 'started' AND (started_at IS NULL OR started_at < claimed_at))
           OR (state = 'blocked' AND blocked_instance_id IS NULL)
           OR expires_at <= created_at
        """,
    ),
)

# An instance is in one place at a time: one live run, or one pool. Live, for a mapping: not
# expired, naming an instance, its run not ended (or not opened yet); for an entry: not expired.
# `%(now)s` is the time to judge at (NULL: the database's), for tests on a clock of their own.
_SERVING = """
    SELECT m.run_id, m.instance_id FROM ledger.run_mappings m
    LEFT JOIN ledger.runs r ON r.run_id = m.run_id
    WHERE m.state IN ('claimed', 'started') AND m.instance_id <> ''
      AND m.expires_at > coalesce(%(now)s::timestamptz, now()) AND r.terminal_status IS NULL
"""
INSTANCE_RULES: tuple[tuple[str, str], ...] = (
    (
        "an instance serves at most one live run",
        f"""
        SELECT instance_id, array_agg(run_id ORDER BY run_id) AS runs FROM ({_SERVING}) s
        GROUP BY instance_id HAVING count(*) > 1
        """,
    ),
    (
        "no live pool entry is an instance that serves a live run",
        f"""
        SELECT s.run_id, p.pool, p.id AS instance_id, p.state, p.expires_at
        FROM ({_SERVING}) s JOIN ledger.pool_entries p ON p.id = s.instance_id
        WHERE p.expires_at > coalesce(%(now)s::timestamptz, now())
        """,
    ),
    (
        "an instance is a live entry of at most one pool",
        """
        SELECT id AS instance_id, array_agg(pool ORDER BY pool) AS pools FROM ledger.pool_entries
        WHERE expires_at > coalesce(%(now)s::timestamptz, now())
        GROUP BY id HAVING count(*) > 1
        """,
    ),
)

_HEX64 = re.compile(r"[0-9a-f]{64}")
_BODY_FINGERPRINT = re.compile(r"(json|bytes):[0-9a-f]{64}")


def violations(database_url: str) -> list[str]:
    """Every broken rule with the rows that break it (empty when the database is consistent)."""
    problems: list[str] = []
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        for rule, query in RULES:
            rows = conn.execute(query).fetchall()
            problems.extend(f"{rule}: {_show(row)}" for row in rows[:20])
        problems.extend(instance_problems(conn))
        problems.extend(_idempotency_problems(conn))
    return problems


# Live entries plus live mappings of each instance, for tests that know where every one of theirs
# must be (exactly one place; runs that end are not counted out here).
_PLACES = """
SELECT i AS instance_id,
       (SELECT count(*) FROM ledger.pool_entries p WHERE p.id = i AND p.expires_at > now())
     + (SELECT count(*) FROM ledger.run_mappings m
        WHERE m.instance_id = i AND m.expires_at > now()) AS places
FROM unnest(%(ids)s::text[]) AS i
"""


def places(conn: psycopg.Connection[dict[str, Any]], instance_ids: list[str]) -> dict[str, int]:
    """How many places (live pool entries and live mappings) each instance is in."""
    rows = conn.execute(_PLACES, {"ids": instance_ids}).fetchall()
    return {r["instance_id"]: r["places"] for r in rows}


def instance_problems(conn: psycopg.Connection[dict[str, Any]], now: datetime | None = None) -> list[str]:
    """The instances in two places at `now` (the database's when None), by `INSTANCE_RULES`."""
    problems: list[str] = []
    for rule, query in INSTANCE_RULES:
        rows = conn.execute(query, {"now": now}).fetchall()
        problems.extend(f"{rule}: {_show(row)}" for row in rows[:20])
    return problems


def assert_consistent(database_url: str) -> None:
    problems = violations(database_url)
    assert not problems, "\n".join(problems)


def _idempotency_problems(conn: psycopg.Connection[dict[str, Any]]) -> list[str]:
    """Stored Idempotency-Key answers are well-formed, and an append they acknowledged is stored
    (its events, at the seqs it answered, are the run's)."""
    problems: list[str] = []
    rows = conn.execute(
        "SELECT token_fingerprint, scope_digest, method, path, idempotency_key, request_fingerprint,"
        " status_code, content_type, response_body FROM ledger.idempotency_keys"
    ).fetchall()
    for row in rows:
        where = f"{row['method']} {row['path']} key {row['idempotency_key']!r}"
        scope = IdempotencyScope(
            token_fingerprint=row["token_fingerprint"],
            method=row["method"],
            path=row["path"],
            key=row["idempotency_key"].encode(),
        )
        if not _HEX64.fullmatch(row["token_fingerprint"]):
            problems.append(f"{where}: token fingerprint {row['token_fingerprint']!r} is not a SHA-256")
        # A key that is not UTF-8 is stored repaired (U+FFFD) for readers: its digest cannot be redone.
        if row["scope_digest"] != scope.digest and "\ufffd" not in row["idempotency_key"]:
            problems.append(f"{where}: scope digest does not match its method, path and key")
        if not _BODY_FINGERPRINT.fullmatch(row["request_fingerprint"]):
            problems.append(f"{where}: request fingerprint {row['request_fingerprint']!r} is malformed")
        if not 200 <= row["status_code"] < 500:
            problems.append(f"{where}: stored status {row['status_code']} (only 2xx/4xx answers are kept)")
        if not row["content_type"]:
            problems.append(f"{where}: no content type")
        if row["status_code"] == 200 and row["path"].endswith("/events") and row["method"] == "POST":
            problems.extend(_acknowledged_append_problems(conn, where, row))
    return problems


def _acknowledged_append_problems(
    conn: psycopg.Connection[dict[str, Any]], where: str, row: dict[str, Any]
) -> list[str]:
    answered = json.loads(bytes(row["response_body"]))
    run_id = row["path"].removeprefix("/v1/runs/").removesuffix("/events")
    stored = {
        r["seq"]: r["type"]
        for r in conn.execute(
            "SELECT seq, type FROM ledger.run_events WHERE run_id = %s AND seq = ANY(%s)",
            (run_id, [e["seq"] for e in answered["events"]]),
        ).fetchall()
    }
    trimmed = conn.execute(
        "SELECT coalesce(max(events_trimmed_through), 0) AS through FROM ledger.runs WHERE run_id = %s",
        (run_id,),
    ).fetchone()
    through = trimmed["through"] if trimmed else 0
    return [
        f"{where}: acknowledged event seq {e['seq']} ({e['type']}) is not stored as such"
        for e in answered["events"]
        if stored.get(e["seq"]) != e["type"] and e["seq"] > through
    ]


def _show(row: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in row.items())
