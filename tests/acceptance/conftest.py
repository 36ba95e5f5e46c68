"""The real `ledger serve`, driven over HTTP: a subprocess with this suite's settings, shared by the
session as `server` (the plugin's `ledger_service`, overridden: these tests read the process's log
and data dir, and the plugin's own serves from the test process).

Tests use their own run ids and pool names (uuid), so they share one server and one database
without cleaning between tests. A module that needs other settings starts its own with
`start_server` (these settings, its overrides).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ledger import testing
from ledger.testing import Server, free_port, stop_server

__all__ = ["ROOT", "TOKENS", "Server", "free_port", "new_id", "start_server", "stop_server"]

ROOT = Path(__file__).resolve().parents[2]
# Two tokens: Idempotency-Key answers are kept per token, which some tests check.
TOKENS = ("acceptance-token-one", "acceptance-token-two")
# Short keep-alives and grace, so tests of idle streams and shutdown do not wait long.
ACCEPTANCE_ENV = {
    "LEDGER_API_TOKENS": ",".join(TOKENS),
    "LEDGER_SSE_KEEPALIVE_S": "0.3",
    "LEDGER_SHUTDOWN_GRACE_S": "5",
}


def start_server(database_url: str, work_dir: Path, **env_overrides: str) -> Server:
    """A service of the caller's own with this suite's settings (overridable)."""
    return testing.start_server(database_url, work_dir, **{**ACCEPTANCE_ENV, **env_overrides})


@pytest.fixture(scope="session")
def ledger_service_env() -> dict[str, str]:
    # The session's service runs beside every test of the worker on its database, so its watchdog
    # would fail a run a test made stalled (or sweep a mapping it made expired) before the test's
    # own `ledger watchdog --once` saw it, whenever its pass happened to land in between. A test
    # of the service's watchdog starts a service of its own.
    return {**ACCEPTANCE_ENV, "LEDGER_WATCHDOG": "0"}


@pytest.fixture(scope="session")
def ledger_service(
    database_url: str, ledger_service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """`ledger serve` on this worker's database, one per session."""
    running = testing.start_server(
        database_url, tmp_path_factory.mktemp("ledger-service"), **ledger_service_env
    )
    try:
        yield running
    finally:
        stop_server(running)


@pytest.fixture(scope="session")
def server(ledger_service: Server) -> Server:
    """The session's service (a module may override it with one of its own)."""
    return ledger_service


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as http:
        yield http


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"
