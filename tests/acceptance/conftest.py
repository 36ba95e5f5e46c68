"""The real `ledger serve`, started once per session as a subprocess, driven over HTTP.

Tests use their own run ids and pool names (uuid), so they share one server and one database
without cleaning between tests.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
TOKENS = ("acceptance-token-one", "acceptance-token-two")
START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    base_url: str
    token: str
    log_path: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self, **kwargs: Any) -> httpx.Client:
        kwargs.setdefault("timeout", 30)
        return httpx.Client(base_url=self.base_url, headers=self.headers, **kwargs)

    def async_client(self, **kwargs: Any) -> httpx.AsyncClient:
        kwargs.setdefault("timeout", 30)
        return httpx.AsyncClient(base_url=self.base_url, headers=self.headers, **kwargs)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def start_server(database_url: str, work_dir: Path, **env_overrides: str) -> Server:
    """Start `python -m ledger.cli serve` and wait until /readyz answers 200."""
    port = free_port()
    work_dir.mkdir(parents=True, exist_ok=True)
    log_path = work_dir / "server.log"
    env = {
        **os.environ,
        "LEDGER_DATABASE_URL": database_url,
        "LEDGER_API_TOKENS": ",".join(TOKENS),
        "LEDGER_DATA_DIR": str(work_dir / "data"),
        "LEDGER_SSE_KEEPALIVE_S": "0.3",
        "LEDGER_SHUTDOWN_GRACE_S": "5",
        **env_overrides,
    }
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "ledger.cli", "serve", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, f"http://127.0.0.1:{port}", TOKENS[0], log_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"ledger serve exited with {process.returncode}:\n{server.log()}")
        try:
            if httpx.get(server.base_url + "/readyz", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            stop_server(server)
            raise RuntimeError(f"ledger serve not ready after {START_TIMEOUT_S}s:\n{server.log()}")
        time.sleep(0.1)


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


@pytest.fixture(scope="session")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One running service for the session (a module may override it), on this worker's database."""
    running = start_server(database_url, tmp_path_factory.mktemp("serve"))
    yield running
    stop_server(running)


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as http:
        yield http


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"
