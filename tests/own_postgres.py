"""An embedded Postgres of a test's own, which the test may stop, start, or freeze backends of.

Never the shared test server: stopping that would fail every other test of the session. Tests that
use it are marked `own_postgres` (deselected when an external backend is asked for).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from ledger import migrate
from ledger.embedded import EmbeddedPostgres


@dataclass
class OwnPostgres:
    """An embedded Postgres of this test's own, migrated to head."""

    handle: EmbeddedPostgres
    url: str

    def stop(self) -> None:
        server = self.handle._server
        with type(server)._lock:
            server._stop()
        try:
            psycopg.connect(self.url, connect_timeout=2).close()
        except psycopg.OperationalError:
            return
        raise AssertionError("Postgres still answers after it was stopped")

    def start(self) -> None:
        server = self.handle._server
        with type(server)._lock:
            server.ensure_postgres_running()
        assert self.handle.url() == self.url

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def own_postgres() -> Iterator[OwnPostgres]:
    """A server in a directory of its own outside pytest's: run as root, the wheel's server runs as
    another user, which must traverse the path; every pytest session of this user makes its
    temporary root private again as it starts, so a restart under it fails while another session
    (a second suite run) begins."""
    data_dir = Path(tempfile.mkdtemp(prefix="ledger-own-pg-"))
    try:
        handle = EmbeddedPostgres(data_dir)
        url = handle.url()
        migrate.upgrade(url)
        try:
            yield OwnPostgres(handle, url)
        finally:
            handle.stop()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
