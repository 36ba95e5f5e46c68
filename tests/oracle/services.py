"""What the oracle drives: an event loop thread, the service under uvicorn, a restartable Postgres.

* `LoopThread` runs one asyncio loop for the whole session; tests are synchronous and hand it one
  coroutine per example, so pools and clients outlive examples without pytest-asyncio's per-test
  loops getting in the way.
* `ServiceThread` serves `ledger.service` with uvicorn in a thread (and loop) of its own on a fixed
  127.0.0.1 port, so it can be stopped and started again on the same address between uploads.
* `OwnPostgres` is an embedded server in a directory of its own, migrated, that the restart test
  stops and starts for real.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psycopg
from psycopg import sql

from ledger import migrate
from ledger.db import Database
from ledger.embedded import EmbeddedPostgres
from ledger.service.app import create_app
from ledger.service.server import LedgerServer, build_server
from ledger.service.settings import ServiceSettings

T = TypeVar("T")

TOKEN = "oracle-token"
START_TIMEOUT_S = 30.0


class LoopThread:
    """An asyncio loop running in a daemon thread; `run` executes a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="oracle-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServiceThread:
    """The ledger service under uvicorn in its own thread, restartable on the same port."""

    def __init__(self, database_url: str, port: int | None = None) -> None:
        self.database_url = database_url
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.token = TOKEN
        self.restarts = 0
        self._server: LedgerServer | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _serve(self, server: LedgerServer) -> None:
        try:
            asyncio.run(server.serve())
        except BaseException as exc:  # reported by start()
            self._error = exc

    def start(self) -> None:
        settings = ServiceSettings(port=self.port, watchdog=False, shutdown_grace_s=1.0, db_pool_size=4)
        app = create_app(settings, self.database_url, [self.token])
        server = build_server(app, settings)
        self._error = None
        thread = threading.Thread(target=self._serve, args=(server,), name="oracle-service", daemon=True)
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the ledger service did not start on {self.base_url}: {self._error!r}")
            time.sleep(0.005)
        self._server, self._thread = server, thread

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.should_exit = True
        thread.join(START_TIMEOUT_S)
        self._server = self._thread = None
        if thread.is_alive():
            raise RuntimeError("the ledger service did not stop")

    def restart(self) -> None:
        self.stop()
        self.start()
        self.restarts += 1

    def ready(self) -> bool:
        try:
            return httpx.get(self.base_url + "/readyz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False


class OwnPostgres:
    """An embedded Postgres in a directory of its own, migrated once; `stop`/`start` are real."""

    DATABASE = "ledger_oracle"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._server: EmbeddedPostgres | None = EmbeddedPostgres(data_dir)
        admin_url = self._server.url()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            # A throwaway server: durability buys nothing here (ALTER SYSTEM survives restarts).
            for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = off").format(sql.Identifier(setting)))
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.DATABASE)))
        self.url = self._server.url(self.DATABASE)
        migrate.upgrade(self.url)
        self.restarts = 0

    @property
    def running(self) -> bool:
        return self._server is not None

    def stop(self) -> None:
        """Stop the server for real (``pg_ctl stop``, fast mode: clients are disconnected)."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def start(self) -> None:
        if self._server is None:
            self._server = EmbeddedPostgres(self.data_dir)
            if self._server.url(self.DATABASE) != self.url:
                raise RuntimeError("the restarted server answers on another address")
            self.restarts += 1

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()


class Pools:
    """Database pools opened on the loop thread, closed there at the end of the session."""

    def __init__(self, loop_thread: LoopThread) -> None:
        self.loop_thread = loop_thread
        self.dbs: list[Database] = []

    def open(self, url: str) -> Database:
        async def opened() -> Database:
            db = Database(url, min_size=1, max_size=4)
            await db.open()
            return db

        db = self.loop_thread.run(opened())
        self.dbs.append(db)
        return db

    def close(self) -> None:
        for db in self.dbs:
            self.loop_thread.run(db.close())
