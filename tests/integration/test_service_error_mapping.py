"""The service maps the ledger's error tree, and nothing else: the driver's errors become the
ledger's where the stores meet the database, so a fault raised deep in a store answers the same
way whether or not the request carries an Idempotency-Key.

The service runs in process (httpx's ASGI transport, with its lifespan); a store's method is
replaced by one that runs a real statement the database refuses.
"""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pytest
from fastapi import FastAPI

from ledger.db import DB_FAULTS, Database
from ledger.errors import DatabaseUnavailable, LedgerError, LedgerFailure, LedgerUnavailable, SchemaMissing
from tests.integration.in_process import services


async def read_a_missing_table(db: Database) -> None:
    """What a store does on a database whose schema went away under it: a real statement on a
    table that is not there (Postgres answers `UndefinedTable`)."""
    async with db.connection() as conn:
        await conn.execute("SELECT * FROM ledger.no_such_table")


def test_db_faults_are_the_ledger_s_own_errors() -> None:
    assert DB_FAULTS and all(issubclass(fault, LedgerFailure) for fault in DB_FAULTS)
    assert not any(issubclass(fault, psycopg.Error) for fault in DB_FAULTS)


def test_the_service_maps_the_ledger_s_errors_and_no_driver_class(app: FastAPI) -> None:
    # A psycopg error reaching the edge is a bug (500, logged), never an answer of its own.
    handled = set(app.exception_handlers)
    assert {LedgerError, LedgerUnavailable, SchemaMissing} <= handled
    drivers = [
        cls
        for cls in handled
        if isinstance(cls, type) and cls.__module__.startswith(("psycopg", "sqlalchemy"))
    ]
    assert drivers == []


async def test_a_driver_error_in_a_store_reaches_the_service_as_the_ledger_s(app: FastAPI) -> None:
    db = services(app).db
    with pytest.raises(SchemaMissing) as missing:
        await read_a_missing_table(db)
    assert isinstance(missing.value.__cause__, psycopg.errors.UndefinedTable)
    with pytest.raises(DatabaseUnavailable) as lost:
        async with db.connection():
            raise psycopg.OperationalError("server closed the connection unexpectedly")
    assert isinstance(lost.value.__cause__, psycopg.OperationalError)


@pytest.mark.parametrize("idempotency_key", [None, "k-schema"])
async def test_a_schema_missing_mid_request_answers_503_with_its_code(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, idempotency_key: str | None
) -> None:
    svc = services(app)

    async def open_run(*args: Any, **kwargs: Any) -> Any:
        await read_a_missing_table(svc.db)

    monkeypatch.setattr(svc.runlog, "open_run", open_run)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    answer = await client.post("/v1/runs", json={"run_id": "r-schema"}, headers=headers)
    assert answer.status_code == 503, answer.text
    assert answer.json()["code"] == "schema_missing"
    assert "ledger db upgrade" in answer.json()["error"]
    assert answer.headers["retry-after"] == "1"
    # Nothing was kept: once the schema answers again, the same request (same key) is applied.
    monkeypatch.undo()
    again = await client.post("/v1/runs", json={"run_id": "r-schema"}, headers=headers)
    assert again.status_code in (200, 201), again.text
    assert "idempotent-replayed" not in again.headers


async def test_a_schema_missing_on_a_read_answers_503(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = services(app)

    async def get_run(*args: Any, **kwargs: Any) -> Any:
        await read_a_missing_table(svc.db)

    monkeypatch.setattr(svc.runlog, "get_run", get_run)
    answer = await client.get("/v1/runs/r-read")
    assert (answer.status_code, answer.json()["code"]) == (503, "schema_missing")
    assert answer.headers["retry-after"] == "1"
