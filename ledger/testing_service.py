"""A running ledger service for tests: in this process (`serve_in_process`, what the pytest plugin's
`ledger_service` fixture hands out) or as a `ledger serve` subprocess (`start_server`).

In process, uvicorn serves the app in a thread of its own on a socket bound to 127.0.0.1 before it
starts: no interpreter to start, no second import of the web stack, no migration (the database is
a clone of the migrated template), which is most of what a `ledger serve` subprocess costs a small
project on every run. A test that needs the service as a process of its own (its signals, its
exit code, its whole log) starts one with `start_server`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from ledger.service.server import LedgerServer

__all__ = [
    "InProcessService",
    "Server",
    "Service",
    "free_port",
    "serve_in_process",
    "start_server",
    "stop_server",
]

_SERVER_START_TIMEOUT_S = 60.0
_LOOPBACK = "127.0.0.1"
# The loggers whose records an in-process service writes to its log file: the service's own and
# uvicorn's errors (an unhandled error, a failed start).
_SERVICE_LOGGERS = ("ledger", "uvicorn.error")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((_LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(kw_only=True)
class Service:
    """A running ledger service: where it listens, the token it accepts, its log."""

    url: str
    token: str
    log_path: Path

    @property
    def base_url(self) -> str:
        """The same as `url`."""
        return self.url

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self, **kwargs: Any) -> httpx.Client:
        """A plain httpx client with the token (for requests `LedgerClient` would not send)."""
        kwargs.setdefault("timeout", 30)
        return httpx.Client(base_url=self.url, headers=self.headers, **kwargs)

    def async_client(self, **kwargs: Any) -> httpx.AsyncClient:
        kwargs.setdefault("timeout", 30)
        return httpx.AsyncClient(base_url=self.url, headers=self.headers, **kwargs)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


@dataclass(kw_only=True)
class Server(Service):
    """A `ledger serve` subprocess (`start_server`); its log is everything the process printed."""

    process: subprocess.Popen[bytes]


@dataclass(kw_only=True)
class InProcessService(Service):
    """The service under uvicorn in a thread of this process (`serve_in_process`); its log holds
    the warnings and errors of the service's loggers while it runs. `stop` ends it."""

    server: LedgerServer
    thread: threading.Thread
    handler: logging.Handler

    def stop(self, timeout: float = 30.0) -> None:
        """Graceful shutdown (waiters drained, the listener stopped), waited for up to `timeout`."""
        self.server.should_exit = True
        self.thread.join(timeout)
        for name in _SERVICE_LOGGERS:
            logging.getLogger(name).removeHandler(self.handler)
        self.handler.close()
        if self.thread.is_alive():
            raise RuntimeError(f"the ledger service at {self.url} did not stop within {timeout:g} s")


def _service_env(work_dir: Path, database_url: str, env_overrides: Mapping[str, str]) -> dict[str, str]:
    """What the service reads its settings from: this process's environment, the test database,
    a data dir in `work_dir`, a token of its own unless `env_overrides` sets the variable."""
    from ledger.auth import API_TOKENS_VAR

    return {
        **os.environ,
        "LEDGER_DATABASE_URL": database_url,
        "LEDGER_DATA_DIR": str(work_dir / "data"),
        API_TOKENS_VAR: secrets.token_urlsafe(24),
        **env_overrides,
    }


def serve_in_process(database_url: str, work_dir: Path, **env_overrides: str) -> InProcessService:
    """Serve `database_url` (migrated already: the plugin's databases are clones of the migrated
    template) from this process on a free 127.0.0.1 port, ready (`/readyz` answers 200) when this
    returns.

    The settings are `ledger serve`'s, read from this process's environment with `env_overrides`
    over it (never written to `os.environ`). The service gets a token of its own in
    `LEDGER_API_TOKENS` unless `env_overrides` sets that variable; set to "" the service
    generates one in its data dir (`work_dir/data`), as `ledger serve` does.
    """
    from ledger import auth
    from ledger.config import load_settings
    from ledger.service.address import bind_socket
    from ledger.service.app import create_app
    from ledger.service.server import build_server
    from ledger.service.settings import load_service_settings

    env = _service_env(work_dir, database_url, env_overrides)
    data_dir = work_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    tokens = auth.configured_tokens(env) or [auth.ensure_token_file(data_dir).token]
    keys = auth.token_keys(data_dir, env)
    sock = bind_socket(_LOOPBACK, 0)
    port = sock.getsockname()[1]
    settings = load_service_settings(env, host=_LOOPBACK, port=port)
    app = create_app(settings, database_url, tokens, keys.keyring, listen_url=load_settings(env).listen_url)
    server = build_server(app, settings)

    log_path = work_dir / "server.log"
    handler = logging.FileHandler(log_path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    for name in _SERVICE_LOGGERS:
        logging.getLogger(name).addHandler(handler)
    failures: list[BaseException] = []

    def serve() -> None:
        try:
            asyncio.run(server.serve(sockets=[sock]))
        except BaseException as exc:  # said by the wait below, or logged by uvicorn
            failures.append(exc)
        finally:
            sock.close()

    thread = threading.Thread(target=serve, name=f"ledger-service-{port}", daemon=True)
    service = InProcessService(
        url=f"http://{_LOOPBACK}:{port}",
        token=tokens[0],
        log_path=log_path,
        server=server,
        thread=thread,
        handler=handler,
    )

    def gone() -> str | None:
        if thread.is_alive():
            return None
        # uvicorn logs a failed start (the database unreachable, say) rather than raising it.
        how = f" ({failures[0]!r})" if failures else ""
        return f"it stopped{how}; its log:\n{service.log()}"

    thread.start()
    try:
        _wait_ready(service.url, gone)
    except BaseException:
        service.stop()
        raise
    return service


def _wait_ready(url: str, gone: Callable[[], str | None]) -> None:
    """Until `url`'s `/readyz` answers 200 (the pool and the listener are up); `gone()` says why
    the service cannot come up any more (None while it still may)."""
    deadline = time.monotonic() + _SERVER_START_TIMEOUT_S
    with httpx.Client(timeout=2) as http:
        while True:
            reason = gone()
            if reason is not None:
                raise RuntimeError(f"the ledger service at {url} did not start: {reason}")
            try:
                if http.get(url + "/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the ledger service at {url} not ready after {_SERVER_START_TIMEOUT_S:g} s"
                )
            time.sleep(0.02)


def start_server(database_url: str, work_dir: Path, **env_overrides: str) -> Server:
    """Start `python -m ledger.cli serve` on a free port and wait until `/readyz` answers 200.

    The service gets a token of its own in `LEDGER_API_TOKENS` unless `env_overrides` sets that
    variable; set to "" the service generates one, which is read from its data dir
    (`work_dir/data`). The process's output goes to `work_dir/server.log`.
    """
    from ledger.auth import configured_tokens, read_token_file, token_file

    port = free_port()
    work_dir.mkdir(parents=True, exist_ok=True)
    log_path = work_dir / "server.log"
    env = _service_env(work_dir, database_url, env_overrides)
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "ledger.cli", "serve", "--port", str(port)],
            cwd=work_dir,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    tokens = configured_tokens(env)
    server = Server(
        process=process,
        url=f"http://{_LOOPBACK}:{port}",
        token=tokens[0] if tokens else "",
        log_path=log_path,
    )

    def gone() -> str | None:
        if process.poll() is None:
            return None
        return f"ledger serve exited with {process.returncode}"

    try:
        _wait_ready(server.url, gone)
    except RuntimeError as exc:
        stop_server(server)
        raise RuntimeError(f"{exc}\n{server.log()}") from None
    if not server.token:
        server.token = read_token_file(token_file(work_dir / "data")) or ""
    return server


def stop_server(server: Server, timeout: float = 20.0) -> int:
    """SIGTERM (graceful shutdown), then SIGKILL if it does not exit in time; the exit code."""
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(timeout)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
    return server.process.returncode
