"""Shared fixtures: a real Postgres for every test that asks for one (see tests/postgres.py)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack

import psycopg
import pytest

from ledger.db import Database
from ledger.schema import ALL_TABLES
from tests import postgres

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _no_server(reason: str) -> None:
    # In CI a missing server is a failure, never a silent skip.
    if IN_CI:
        pytest.fail(f"no Postgres for the tests: {reason}", pytrace=False)
    pytest.skip(f"no Postgres for the tests: {reason}")


@pytest.fixture(scope="session")
def pg_admin_url(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Iterator[str]:
    """A URL with rights to create databases on the test server."""
    with ExitStack() as stack:
        try:
            url = postgres.external_url()
            if url is None and os.environ.get("LEDGER_TEST_BACKEND") == "docker":
                url = stack.enter_context(postgres.docker_server())
            if url is None:
                # xdist workers share one embedded server: the wheel reuses a running one per data dir.
                base = tmp_path_factory.getbasetemp()
                shared = base.parent if worker_id != "master" else base
                url = stack.enter_context(postgres.embedded_server(shared / "embedded-pg"))
        except Exception as exc:
            _no_server(f"{type(exc).__name__}: {exc}")
            raise
        yield url


@pytest.fixture(scope="session")
def database_url(pg_admin_url: str, worker_id: str) -> Iterator[str]:
    """This worker's own database, cloned from the migrated template."""
    template = postgres.ensure_template(pg_admin_url)
    name = f"ledger_test_{worker_id}_{os.getpid()}"
    url = postgres.clone_database(pg_admin_url, template, name)
    yield url
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        postgres.drop_database(conn, name)


def delete_all_rows(url: str) -> None:
    with psycopg.connect(url) as conn:
        for table in ALL_TABLES:
            conn.execute(f"DELETE FROM {table.fullname}")


@pytest.fixture
def clean_database_url(database_url: str) -> str:
    """The worker database with every ledger table emptied (committed tests clean up with DELETE)."""
    delete_all_rows(database_url)
    return database_url


@pytest.fixture
async def db(clean_database_url: str) -> AsyncIterator[Database]:
    """An open `Database` (async pool) on an empty, migrated database."""
    async with Database(clean_database_url, min_size=1, max_size=20) as database:
        yield database
