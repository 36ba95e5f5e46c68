"""The tests' own Postgres, as the `ledger.testing` plugin hands it out, on whichever backend runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from ledger.testing import drop_database, drop_orphaned_databases, reused_server_dir, worker_database

LOOPBACK = "127.0.0.1"


def test_the_server_stores_text_as_utf8(pg_admin_url: str) -> None:
    # An SQL_ASCII server hands psycopg bytes where the ledger expects str.
    with psycopg.connect(pg_admin_url) as conn:
        assert conn.execute("SHOW server_encoding").fetchone() == ("UTF8",)
        assert conn.execute("SELECT 'ü€'::text").fetchone() == ("ü€",)


@pytest.mark.docker_backend
def test_a_docker_server_is_reached_on_loopback_and_asks_for_a_password(pg_admin_url: str) -> None:
    import docker

    url = urlsplit(pg_admin_url)
    assert url.hostname == LOOPBACK
    client = docker.from_env()
    try:
        bindings = [
            binding
            for container in client.containers.list()
            for binding in container.ports.get("5432/tcp") or []
            if binding["HostPort"] == str(url.port)
        ]
    finally:
        client.close()
    # Published on the loopback interface only, not on every one.
    assert [binding["HostIp"] for binding in bindings] == [LOOPBACK]
    # Like the official image: TCP connections need the password, so the tests cannot lean on trust.
    without_password = urlunsplit(url._replace(netloc=f"{url.username}@{url.hostname}:{url.port}"))
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(without_password, connect_timeout=10).close()


def test_worker_databases_of_ended_sessions_are_dropped_and_live_ones_kept(pg_admin_url: str) -> None:
    # A session killed before its teardown leaves its worker database on a server kept across
    # sessions; the next session drops it, and never one whose process still runs.
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(ended.stdout)
    names = {
        "dead": f"ledger_test_gw7_{dead_pid}",
        "live": f"ledger_test_gw7_{os.getpid()}",
        "dead with a purpose": f"ledger_test_integration_gw7_{dead_pid}",
        "live with a purpose": f"ledger_test_integration_gw7_{os.getpid()}",
        "other": "ledger_test_not_a_worker_db",
    }
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        for name in names.values():
            drop_database(conn, name)
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        drop_orphaned_databases(pg_admin_url)
        with psycopg.connect(pg_admin_url) as conn:
            present = {row[0] for row in conn.execute("SELECT datname FROM pg_database").fetchall()}
        assert names["dead"] not in present and names["dead with a purpose"] not in present
        assert names["live"] in present and names["live with a purpose"] in present
        assert names["other"] in present
    finally:
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            for name in names.values():
                drop_database(conn, name)


def test_the_reused_server_lives_in_the_cache_dir_per_postgres_version() -> None:
    import platformdirs

    from ledger.embedded import postgres_version

    where = reused_server_dir()
    assert where.parent == Path(platformdirs.user_cache_dir("run-ledger"))
    assert where.name == f"test-postgres-{postgres_version()}"


def test_a_worker_databases_purpose_is_lowercase_letters(pg_admin_url: str) -> None:
    for purpose in ("Integration", "it_1", "it-1", "é"):
        with pytest.raises(ValueError, match="lowercase letters"), worker_database(pg_admin_url, purpose):
            pass


def test_the_integration_tests_database_is_not_the_one_the_session_services_share(
    database_url: str, clean_database_url: str, pg_admin_url: str
) -> None:
    # A service another suite starts for the session runs on `ledger_test_<worker>_<pid>`, and its
    # watchdog's sweeps must not reach rows these tests date by a manual clock.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "master")
    assert urlsplit(database_url).path == f"/ledger_test_integration_{worker}_{os.getpid()}"
    assert clean_database_url == database_url
