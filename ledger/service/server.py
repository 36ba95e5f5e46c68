"""Running the app under uvicorn, with a shutdown that drains waiting readers first.

uvicorn's graceful shutdown waits for in-flight requests before it runs the lifespan shutdown; a
long-poll would hold that up for its whole timeout and an SSE stream forever. So the server tells
the app to drain as soon as shutdown starts: waiters return what they have, streams end (clients
resume with their cursor), ordinary requests finish, then the lifespan stops the listener.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import resource
import signal
import socket
import threading
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp

from ledger.service.http_limits import HttpLimits, apply_limits
from ledger.service.settings import ServiceSettings
from ledger.service.state import Services

__all__ = [
    "LedgerServer",
    "build_server",
    "run_until_stopped",
    "serve_workers",
]

_log = logging.getLogger("ledger.service")


class LedgerServer(uvicorn.Server):
    """uvicorn's server, draining the app's waiters at the start of shutdown.

    Without `app` (a worker process of `serve_workers`), the app is the one uvicorn loaded. An app
    that is not ours (the bench's floor, `bench/floor_app.py`) has nothing to drain.
    """

    def __init__(self, config: uvicorn.Config, app: ASGIApp | None = None) -> None:
        super().__init__(config)
        self.ledger_app = app

    def _app(self) -> FastAPI | None:
        app: Any = self.ledger_app or getattr(self.config, "loaded_app", None)
        for _ in range(8):  # uvicorn wraps the app in its own middleware, each holding `.app`
            if isinstance(app, FastAPI):
                return app
            app = getattr(app, "app", None)
        return None

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app = self._app()
        svc = getattr(app.state, "services", None) if app is not None else None
        if isinstance(svc, Services):
            svc.drain.start()
        await super().shutdown(sockets)


def _http_limits(settings: ServiceSettings) -> HttpLimits:
    return HttpLimits(
        max_header_bytes=settings.max_header_bytes,
        max_headers=settings.max_headers,
        keepalive_timeout_s=settings.keepalive_timeout_s,
        request_timeout_s=settings.request_timeout_s,
        max_connections=settings.max_connections,
    )


def _uvicorn_options(settings: ServiceSettings) -> dict[str, Any]:
    """uvicorn's options for the service."""
    return {
        "lifespan": "on",
        "log_config": None,
        # One JSON access line per request comes from our middleware instead.
        "access_log": False,
        "timeout_graceful_shutdown": max(1, round(settings.shutdown_grace_s)),
        "server_header": False,
        "timeout_keep_alive": settings.keepalive_timeout_s,
        # Beyond this many connections or requests in flight, uvicorn answers 503.
        "limit_concurrency": settings.max_connections,
    }


def _raise_open_files_limit(wanted: int) -> None:
    """Raise this process's soft limit on open files toward `wanted` (at most the hard limit):
    the common default of 1024 would fail requests long before the connection cap does."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def build_server(app: ASGIApp, settings: ServiceSettings, **overrides: Any) -> LedgerServer:
    # Connections, plus the pool, the listener, logs and a margin.
    _raise_open_files_limit(settings.max_connections + settings.db_pool_size + 100)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        **{**_uvicorn_options(settings), **overrides},
    )
    return LedgerServer(apply_limits(config, _http_limits(settings)), app)


def _worker(config: uvicorn.Config, sockets: list[socket.socket]) -> None:
    """One worker process: serve the shared socket until SIGTERM."""
    LedgerServer(config).run(sockets=sockets)


def serve_workers(
    factory: str, settings: ServiceSettings, workers: int, *, sock: socket.socket | None = None
) -> None:
    """Serve with `workers` processes on one socket (`sock`, else bound here), each calling
    `factory` ("module:function") for its app (its own pool, listener and watchdog). Returns when
    SIGTERM/SIGINT to this process has stopped them all, each with its graceful shutdown; a worker
    that dies is replaced."""
    config = uvicorn.Config(
        factory, factory=True, host=settings.host, port=settings.port, **_uvicorn_options(settings)
    )
    apply_limits(config, _http_limits(settings))
    # Inherited by the workers.
    _raise_open_files_limit(settings.max_connections + settings.db_pool_size + 100)
    if sock is None:
        sock = config.bind_socket()
    spawn = multiprocessing.get_context("spawn")
    stop = threading.Event()
    handled = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, lambda signum, frame: stop.set()) for sig in handled}

    def started() -> multiprocessing.process.BaseProcess:
        process = spawn.Process(target=_worker, args=(config, [sock]), daemon=False)
        process.start()
        return process

    processes = []
    try:
        processes = [started() for _ in range(workers)]
        while not stop.wait(1.0):
            for index, process in enumerate(processes):
                if not process.is_alive():
                    _log.warning("worker %s exited with %s; starting another", process.pid, process.exitcode)
                    processes[index] = started()
    finally:
        for process in processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        for process in processes:
            process.join(settings.shutdown_grace_s + 10)
            if process.is_alive():
                process.kill()
                process.join()
        sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Stopped(Exception):
    pass


def _stopped(signum: int, frame: FrameType | None) -> None:
    raise _Stopped


def run_until_stopped(server: LedgerServer, sockets: list[socket.socket] | None = None) -> None:
    """Serve until SIGTERM/SIGINT, shut down gracefully, then return normally.

    After its graceful shutdown uvicorn re-raises the signal it caught, and the default SIGTERM
    action would end the process on the spot - before the caller releases the embedded Postgres.
    With these handlers in place that re-raise ends here instead.
    """
    handled = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, _stopped) for sig in handled}
    try:
        server.run(sockets=sockets)
    except _Stopped:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
