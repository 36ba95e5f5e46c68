"""Connections: which Postgres to use, and the async connection pool the operations run on.

Operations take a `Database` and run their statements through `transaction()`, which hands out an
`AsyncConnection` inside one transaction; the pool stays small because waiting (long-polls) never
holds a connection - wake-ups come from the single listener (`ledger.runlog.listener`).

Design notes:

- **Faults.** Every connection is checked when it is handed out (`check_connection`, one empty
  round trip), so after a Postgres restart the pool replaces its dead connections instead of
  giving them to a request. A checkout waits at most `timeout_s`; then `PoolTimeout`. Both that
  and a connection lost mid-request are `DB_FAULTS`: the service answers them with 503 and
  `Retry-After`, never 500.
- **Shared transaction.** `shared_transaction()` opens one transaction that every
  `transaction()`/`connection()` of the same `Database` joins, as a savepoint, for as long as it
  is open in the current task (a context variable). The service's Idempotency-Key handling runs a
  request inside one: the key row and everything the request writes commit together or not at
  all, and the request needs one pooled connection, not two (two would deadlock a busy pool).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, Final

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from ledger.config import Settings, load_settings
from ledger.embedded import EmbeddedPostgres
from ledger.errors import DatabaseUnavailable

Row = dict[str, Any]
Conn = psycopg.AsyncConnection[Row]


# Faults of the database, not of the request: connection lost (server restart, admin shutdown),
# pool checkout timed out (`psycopg_pool.PoolTimeout` is an OperationalError), lock or statement
# timeout. Retrying later may succeed.
DB_FAULTS: Final = (psycopg.OperationalError, DatabaseUnavailable)

DEFAULT_POOL_TIMEOUT_S: Final = 10.0

# The transaction `Database.shared_transaction` opened in this task, and its database.
_shared: ContextVar[tuple[Database, Conn] | None] = ContextVar("ledger_shared_transaction", default=None)


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

    def __init__(
        self, url: str, *, min_size: int = 1, max_size: int = 10, timeout_s: float = DEFAULT_POOL_TIMEOUT_S
    ) -> None:
        self.url = url
        self.pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs={"row_factory": dict_row},
            configure=_configure,
            # A connection that died with the server (restart, failover) is replaced, not handed out.
            check=AsyncConnectionPool.check_connection,
            timeout=timeout_s,
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

    def _joined(self) -> Conn | None:
        shared = _shared.get()
        return shared[1] if shared is not None and shared[0] is self else None

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """A pooled connection; the pool commits on a clean exit and rolls back on an error.

        Inside `shared_transaction` it is the shared connection, in a savepoint.
        """
        joined = self._joined()
        if joined is not None:
            async with joined.transaction():
                yield joined
            return
        async with self.pool.connection() as conn:
            yield conn

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Conn]:
        """A pooled connection inside one transaction (committed on a clean exit).

        Inside `shared_transaction` it is a savepoint of the shared one: an error rolls back what
        this block wrote, a clean exit keeps it for the shared transaction's commit.
        """
        joined = self._joined()
        if joined is not None:
            async with joined.transaction():
                yield joined
            return
        async with self.pool.connection() as conn, conn.transaction():
            yield conn

    @asynccontextmanager
    async def shared_transaction(self) -> AsyncIterator[Conn]:
        """One transaction that this task's `transaction()`/`connection()` calls join until it ends.

        Committed on a clean exit, rolled back on an error. Not re-entrant.
        """
        if _shared.get() is not None:
            raise RuntimeError("a shared transaction is already open in this task")
        async with self.pool.connection() as conn, conn.transaction():
            token = _shared.set((self, conn))
            try:
                yield conn
            finally:
                _shared.reset(token)
