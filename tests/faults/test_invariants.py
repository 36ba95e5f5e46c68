"""The invariants check itself: silent on a consistent database, and each rule names the rows
that break it (rows written with plain SQL, as a bug could leave them)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import psycopg
import pytest

from ledger.idempotency import IdempotencyScope, fingerprint_token
from tests.conftest import delete_all_rows
from tests.faults.invariants import violations

TOKEN = fingerprint_token("a token")


def run(conn: psycopg.Connection[object], run_id: str, types: list[str], *, terminal: str | None) -> None:
    """A run with events of `types` at seq 1.. and, if given, a terminal state recorded at the
    time of its last event (one transaction: one `now()`)."""
    with conn.transaction():
        _run(conn, run_id, types, terminal=terminal)


def _run(conn: psycopg.Connection[object], run_id: str, types: list[str], *, terminal: str | None) -> None:
    conn.execute(
        "INSERT INTO ledger.runs (run_id, status, last_seq, terminal_status, completed_at)"
        " VALUES (%s, %s, %s, %s::text, CASE WHEN %s::text IS NULL THEN NULL ELSE now() END)",
        (run_id, terminal or "running", len(types), terminal, terminal),
    )
    for seq, type_ in enumerate(types, start=1):
        payload = {"status": terminal} if type_ == "terminal" else {"line": "x"}
        conn.execute(
            "INSERT INTO ledger.run_events (run_id, seq, type, ts, payload, run_created_at)"
            " SELECT %s, %s, %s, now(), %s, created_at FROM ledger.runs WHERE run_id = %s",
            (run_id, seq, type_, json.dumps(payload), run_id),
        )


def key(conn: psycopg.Connection[object], path: str, body: object, *, digest: str | None = None) -> None:
    scope = IdempotencyScope(token_fingerprint=TOKEN, method="POST", path=path, key=b"k")
    conn.execute(
        "INSERT INTO ledger.idempotency_keys (token_fingerprint, scope_digest, method, path,"
        " idempotency_key, request_fingerprint, status_code, content_type, response_body)"
        " VALUES (%s, %s, 'POST', %s, 'k', %s, 200, 'application/json', %s)",
        (TOKEN, digest or scope.digest, path, "json:" + "0" * 64, json.dumps(body).encode()),
    )


def consistent(conn: psycopg.Connection[object]) -> None:
    run(conn, "ok-open", ["log", "log"], terminal=None)
    run(conn, "ok-done", ["log", "terminal"], terminal="completed")
    run(conn, "ok-empty", [], terminal=None)
    conn.execute(
        "INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)"
        " VALUES ('p', 'i-ready', 'v', 'ready', now(), now(), now() + interval '1 hour'),"
        " ('p', 'i-warm', 'v', 'warming', now(), NULL, now() + interval '1 hour')"
    )
    conn.execute(
        "INSERT INTO ledger.run_mappings (run_id, pool, instance_id, state, version, claimed_at,"
        " started_at, created_at, expires_at)"
        " VALUES ('ok-open', 'p', 'i-1', 'started', 'v', now(), now(), now(), now() + interval '1 hour')"
    )
    # An instance is in one place at a time, and these are not places: an ended run's mapping, an
    # expired mapping, an expired entry in another pool.
    conn.execute(
        "INSERT INTO ledger.run_mappings (run_id, pool, instance_id, state, version, claimed_at,"
        " started_at, created_at, expires_at)"
        " VALUES ('ok-done', 'p', 'i-ready', 'claimed', 'v', now(), NULL, now(), now() + interval '1 hour'),"
        " ('not-opened', 'p', 'i-warm', 'claimed', 'v', now() - interval '2 h', NULL,"
        " now() - interval '2 h', now() - interval '1 h')"
    )
    conn.execute(
        "INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)"
        " VALUES ('q', 'i-ready', 'v', 'warming', now() - interval '1 h', NULL, now() - interval '1 s')"
    )
    key(conn, "/v1/runs/ok-open/events", {"events": [{"seq": 2, "type": "log"}]})
    # A run past its cap: trimmed through 1,002, its rows 1,001 and 1,002 awaiting their chunk.
    with conn.transaction():
        conn.execute(
            "INSERT INTO ledger.runs (run_id, status, last_seq, events_trimmed_through)"
            " VALUES ('ok-trimmed', 'running', 1005, 1002)"
        )
        conn.execute(
            "INSERT INTO ledger.run_events (run_id, seq, type, payload, run_created_at)"
            " SELECT run_id, s, 'log', '{}', created_at FROM ledger.runs, generate_series(1001, 1005) s"
            " WHERE run_id = 'ok-trimmed'"
        )


BROKEN = {
    "a gap in the seqs": (
        "without a gap",
        "INSERT INTO ledger.run_events (run_id, seq, type, run_created_at)"
        " SELECT 'ok-open', 4, 'log', created_at FROM ledger.runs WHERE run_id = 'ok-open';"
        " UPDATE ledger.runs SET last_seq = 4 WHERE run_id = 'ok-open'",
    ),
    "last_seq behind the events": (
        "without a gap",
        "INSERT INTO ledger.run_events (run_id, seq, type, run_created_at)"
        " SELECT 'ok-open', 3, 'log', created_at FROM ledger.runs WHERE run_id = 'ok-open'",
    ),
    "a trimmed row below its watermark's chunk": (
        "only inside the chunk",
        "INSERT INTO ledger.run_events (run_id, seq, type, run_created_at)"
        " SELECT 'ok-trimmed', 1000, 'log', created_at FROM ledger.runs WHERE run_id = 'ok-trimmed'",
    ),
    "a gap above the watermark": (
        "without a gap",
        "DELETE FROM ledger.run_events WHERE run_id = 'ok-trimmed' AND seq = 1003",
    ),
    "an event after the terminal one": (
        "it is the run's last event",
        "INSERT INTO ledger.run_events (run_id, seq, type, run_created_at)"
        " SELECT 'ok-done', 3, 'log', created_at FROM ledger.runs WHERE run_id = 'ok-done';"
        " UPDATE ledger.runs SET last_seq = 3 WHERE run_id = 'ok-done'",
    ),
    "two terminal events": (
        "at most one terminal event",
        "INSERT INTO ledger.run_events (run_id, seq, type, payload, run_created_at)"
        " SELECT 'ok-done', 3, 'terminal', '{\"status\": \"completed\"}', created_at"
        " FROM ledger.runs WHERE run_id = 'ok-done';"
        " UPDATE ledger.runs SET last_seq = 3 WHERE run_id = 'ok-done'",
    ),
    "a terminal state without its event": (
        "exactly when its terminal state is set",
        "UPDATE ledger.runs SET terminal_status = 'failed', status = 'failed', completed_at = now()"
        " WHERE run_id = 'ok-empty'",
    ),
    "a terminal event without the state": (
        "exactly when its terminal state is set",
        "INSERT INTO ledger.run_events (run_id, seq, type, payload, run_created_at)"
        " SELECT 'ok-open', 3, 'terminal', '{\"status\": \"failed\"}', created_at"
        " FROM ledger.runs WHERE run_id = 'ok-open';"
        " UPDATE ledger.runs SET last_seq = 3 WHERE run_id = 'ok-open'",
    ),
    "a terminal event disagreeing with the state": (
        "and they agree",
        "UPDATE ledger.runs SET terminal_status = 'failed', status = 'failed' WHERE run_id = 'ok-done'",
    ),
    "a pool entry expiring before it was made": (
        "a pool entry",
        "UPDATE ledger.pool_entries SET expires_at = created_at WHERE id = 'i-warm'",
    ),
    "a pool tally that lost count": (
        "tallies add up to its entries",
        "UPDATE ledger.pool_tallies SET entries = entries + 1"
        " WHERE slot = (SELECT min(slot) FROM ledger.pool_tallies)",
    ),
    "a started mapping started before it was claimed": (
        "a mapping's timestamps",
        "UPDATE ledger.run_mappings SET started_at = claimed_at - interval '1 s' WHERE run_id = 'ok-open'",
    ),
    "an instance serving two live runs": (
        "at most one live run",
        "INSERT INTO ledger.run_mappings (run_id, pool, instance_id, state, version, claimed_at,"
        " created_at, expires_at) VALUES ('ok-empty', 'p', 'i-1', 'claimed', 'v', now(), now(),"
        " now() + interval '1 hour')",
    ),
    "an instance serving a run it was not claimed for, still offered": (
        "no live pool entry is an instance that serves a live run",
        "INSERT INTO ledger.run_mappings (run_id, pool, instance_id, state, version, claimed_at,"
        " started_at, created_at, expires_at) VALUES ('ok-empty', 'default', 'i-warm', 'started', 'v',"
        " now(), now(), now(), now() + interval '1 hour')",
    ),
    "an instance serving a run not opened yet, still offered": (
        "no live pool entry is an instance that serves a live run",
        "INSERT INTO ledger.run_mappings (run_id, pool, instance_id, state, version, claimed_at,"
        " created_at, expires_at) VALUES ('not-opened-2', 'p', 'i-ready', 'claimed', 'v',"
        " now(), now(), now() + interval '1 hour')",
    ),
    "an instance in two pools": (
        "a live entry of at most one pool",
        "INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)"
        " VALUES ('q', 'i-warm', 'v', 'warming', now(), NULL, now() + interval '1 hour')",
    ),
    "a key whose digest is not its scope's": (
        "scope digest",
        "UPDATE ledger.idempotency_keys SET scope_digest = repeat('a', 64)",
    ),
    "an acknowledged append that is not stored": (
        "acknowledged event seq 2",
        "DELETE FROM ledger.run_events WHERE run_id = 'ok-open' AND seq = 2;"
        " UPDATE ledger.runs SET last_seq = 1 WHERE run_id = 'ok-open'",
    ),
}


@pytest.fixture
def seeded(clean_database_url: str) -> Iterator[str]:
    with psycopg.connect(clean_database_url, autocommit=True) as conn:
        consistent(conn)
    try:
        yield clean_database_url
    finally:
        delete_all_rows(clean_database_url)


def test_a_consistent_database_passes(seeded: str) -> None:
    assert violations(seeded) == []


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_broken_rule_is_named(seeded: str, case: str) -> None:
    expected, statements = BROKEN[case]
    with psycopg.connect(seeded, autocommit=True) as conn:
        for statement in statements.split("; "):
            conn.execute(statement)
    found = violations(seeded)
    assert any(expected in problem for problem in found), found
