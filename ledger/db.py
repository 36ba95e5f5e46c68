"""Connections: which Postgres to use, and the async connection pool the operations run on.

Operations take a `Database` and run their statements through `transaction()`, which hands out an
`AsyncConnection` inside one transaction; the pool stays small because waiting (long-polls) never
holds a connection - wake-ups come from the single listener (`ledger.runlog.listener`).

Design notes:

- **Faults.** A connection is checked (one empty round trip, itself bounded) before it is handed
  out whenever it may be dead, so after a Postgres restart or an admin shutdown the pool replaces
  its dead connections instead of giving them to a request; a failed check takes the next one at
  once (psycopg_pool's own check loop would back off a second and more per dead connection). The
  round trip is skipped in the common case, a connection given back moments ago
  (`_RECENT_USE_S`) whose socket has nothing to read: a server that ends a session (restart,
  `pg_terminate_backend`) sends a FATAL message and closes the socket, which makes it readable,
  and an idle session has nothing else to say. A connection idle for longer, one never handed
  out, or any while the database is marked down is checked as before (a frozen backend or a
  silent network leaves the socket quiet; only a round trip finds it). A checkout waits at most
  `timeout_s`; then `PoolTimeout`. Both that and a connection lost mid-request leave the block as
  `DatabaseUnavailable` (`DB_FAULTS`): the service answers them with 503 and `Retry-After`, never
  500.
- **Bounded waits.** `lock_timeout_s` and `statement_timeout_s` are set on every pooled session,
  so a request stuck behind a held row lock or a runaway statement gives its connection back and
  fails (the driver's `LockNotAvailable` or `QueryCanceled`, translated to `DatabaseUnavailable`)
  instead of starving the pool.
- **Fast recovery.** Once a connection is found dead or a connection attempt fails, the database
  counts as *down* and a checkout waits at most `_DOWN_CHECKOUT_S`, so requests fail fast while it
  is away. psycopg_pool doubles its reconnect delay without bound, so each reconnect attempt is
  given up after `_RECONNECT_WINDOW_S` and the next checkout starts a fresh one: while requests
  come, a connection is tried about every second, and the first that succeeds marks the
  database up again. TCP keepalives and a connect timeout bound a silent network.
- **Transaction pooling.** Behind a transaction-mode pooler (PgBouncer), consecutive transactions
  of one connection may run on different server sessions, so with `transaction_pooling` nothing
  is left on a session: no server-side prepared statements (psycopg would prepare a statement on
  one session and execute it on another), and the timeouts are set with `set_config(..., true)`
  at the start of each `transaction()` (one round trip more) instead of once per connection, where
  they would stick to a server session other clients share. Single reads on `connection()` then
  run under the role's own timeouts.
- **Autocommit.** `autocommit()` hands out a connection on which every statement is its own
  transaction: a one-statement operation (an append is one function call) then costs one round
  trip instead of BEGIN, the statement and COMMIT. A connection goes back to the pool in the mode
  it was used in, and the next checkout switches it only when it asks for the other mode: a run of
  appends on one connection switches nothing (two switches per append were a tenth of its
  client's instructions), and every block still gets the mode it asked for. An autocommit block
  has nothing to commit at its end, so it ends without asking the connection; a transaction
  opened in it by hand and left open is rolled back when the connection comes back to the pool.
- **Shared transaction.** `shared_transaction()` opens one transaction that every
  `transaction()`/`connection()` of the same `Database` joins, as a savepoint, for as long as it
  is open in the current task (a context variable). The service's Idempotency-Key handling runs a
  request inside one: the key row and everything the request writes commit together or not at
  all, and the request needs one pooled connection, not two (two would deadlock a busy pool).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import socket
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, Final, TypeVar

import psycopg
from psycopg.pq import ConnStatus, TransactionStatus
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ledger import tracing
from ledger.config import Settings, load_settings
from ledger.embedded import EmbeddedPostgres
from ledger.errors import Conflict, DatabaseUnavailable, InvalidInput, SchemaMissing

__all__ = [
    "DB_FAULTS",
    "Conn",
    "Database",
    "NoAnswer",
    "Row",
    "bounded",
    "check_reachable",
    "driver_errors",
    "resolve_url",
    "sever",
]

Row = dict[str, Any]
Conn = psycopg.AsyncConnection[Row]


# Faults of the database, not of the request: connection lost (server restart, admin shutdown),
# pool checkout timed out, lock or statement timeout. Retrying later may succeed. Only the
# library's own error: every block of the database translates the driver's (`driver_errors`), so
# nothing above the stores catches a psycopg class.
DB_FAULTS: Final = (DatabaseUnavailable,)

_DEFAULT_POOL_TIMEOUT_S: Final = 5.0
# While the database is down, a checkout waits this long: enough for a reconnect already under way
# to land, short enough that a request fails well within a second.
_DOWN_CHECKOUT_S: Final = 0.5
# A connection whose empty round trip takes longer than this is as good as dead.
_CHECK_TIMEOUT_S: Final = 1.0
# A connection given back to the pool less than this long ago, in working order and with nothing
# to read on its socket, is handed out again without the checking round trip. Past it the round
# trip is taken: it bounds how long a frozen backend or a silent network can go unnoticed.
_RECENT_USE_S: Final = 1.0
# How long psycopg_pool keeps retrying one connection attempt (its delays double: 1 s, 2 s...).
_RECONNECT_WINDOW_S: Final = 2.0
# libpq's connect timeout (it rounds to whole seconds, minimum 2) and TCP keepalives: a peer that
# vanished without closing the connection is noticed in about idle + interval * count seconds.
_CONNECT_TIMEOUT_S: Final = 2
_KEEPALIVE_OPTIONS: Final[dict[str, int]] = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 2,
}

_log = logging.getLogger(__name__)

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


_T = TypeVar("_T")


def sever(conn: psycopg.AsyncConnection[Any]) -> None:
    """Shut the connection's socket down under it: whatever waits on it fails at once."""
    with contextlib.suppress(OSError, psycopg.Error):
        sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


class NoAnswer(psycopg.OperationalError):
    """A bounded operation got no answer in time and its connection was severed: slow, which is
    not the same as gone (the bound counts this process's own event loop running late too)."""


async def bounded(conn: psycopg.AsyncConnection[Any], operation: Awaitable[_T], timeout_s: float) -> _T:
    """`operation` on `conn`, given at most `timeout_s`; past that the connection is severed and
    `NoAnswer` (a `psycopg.OperationalError`) raised. Cancelling the operation instead would have
    psycopg ask the server to cancel the query and wait up to 5 s more for an answer that a frozen
    backend or a dead network never gives."""
    task = asyncio.ensure_future(operation)
    # Whichever way this ends (cancelled included), the operation's own error is not left unread.
    task.add_done_callback(_retrieve)
    timed_out = False
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        timed_out = not done
    finally:
        if not task.done():
            sever(conn)
            await asyncio.wait({task})
    if timed_out:
        raise NoAnswer(f"no answer within {timeout_s:g} s: connection closed")
    return task.result()


def _readable(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether the connection's socket has something to read (or is closed) right now."""
    poller = select.poll()
    poller.register(conn.pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@contextlib.contextmanager
def driver_errors() -> Iterator[None]:
    """The driver's errors as the library's, translated once where a block of the database
    ends, so nothing above the stores knows psycopg: a fault of the connection or a timeout is
    `DatabaseUnavailable` (retry later); a unique, foreign-key or exclusion constraint the stored
    rows hold is a `Conflict`; a value the database refuses (a check, a NOT NULL, a number or
    text out of its range) is `InvalidInput`; a missing table is `SchemaMissing`. Every one keeps
    the driver's error as its `__cause__`.

    The library checks its input before it reaches Postgres, so the last two are backstops: they
    are logged, with the SQLSTATE, as the input checks' misses. One check violation is no fault of
    the input: a row for which the event log has no partition at that instant is
    `DatabaseUnavailable`."""
    try:
        yield
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(_first_line(exc)) from exc
    except psycopg.errors.UndefinedTable as exc:
        raise SchemaMissing() from exc
    except (psycopg.IntegrityError, psycopg.DataError) as exc:
        if _no_partition(exc):
            # The row is fine; the event log has no partition for it at this instant (a conversion
            # or an upgrade in flight, a partition being detached): retry later, never 422.
            raise DatabaseUnavailable(_first_line(exc)) from exc
        first_line = _first_line(exc)
        _log.warning("database rejected request input: %s", first_line, extra={"sqlstate": exc.sqlstate})
        if isinstance(exc, psycopg.IntegrityError) and not isinstance(
            exc, psycopg.errors.CheckViolation | psycopg.errors.NotNullViolation
        ):
            raise Conflict(f"conflicts with stored data: {first_line}") from exc
        raise InvalidInput("invalid input", first_line) from exc


def _no_partition(exc: psycopg.Error) -> bool:
    """Postgres found no partition of a partitioned table for a row (a `CheckViolation`)."""
    message = exc.diag.message_primary or ""
    return isinstance(exc, psycopg.errors.CheckViolation) and message.startswith("no partition of relation")


def check_reachable(url: str) -> None:
    """One plain connection to `url`, bounded by the connect timeout: `DatabaseUnavailable` when
    the server refuses it or never answers (a pool would retry in the background instead)."""
    with driver_errors(), psycopg.connect(url, connect_timeout=_CONNECT_TIMEOUT_S, autocommit=True):
        pass


def _milliseconds(seconds: float | None) -> int:
    # 0 is Postgres's "no limit".
    return 0 if seconds is None else max(1, round(seconds * 1000))


class _MostRecentFirst(deque[Any]):
    """psycopg_pool's idle connections, handed out most recently given back first.

    The pool takes from the left and gives back on the right, so it hands out the connection idle
    longest: with ten connections each read then runs on a backend that has slept through the last
    nine, and a woken long-poll's re-read took twice the round trip of the one just used. Giving
    back on the left makes the next checkout the warm one. The pool still shrinks by one when some
    connection stayed idle through `max_idle`.
    """

    def append(self, conn: Any) -> None:
        self.appendleft(conn)


class Database:
    """An async connection pool on one Postgres database.

    `lock_timeout_s` and `statement_timeout_s` (None: no limit) bound every statement run on it;
    `available` is False while the database is known to be unreachable.
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout_s: float = _DEFAULT_POOL_TIMEOUT_S,
        lock_timeout_s: float | None = None,
        statement_timeout_s: float | None = None,
        transaction_pooling: bool = False,
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.lock_timeout_s = lock_timeout_s
        self.statement_timeout_s = statement_timeout_s
        self.transaction_pooling = transaction_pooling
        self.available = True
        # When each connection was last given back in working order (see `_recently_fine`).
        self._given_back: weakref.WeakKeyDictionary[Conn, float] = weakref.WeakKeyDictionary()
        connect_kwargs: dict[str, Any] = {
            "row_factory": dict_row,
            "connect_timeout": _CONNECT_TIMEOUT_S,
            **_KEEPALIVE_OPTIONS,
        }
        if transaction_pooling:
            connect_kwargs["prepare_threshold"] = None
        self.pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs=connect_kwargs,
            configure=self._configure,
            # Checked in `_checkout`, which moves on to the next connection without backing off.
            check=None,
            timeout=timeout_s,
            reconnect_timeout=_RECONNECT_WINDOW_S,
            reconnect_failed=self._reconnect_failed,
            open=False,
            name="run-ledger",
        )
        # Guarded: the idle deque is psycopg_pool's own attribute, and a version without it keeps its
        # order rather than failing.
        if type(getattr(self.pool, "_pool", None)) is deque and not self.pool._pool:
            self.pool._pool = _MostRecentFirst()

    async def _configure(self, conn: Conn) -> None:
        # Application name makes our sessions recognisable in pg_stat_activity.
        await conn.execute("SET application_name = 'run-ledger'")
        if not self.transaction_pooling:
            await self._set_limits(conn, local=False)
        await conn.commit()
        # A new connection is the proof that the database is back.
        self._mark(available=True)

    async def _set_limits(self, conn: Conn, *, local: bool) -> None:
        """`lock_timeout` and `statement_timeout` for the session, or (`local`) for the
        transaction under way."""
        await conn.execute(
            "SELECT set_config('lock_timeout', %s, %s), set_config('statement_timeout', %s, %s)",
            (
                str(_milliseconds(self.lock_timeout_s)),
                local,
                str(_milliseconds(self.statement_timeout_s)),
                local,
            ),
        )

    async def _reconnect_failed(self, pool: AsyncConnectionPool[Conn]) -> None:
        self._mark(available=False)

    def _mark(self, *, available: bool) -> None:
        if available != self.available:
            self.available = available
            if available:
                _log.info("database reachable again")
            else:
                _log.warning("database unreachable: requests fail fast until it answers again")

    async def _checkout(self) -> Conn:
        """A live connection from the pool, or `PoolTimeout` (sooner while the database is down)."""
        started = time.monotonic()
        while True:
            limit = self.timeout_s if self.available else min(self.timeout_s, _DOWN_CHECKOUT_S)
            remaining = started + limit - time.monotonic()
            if remaining <= 0:
                raise PoolTimeout(f"no database connection within {limit:g} s")
            conn = await self.pool.getconn(timeout=remaining)
            if self.available and self._recently_fine(conn):
                return conn
            try:
                await bounded(conn, AsyncConnectionPool.check_connection(conn), _CHECK_TIMEOUT_S)
            except NoAnswer:
                # Replaced, but the database is not called down for it: a burst of answers on a
                # busy machine delays this loop past the bound as a frozen backend would, and a
                # database that is really gone fails the reconnects, which does call it down.
                await self.pool.putconn(conn)
                continue
            except Exception:
                # Dead (the server restarted or went away): the pool closes and replaces it.
                self._mark(available=False)
                await self.pool.putconn(conn)
                continue
            except BaseException:
                await self.pool.putconn(conn)
                raise
            self._mark(available=True)
            return conn

    def _recently_fine(self, conn: Conn) -> bool:
        """Whether `conn` can be handed out without a checking round trip: given back in working
        order moments ago, and nothing (a FATAL message, the end of the stream) arrived since."""
        given_back = self._given_back.get(conn)
        if given_back is None or time.monotonic() - given_back > _RECENT_USE_S:
            return False
        if conn.closed or conn.pgconn.status != ConnStatus.OK:
            return False
        try:
            return not _readable(conn)
        except (OSError, ValueError, psycopg.Error):
            return False

    def _give_back_time(self, conn: Conn) -> None:
        if not conn.closed and conn.pgconn.status == ConnStatus.OK:
            self._given_back[conn] = time.monotonic()
        else:
            self._given_back.pop(conn, None)

    @asynccontextmanager
    async def _pooled(self, *, autocommit: bool = False) -> AsyncIterator[Conn]:
        """A checked connection in the mode asked for (`autocommit`, or transactions), committed on
        a clean exit and rolled back on an error (as psycopg_pool's `connection()` does), given back
        to the pool either way."""
        conn = await self._checkout()
        try:
            if conn.autocommit != autocommit:
                await conn.set_autocommit(autocommit)
            if autocommit:
                # Every statement has committed itself: there is nothing to commit or roll back,
                # and the connection's own block would take its lock to find that out (about 5 µs
                # of client CPU a block). A transaction a caller opened by hand and left open is
                # rolled back by the pool when the connection is given back.
                yield conn
            else:
                async with conn:
                    yield conn
        except (psycopg.OperationalError, DatabaseUnavailable):
            # A block of a shared transaction's savepoint has already translated its fault.
            if conn.closed or conn.pgconn.transaction_status == TransactionStatus.UNKNOWN:
                self._mark(available=False)
            raise
        finally:
            self._give_back_time(conn)
            await self.pool.putconn(conn)

    async def open(self) -> None:
        try:
            # The pool's background tasks (connecting, growing, shrinking) start here and keep this
            # context: the service's own upkeep, not traced unless asked.
            with tracing.upkeep():
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
    async def connection(self, *, autocommit: bool = False) -> AsyncIterator[Conn]:
        """A pooled connection; the pool commits on a clean exit and rolls back on an error. With
        `autocommit`, each statement is its own transaction (a read of one statement: one round
        trip), whatever `transaction_pooling` says (no session setting is made for it).

        Inside `shared_transaction` it is the shared connection, in a savepoint.
        """
        with driver_errors():
            joined = self._joined()
            if joined is not None:
                async with joined.transaction():
                    yield joined
                return
            async with self._pooled(autocommit=autocommit) as conn:
                yield conn

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Conn]:
        """A pooled connection inside one transaction (committed on a clean exit).

        Inside `shared_transaction` it is a savepoint of the shared one: an error rolls back what
        this block wrote, a clean exit keeps it for the shared transaction's commit.
        """
        with driver_errors():
            joined = self._joined()
            if joined is not None:
                async with joined.transaction():
                    yield joined
                return
            async with self._pooled() as conn, conn.transaction():
                if self.transaction_pooling:
                    await self._set_limits(conn, local=True)
                yield conn

    @asynccontextmanager
    async def autocommit(self) -> AsyncIterator[Conn]:
        """A pooled connection in autocommit: each statement is its own transaction, with no
        BEGIN/COMMIT round trips (for operations that are one statement).

        Inside `shared_transaction` it is the shared connection, in a savepoint. With
        `transaction_pooling` it is `transaction()`: the timeouts are set per transaction there.
        """
        if self.transaction_pooling or self._joined() is not None:
            async with self.transaction() as conn:
                yield conn
            return
        with driver_errors():
            async with self._pooled(autocommit=True) as conn:
                yield conn

    @asynccontextmanager
    async def shared_transaction(self) -> AsyncIterator[Conn]:
        """One transaction that this task's `transaction()`/`connection()` calls join until it ends.

        Committed on a clean exit, rolled back on an error. Not re-entrant.
        """
        if _shared.get() is not None:
            raise RuntimeError("a shared transaction is already open in this task")
        with driver_errors():
            async with self._pooled() as conn, conn.transaction():
                if self.transaction_pooling:
                    await self._set_limits(conn, local=True)
                token = _shared.set((self, conn))
                try:
                    yield conn
                finally:
                    _shared.reset(token)
