"""Where the test suite's Postgres comes from, and the databases it makes on it.

Order (STYLE.md, "Postgres in tests"): `LEDGER_TEST_DATABASE_URL` or `LEDGER_DATABASE_URL`; else a
testcontainers Postgres when `LEDGER_TEST_BACKEND=docker` and a Docker engine answers; else the
embedded wheel with durability turned off (a throwaway server). One migrated template database per
schema version, cloned into one database per xdist worker.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from ledger import migrate
from ledger.config import validate_database_url
from ledger.embedded import EmbeddedPostgres

ROOT = Path(__file__).resolve().parent.parent


def external_url() -> str | None:
    for var in ("LEDGER_TEST_DATABASE_URL", "LEDGER_DATABASE_URL"):
        raw = os.environ.get(var, "").strip()
        if raw:
            return validate_database_url(raw, source=var)
    return None


@contextmanager
def docker_server() -> Iterator[str]:
    import docker  # type: ignore[import-untyped]
    from testcontainers.postgres import PostgresContainer  # type: ignore[import-untyped]

    docker.from_env().ping()
    with PostgresContainer("postgres:16-alpine", driver=None) as container:
        yield validate_database_url(container.get_connection_url())


@contextmanager
def embedded_server(data_dir: Path) -> Iterator[str]:
    server = EmbeddedPostgres(data_dir)
    url = server.url()
    # Throwaway server: durability buys nothing and costs commit latency.
    with psycopg.connect(url, autocommit=True) as conn:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = off").format(sql.Identifier(setting)))
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield url
    finally:
        server.stop()


def with_database(url: str, database: str) -> str:
    """The same server URL, pointing at another database."""
    return urlunsplit(urlsplit(url)._replace(path="/" + database))


def _schema_fingerprint() -> str:
    digest = hashlib.sha256()
    for path in sorted((ROOT / "alembic" / "versions").glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def ensure_template(admin_url: str) -> str:
    """A database migrated to head, made once per schema version and reused across runs."""
    name = f"ledger_tpl_{_schema_fingerprint()}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        # Serialise xdist workers (and concurrent sessions) building the same template.
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (name,))
        try:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if not exists:
                building = name + "_building"
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(building)))
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(building)))
                migrate.upgrade(with_database(admin_url, building))
                conn.execute(
                    sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                        sql.Identifier(building), sql.Identifier(name)
                    )
                )
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (name,))
    return name


def clone_database(admin_url: str, template: str, name: str) -> str:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        drop_database(conn, name)
        info: Any = conn.info
        strategy = sql.SQL(" STRATEGY FILE_COPY") if info.server_version >= 150000 else sql.SQL("")
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template))
            + strategy
        )
    return with_database(admin_url, name)


def drop_database(conn: psycopg.Connection[Any], name: str) -> None:
    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def create_empty_database(admin_url: str, name: str) -> str:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        drop_database(conn, name)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return with_database(admin_url, name)
