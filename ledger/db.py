"""Connections: which Postgres to use, and the async connection pool the operations run on.

Operations take a `Database` and run their statements through `transaction()`, which hands out an
`AsyncConnection` inside one transaction; the pool stays small because waiting (long-polls) never
holds a connection - wake-ups come from the single listener (`ledger.listener`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from ledger.config import Settings, load_settings
from ledger.embedded import EmbeddedPostgres

Row = dict[str, Any]
Conn = psycopg.AsyncConnection[Row]


class DatabaseUnavailable(Exception):
    """Postgres could not be reached; the message says where it was looked for."""


def resolve_url(settings: Settings | None = None) -> tuple[str, EmbeddedPostgres | None]:
    """The URL to connect to, starting (or reusing) the embedded server when none is configured.

    The returned handle, when not None, keeps the embedded server up; `stop()` releases it.
    """
    settings = settings or load_settings()
    if settings.database_url is not None:
        return settings.database_url, None
    server = EmbeddedPostgres(settings.data_dir)
    return server.url(), server


async def _configure(conn: Conn) -> None:
    # Application name makes our sessions recognisable in pg_stat_activity.
    await conn.execute("SET application_name = 'run-ledger'")
    await conn.commit()


class Database:
    """An async connection pool on one Postgres database."""

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10) -> None:
        self.url = url
        self.pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs={"row_factory": dict_row},
            configure=_configure,
            open=False,
            name="run-ledger",
        )

    async def open(self) -> None:
        try:
            await self.pool.open(wait=True, timeout=15)
        except psycopg.OperationalError as exc:
            raise DatabaseUnavailable(f"cannot connect to Postgres: {exc}") from None

    async def close(self) -> None:
        await self.pool.close()

    async def __aenter__(self) -> Database:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """A pooled connection; the pool commits on a clean exit and rolls back on an error."""
        async with self.pool.connection() as conn:
            yield conn

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Conn]:
        """A pooled connection inside one transaction (committed on a clean exit)."""
        async with self.pool.connection() as conn, conn.transaction():
            yield conn
