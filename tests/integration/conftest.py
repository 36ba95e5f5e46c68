"""Fixtures the integration tests share: a database of their own, and the service in process
(`tests.integration.in_process`).

The database is apart from the one the other suites' services run on.

A service started for the acceptance suite lives for the whole session on the worker's database,
and its watchdog sweeps with the real clock. Rows an integration test dates by its manual clock
(January 2026: long past in real time) look expired or stalled to it, and a sweep landing between
a test's write and its check removed them: a failure only a loaded machine shows. Here every
integration test, and the plugin's `ledger_service` the integration tests ask for, use a database
of their own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from fastapi import FastAPI

from ledger import testing
from ledger.service.app import create_app
from ledger.service.settings import ServiceSettings
from ledger.testing_service import Service, serve_in_process
from tests.integration.in_process import AUTH, TOKEN


@pytest.fixture(scope="session")
def database_url(pg_admin_url: str) -> Iterator[str]:
    with testing.worker_database(pg_admin_url, "integration") as url:
        yield url


@pytest.fixture(scope="session")
def ledger_service(
    database_url: str, ledger_service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    """The plugin's service, on this suite's database (a session fixture is made once, so the
    plugin's own would stay on the database of whichever suite asked for it first)."""
    service = serve_in_process(database_url, tmp_path_factory.mktemp("ledger-service"), **ledger_service_env)
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def service_tokens() -> list[str]:
    """The tokens the in-process service accepts (a test module overrides it for more)."""
    return [TOKEN]


@pytest.fixture
async def app(clean_database_url: str, service_tokens: list[str]) -> AsyncIterator[FastAPI]:
    """The service on this worker's emptied database, without its watchdog, its lifespan entered."""
    application = create_app(ServiceSettings(watchdog=False), clean_database_url, service_tokens)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client of `app` that sends `TOKEN`."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://in-process", headers=AUTH) as http:
        yield http
