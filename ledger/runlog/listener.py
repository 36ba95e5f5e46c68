"""One LISTEN connection per process, fanning run-log NOTIFYs out to in-memory waiters.

Design note. Appending transactions `NOTIFY ledger_events_v1, '{"run_id": ..., "seq": ...}'`;
Postgres delivers it at commit. This module holds the process's single autocommit connection that
LISTENs on that channel and wakes the waiters registered for the run. A notification is only a
hint: a woken waiter re-reads from its own cursor, so nothing depends on the payload's seq and
duplicate or coalesced wake-ups are harmless.

Wake-ups can be lost only while the connection is down, so:

- the loop reads notifications with a timeout and runs `SELECT 1`, bounded by `probe_timeout_s`,
  every `keepalive_s`: that finds a connection that died without an error, or whose backend or
  network froze (nothing arrives, nothing fails), within `keepalive_s + probe_timeout_s`; TCP
  keepalives on the socket catch a peer that vanished even while no probe is in flight;
- when the connection is found dead, and again when it is re-established (with exponential
  backoff), every waiter is woken to re-read;
- while it is down, a waiter waits at most `fallback_poll_s` before re-reading (a bounded poll).

Waiters never hold a database connection: 1,000 long-polls cost one listening connection plus a
pool connection for the moment each re-reads.

Two kinds of waiter. A `_Waiter` is one reader with its own wake-up (durable streams). A `RunWatch`
is every reader of one run at once: a notification costs one tick and one call of each callback
queued for the run's next wake-up, however many readers wait, so the run log can start one read for
all readers of a page and hand each the answer (see `ledger.runlog.fanout`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Final

import psycopg
from psycopg import sql

from ledger import tracing
from ledger.db import bounded
from ledger.runlog.events import parse_notify_payload

__all__ = [
    "APPLICATION_NAME",
    "CHANNEL",
    "ListenConn",
    "Listener",
    "RunWatch",
]

_log = logging.getLogger(__name__)

CHANNEL: Final = "ledger_events_v1"
APPLICATION_NAME: Final = "run-ledger-listener"
_DEFAULT_FALLBACK_POLL_S: Final = 2.0
_DEFAULT_KEEPALIVE_S: Final = 1.0
_DEFAULT_PROBE_TIMEOUT_S: Final = 2.0
_DEFAULT_BACKOFF_INITIAL_S: Final = 0.05
_DEFAULT_BACKOFF_MAX_S: Final = 2.0
# libpq options of the listening connection: a bounded connect, and TCP keepalives that give up
# on a silent peer after about idle + interval * count seconds.
_CONNECT_OPTIONS: Final[dict[str, Any]] = {
    "connect_timeout": 2,
    "keepalives": 1,
    "keepalives_idle": 2,
    "keepalives_interval": 1,
    "keepalives_count": 2,
}

_KEEPALIVE_SQL: Final = "SELECT 1"

ListenConn = psycopg.AsyncConnection[Any]
_Connect = Callable[[], Awaitable[ListenConn]]


class _Waiter:
    """One reader waiting for new events of one run; register before reading, close when done.

    `visible_after` is a tick of the listener's clock: a read started after it is guaranteed to
    see every commit that woke this waiter (so readers woken together can share one read).
    """

    def __init__(self, listener: Listener, run_id: str) -> None:
        self.run_id = run_id
        self._listener = listener
        self._event = asyncio.Event()
        self._closed = False
        self.visible_after = listener.tick()

    def wake(self) -> None:
        self.visible_after = self._listener.tick()
        self._event.set()

    async def wait(self, seconds: float) -> bool:
        """Wait for a wake-up, at most `seconds` (at most the fallback poll while the
        listener is down). True when woken; either way the caller should re-read."""
        listener = self._listener
        if not listener.connected:
            seconds = min(seconds, listener.fallback_poll_s)
        listener.waits += 1
        try:
            async with asyncio.timeout(seconds):
                await self._event.wait()
            woken = True
        except TimeoutError:
            listener.timeouts += 1
            self.visible_after = listener.tick()  # a poll: only a read from now on will do
            woken = False
        # Cleared before the caller re-reads: a commit during that read sets it again.
        self._event.clear()
        return woken

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._listener._unregister(self)

    def __enter__(self) -> _Waiter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class RunWatch:
    """Every reader of one run in this process (`readers`), woken together.

    `woken_at` is the listener tick of the run's last wake-up (at first, of the watch's making): a
    reader whose last read started before it must read again, and any read started after it sees
    every commit whose notification came before. `on_next_wake` queues a callback for the next
    wake-up only; it is called with that wake-up's tick (`forget` drops it before then). `waiting`
    counts the readers waiting right now (metrics).
    """

    __slots__ = ("_callbacks", "readers", "run_id", "waiting", "woken_at")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.readers = 0
        self.waiting = 0
        self.woken_at = 0
        self._callbacks: list[Callable[[int], None]] = []

    def on_next_wake(self, callback: Callable[[int], None]) -> None:
        self._callbacks.append(callback)

    def forget(self, callback: Callable[[int], None]) -> None:
        """Drop a callback queued by `on_next_wake` that is no longer wanted (if still queued)."""
        with contextlib.suppress(ValueError):
            self._callbacks.remove(callback)

    @property
    def pending(self) -> int:
        """Callbacks queued for the next wake-up."""
        return len(self._callbacks)

    def _wake(self, tick: int) -> None:
        self.woken_at = tick
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(tick)


class Listener:
    """The process's LISTEN connection and its waiters by run id.

    `connected`, `reconnects`, `waiter_count` and the counters (`notifications` received, `wakeups`
    of waiters by a notification, `waits` started, `timeouts` of waits) are for readiness and metrics.
    """

    def __init__(
        self,
        database_url: str,
        *,
        channel: str = CHANNEL,
        fallback_poll_s: float = _DEFAULT_FALLBACK_POLL_S,
        keepalive_s: float = _DEFAULT_KEEPALIVE_S,
        probe_timeout_s: float = _DEFAULT_PROBE_TIMEOUT_S,
        backoff_initial_s: float = _DEFAULT_BACKOFF_INITIAL_S,
        backoff_max_s: float = _DEFAULT_BACKOFF_MAX_S,
        connect: _Connect | None = None,
    ) -> None:
        self.database_url = database_url
        self.channel = channel
        self.fallback_poll_s = fallback_poll_s
        self.keepalive_s = keepalive_s
        self.probe_timeout_s = probe_timeout_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self._connect_fn = connect or self._connect
        self._waiters: dict[str, set[_Waiter]] = {}
        self._watches: dict[str, RunWatch] = {}
        self._conn: ListenConn | None = None
        self._task: asyncio.Task[None] | None = None
        self._first_attempt: asyncio.Event | None = None
        self.connected = False
        self.reconnects = 0
        self.notifications = 0
        self.wakeups = 0
        self.waits = 0
        self.timeouts = 0
        self.backend_pid: int | None = None
        self._ticks = itertools.count(1)

    # -- waiters -----------------------------------------------------------------------------

    def tick(self) -> int:
        """A logical clock of this process's event loop: wake-ups and reads are ordered by it."""
        return next(self._ticks)

    def register(self, run_id: str) -> _Waiter:
        """A waiter for `run_id`, registered now (before the caller reads); close it when done."""
        waiter = _Waiter(self, run_id)
        self._waiters.setdefault(run_id, set()).add(waiter)
        return waiter

    def _unregister(self, waiter: _Waiter) -> None:
        waiters = self._waiters.get(waiter.run_id)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del self._waiters[waiter.run_id]

    def watch(self, run_id: str) -> RunWatch:
        """Count a reader of `run_id` in (before it reads); `unwatch` it when done."""
        watch = self._watches.get(run_id)
        if watch is None:
            watch = self._watches[run_id] = RunWatch(run_id)
            # Wake-ups of the run before now went unrecorded: count them all as of now.
            watch.woken_at = self.tick()
        watch.readers += 1
        return watch

    def unwatch(self, watch: RunWatch) -> None:
        watch.readers -= 1
        if watch.readers == 0 and self._watches.get(watch.run_id) is watch:
            del self._watches[watch.run_id]

    @property
    def waiter_count(self) -> int:
        waiters = sum(len(waiters) for waiters in self._waiters.values())
        return waiters + sum(watch.readers for watch in self._watches.values())

    def _wake_run(self, run_id: str) -> None:
        for waiter in self._waiters.get(run_id, ()):
            self.wakeups += 1
            waiter.wake()
        watch = self._watches.get(run_id)
        if watch is not None:
            self.wakeups += watch.waiting
            watch._wake(self.tick())

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.wake()
        for watch in list(self._watches.values()):
            watch._wake(self.tick())

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start listening; returns after the first connection attempt (connected or retrying)."""
        if self._task is not None:
            return
        self._first_attempt = asyncio.Event()
        # Its probes (a `SELECT 1` a second) are upkeep: not traced unless asked.
        with tracing.upkeep():
            self._task = asyncio.create_task(self._run(), name="ledger-listener")
        await self._first_attempt.wait()

    async def stop(self) -> None:
        """Stop listening and close the connection; waiters fall back to polling."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close_conn()
        self._wake_all()

    async def __aenter__(self) -> Listener:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _connect(self) -> ListenConn:
        return await psycopg.AsyncConnection.connect(
            self.database_url, autocommit=True, application_name=APPLICATION_NAME, **_CONNECT_OPTIONS
        )

    async def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        self.connected = False
        self.backend_pid = None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def _run(self) -> None:
        assert self._first_attempt is not None
        delay = self.backoff_initial_s
        first = True
        while True:
            try:
                conn = await self._connect_fn()
                self._conn = conn
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            except Exception as exc:
                await self._close_conn()
                _log.warning("listener: cannot connect (%s); retrying in %.2fs", exc, delay)
                self._first_attempt.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.backoff_max_s)
                continue
            self.backend_pid = conn.info.backend_pid
            self.connected = True
            if not first:
                self.reconnects += 1
            first = False
            self._first_attempt.set()
            # Whatever committed while we were not listening: everyone re-reads.
            self._wake_all()
            connected_at = asyncio.get_running_loop().time()
            try:
                await self._listen(conn)
            except Exception as exc:  # any failure: the connection is suspect, start over
                _log.warning("listener: connection lost (%s); reconnecting", exc)
            await self._close_conn()
            self._wake_all()
            # A connection that dies right away (e.g. the server keeps dropping it) must not make us
            # spin: back off unless it had been healthy for a keepalive period.
            if asyncio.get_running_loop().time() - connected_at < self.keepalive_s:
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.backoff_max_s)
            else:
                delay = self.backoff_initial_s

    async def _listen(self, conn: ListenConn) -> None:
        while True:
            async for notify in conn.notifies(timeout=self.keepalive_s):
                self.notifications += 1
                parsed = parse_notify_payload(notify.payload)
                if parsed is not None:
                    self._wake_run(parsed[0])
            # No error while reading proves little on a silent network; a bounded query does.
            await bounded(conn, conn.execute(_KEEPALIVE_SQL), self.probe_timeout_s)
