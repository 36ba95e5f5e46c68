"""Migration 0007: the claim's functions, the tallies with their triggers and the counts' index
come with it and go with it; entries already there are tallied on the way up."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from ledger import migrate
from tests import postgres

FUNCTIONS = [
    "pool_claim",
    "pool_collect",
    "pool_counts",
    "pool_fold_tallies",
    "pool_tally",
    "pool_tally_truncate",
]
RELATIONS = ["ix_pool_entries_version_expires_at", "pool_tallies"]


@pytest.fixture
def empty_url(pg_admin_url: str, worker_id: str) -> Iterator[str]:
    name = f"ledger_mig7_{worker_id}"
    yield postgres.create_empty_database(pg_admin_url, name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        postgres.drop_database(conn, name)


def present(url: str) -> tuple[list[str], list[str], list[str]]:
    """The 0007 functions, relations and triggers found in the database."""
    with psycopg.connect(url) as conn:
        functions = conn.execute(
            """
            SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'ledger' AND p.proname = ANY(%s) ORDER BY 1
            """,
            (FUNCTIONS,),
        ).fetchall()
        relations = conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'ledger'::regnamespace"
            " AND relname = ANY(%s) ORDER BY 1",
            (RELATIONS,),
        ).fetchall()
        triggers = conn.execute(
            "SELECT tgname FROM pg_trigger WHERE tgname LIKE 'pool_tally%' ORDER BY 1"
        ).fetchall()
    return [r[0] for r in functions], [r[0] for r in relations], [r[0] for r in triggers]


TRIGGERS = ["pool_tally_delete", "pool_tally_insert", "pool_tally_truncate", "pool_tally_update"]
NOTHING: tuple[list[str], list[str], list[str]] = ([], [], [])
ALL = (sorted(FUNCTIONS), RELATIONS, TRIGGERS)


def test_0007_adds_the_functions_and_the_index_and_its_downgrade_removes_them(empty_url: str) -> None:
    migrate.upgrade(empty_url, "0006")
    assert present(empty_url) == NOTHING
    migrate.upgrade(empty_url, "0007")
    assert present(empty_url) == ALL
    migrate.downgrade(empty_url, "0006")
    assert present(empty_url) == NOTHING
    # 0013 replaces the claim and the collect by their `_v2` versions.
    migrate.upgrade(empty_url, "0012")
    assert present(empty_url) == ALL


def test_entries_already_there_are_tallied(empty_url: str) -> None:
    migrate.upgrade(empty_url, "0006")
    with psycopg.connect(empty_url) as conn:
        conn.execute(
            """
            INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)
            SELECT 'p' || (n % 2), 'i' || n, 'v' || (n % 3),
                   CASE WHEN n % 5 = 0 THEN 'warming' ELSE 'ready' END, now(),
                   CASE WHEN n % 5 = 0 THEN NULL ELSE now() END, now() + interval '1 minute'
            FROM generate_series(1, 60) AS n
            """
        )
    migrate.upgrade(empty_url, "0007")
    with psycopg.connect(empty_url) as conn:
        tallied = conn.execute(
            "SELECT pool, version, sum(entries), sum(ready) FROM ledger.pool_tallies"
            " GROUP BY 1, 2 ORDER BY 1, 2"
        ).fetchall()
        counted = conn.execute(
            "SELECT pool, version, count(*), count(*) FILTER (WHERE state = 'ready') FROM ledger.pool_entries"
            " GROUP BY 1, 2 ORDER BY 1, 2"
        ).fetchall()
    assert len(tallied) == 6
    assert tallied == counted
