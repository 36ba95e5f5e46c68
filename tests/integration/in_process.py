"""The service run in process for a test (httpx's ASGI transport, with the app's lifespan): the
token its client sends, and the app's services. The `app` and `client` fixtures are in this
directory's conftest."""

from __future__ import annotations

from fastapi import FastAPI

from ledger.service.state import Services

TOKEN = "in-process-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def services(app: FastAPI) -> Services:
    svc = app.state.services
    assert isinstance(svc, Services)
    return svc
