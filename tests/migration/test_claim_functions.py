"""Migration 0007: the claim's functions and the counts' index come with it and go with it."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from ledger import migrate
from tests import postgres

FUNCTIONS = ["pool_claim", "pool_collect", "pool_counts"]
INDEX = "ix_pool_entries_version_expires_at"


@pytest.fixture
def empty_url(pg_admin_url: str, worker_id: str) -> Iterator[str]:
    name = f"ledger_mig7_{worker_id}"
    yield postgres.create_empty_database(pg_admin_url, name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        postgres.drop_database(conn, name)


def present(url: str) -> tuple[list[str], bool]:
    with psycopg.connect(url) as conn:
        functions = conn.execute(
            """
            SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'ledger' AND p.proname = ANY(%s) ORDER BY 1
            """,
            (FUNCTIONS,),
        ).fetchall()
        index = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"ledger.{INDEX}",)).fetchone()
    assert index is not None
    return [r[0] for r in functions], bool(index[0])


def test_0007_adds_the_functions_and_the_index_and_its_downgrade_removes_them(empty_url: str) -> None:
    migrate.upgrade(empty_url, "0006")
    assert present(empty_url) == ([], False)
    migrate.upgrade(empty_url, "0007")
    assert present(empty_url) == (FUNCTIONS, True)
    migrate.downgrade(empty_url, "0006")
    assert present(empty_url) == ([], False)
    migrate.upgrade(empty_url)
    assert present(empty_url) == (FUNCTIONS, True)
