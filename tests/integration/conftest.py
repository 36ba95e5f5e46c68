"""Fixtures the integration tests share: the service in process (`tests.integration.in_process`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from ledger.service.app import create_app
from ledger.service.settings import ServiceSettings
from tests.integration.in_process import AUTH, TOKEN


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
