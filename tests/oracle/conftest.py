"""Fixtures of the oracle tests: one event loop thread, the backends, a Postgres of their own.

Everything is session-scoped and built on first use, so a session that runs no oracle test starts
nothing. Examples use fresh run ids, so they share one database and one service without cleaning.

Each backend has two pools: the harness's own (sheet rows, projections; it is checked after a
Postgres restart, the harness is not under test) and, for the direct transport, the one the
reporter's transport uses (left alone: how it copes with a restart is part of what is tested).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from ledger.db import Database
from ledger.testing import clone_database, drop_database, ensure_template
from tests.oracle import profiles  # noqa: F401  (registers the Hypothesis profiles)
from tests.oracle.harness import Backend, DirectBackend, HttpBackend
from tests.oracle.services import LoopThread, OwnPostgres, Pools, ServiceThread


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    """One event loop for the session, in a thread: database pools and HTTP clients live on it."""
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture(scope="session")
def ledger_service(database_url: str) -> Iterator[ServiceThread]:
    """The real HTTP service (uvicorn in a thread of its own) on this worker's database."""
    service = ServiceThread(database_url)
    service.start()
    yield service
    service.stop()


@pytest.fixture(scope="session")
def direct_backend(loop_thread: LoopThread, database_url: str) -> Iterator[DirectBackend]:
    pools = Pools(loop_thread)
    yield DirectBackend(db=pools.open(database_url), ledger_db=pools.open(database_url))
    pools.close()


@pytest.fixture(scope="session")
def http_backend(
    loop_thread: LoopThread, database_url: str, ledger_service: ServiceThread
) -> Iterator[HttpBackend]:
    pools = Pools(loop_thread)
    yield HttpBackend(db=pools.open(database_url), service=ledger_service)
    pools.close()


@pytest.fixture(scope="session")
def oracle_postgres() -> Iterator[OwnPostgres]:
    """A Postgres server of the oracle's own, migrated (never the shared one: it gets restarted).

    Its directory lies outside pytest's temporary root, which every new pytest session of this user
    makes private again: run as root, the wheel's server runs as another user, and a restart would
    fail while a second suite starts."""
    data_dir = Path(tempfile.mkdtemp(prefix="ledger-oracle-pg-"))
    server = OwnPostgres(data_dir)
    yield server
    server.close()
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def restart_backends(loop_thread: LoopThread, oracle_postgres: OwnPostgres) -> Iterator[dict[str, Backend]]:
    """Both transports on the oracle's own Postgres (and a service of their own on it)."""
    pools = Pools(loop_thread)
    service = ServiceThread(oracle_postgres.url)
    service.start()
    url = oracle_postgres.url
    backends: dict[str, Backend] = {
        "direct": DirectBackend(db=pools.open(url), ledger_db=pools.open(url), pg=oracle_postgres),
        "http": HttpBackend(db=pools.open(url), service=service, pg=oracle_postgres),
    }
    yield backends
    oracle_postgres.start()  # in case an example failed while it was down
    service.stop()
    pools.close()


@pytest.fixture(scope="session")
def failure_database_url(pg_admin_url: str) -> Iterator[str]:
    """A database of the failure oracle's own: its watchdog fails every stalled run it finds, so
    no other test's run may be in it."""
    name = f"ledger_failure_oracle_{os.environ.get('PYTEST_XDIST_WORKER', 'master')}_{os.getpid()}"
    url = clone_database(pg_admin_url, ensure_template(pg_admin_url), name)
    yield url
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        drop_database(conn, name)


@pytest.fixture(scope="session")
def failure_service(failure_database_url: str) -> Iterator[ServiceThread]:
    """The real HTTP service on the failure oracle's database (its own watchdog off: the oracle
    runs the watchdog's pass itself when a scenario says so)."""
    service = ServiceThread(failure_database_url)
    service.start()
    yield service
    service.stop()


@pytest.fixture(scope="session")
def failure_db(loop_thread: LoopThread, failure_database_url: str) -> Iterator[Database]:
    pools = Pools(loop_thread)
    yield pools.open(failure_database_url)
    pools.close()
