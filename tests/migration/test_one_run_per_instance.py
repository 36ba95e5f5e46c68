"""Migration 0009: on a database written before it, a claim stops handing out an instance that a
live run holds; its downgrade puts 0007's claim back exactly and removes the view and indexes."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from ledger import migrate
from tests import postgres

ADDED = ["v:instance_runs", "i:ix_pool_entries_id", "i:ix_run_mappings_instance_id"]

# What the bug left: instance 'held' mapped to a live run and still ready in the pool, newest.
LEGACY = (
    "INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)"
    " VALUES ('p', 'held', 'v1', 'ready', now(), now(), now() + interval '5 minutes'),"
    " ('p', 'free', 'v1', 'ready', now(), now() - interval '1 second', now() + interval '5 minutes')",
    "INSERT INTO ledger.run_mappings (run_id, pool, instance_id, state, version, claimed_at,"
    " started_at, created_at, expires_at)"
    " VALUES ('a', 'p', 'held', 'started', 'v1', now(), now(), now(), now() + interval '1 hour')",
)
CLAIM = "SELECT claimed FROM ledger.pool_claim('p', 'v1', %s, %s, NULL, 0, 420000, 3600000, false)"


@pytest.fixture
def empty_url(pg_admin_url: str, worker_id: str) -> Iterator[str]:
    name = f"ledger_mig9_{worker_id}"
    yield postgres.create_empty_database(pg_admin_url, name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        postgres.drop_database(conn, name)


def added(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT relkind::text || ':' || relname FROM pg_class"
            " WHERE relnamespace = 'ledger'::regnamespace AND relname = ANY(%s) ORDER BY relname",
            (["ix_pool_entries_id", "ix_run_mappings_instance_id", "instance_runs"],),
        ).fetchall()
    return [r[0] for r in rows]


def claim_source(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT prosrc FROM pg_proc WHERE proname = 'pool_claim'").fetchone()
    assert row is not None
    return str(row[0])


def claims(url: str) -> list[str | None]:
    """Two claims for new runs, rolled back: which entries they take."""
    taken: list[str | None] = []
    with psycopg.connect(url) as conn, conn.transaction(force_rollback=True):
        for run in ("b", "c"):
            row = conn.execute(CLAIM, (run, run)).fetchone()
            assert row is not None
            taken.append(row[0])
    return taken


def test_0009_stops_claims_taking_a_held_instance_and_downgrades_to_0007_s_claim(empty_url: str) -> None:
    migrate.upgrade(empty_url, "0008")
    shipped = claim_source(empty_url)
    with psycopg.connect(empty_url) as conn:
        for statement in LEGACY:
            conn.execute(statement)
    assert claims(empty_url) == ["held", "free"]  # the bug: a second live run gets 'held'
    migrate.upgrade(empty_url, "0009")
    assert added(empty_url) == ADDED
    assert claims(empty_url) == ["free", None]
    migrate.downgrade(empty_url, "0008")
    assert added(empty_url) == []
    assert claim_source(empty_url) == shipped
    assert claims(empty_url) == ["held", "free"]
