"""A run id is checked once, where it enters: the HTTP edge checks the path's run id and hands the
routes a `RunId`, which the ingest store and the run log take as it is; the direct transport checks
the one it is handed; a library caller's plain string is checked once by the store it calls. A
status upload's key fields (`upload_seq`, `producer_attempt`, `last_checkpoint_at`, the body's
`run_id`) are checked once too: read before the rest of the body, for the late-duplicate answer,
and taken as read by the body's validation.

The service runs in process (httpx's ASGI transport, with its lifespan); every call of the rules
(`ledger.validate.run_id`, `ledger.validate.required_integer`) is counted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from ledger import validate
from ledger.db import Database
from ledger.ingest.store import apply_status_upload
from ledger.reporting.direct import DirectTransport
from ledger.service.app import create_app
from ledger.service.settings import ServiceSettings

TOKEN = "in-process-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def client(clean_database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    app: FastAPI = create_app(ServiceSettings(watchdog=False), clean_database_url, [TOKEN])
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://in-process", headers=AUTH) as http:
            yield http


@pytest.fixture
def run_id_checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    checked: list[object] = []
    real = validate.run_id

    def counted(field: str, value: object) -> str:
        checked.append(value)
        return real(field, value)

    monkeypatch.setattr(validate, "run_id", counted)
    yield checked


# The fields of a status upload's key, each an integer checked by `validate.required_integer`.
KEY_FIELDS = ("upload_seq", "producer_attempt", "last_checkpoint_at")


@pytest.fixture
def key_checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The key fields checked, by name, in order."""
    checked: list[str] = []
    real = validate.required_integer

    def counted(field: str, value: object, **bounds: Any) -> int:
        if field in KEY_FIELDS:
            checked.append(field)
        return real(field, value, **bounds)

    monkeypatch.setattr(validate, "required_integer", counted)
    yield checked


UPLOAD = {
    "status": "completed",
    "upload_seq": 1,
    "live_logs": ["one"],
    "live_log_total_count": 1,
    "live_node_progress": {"n1": {"state": "running"}},
}


async def test_a_status_upload_checks_its_run_id_once(
    client: httpx.AsyncClient, run_id_checks: list[object]
) -> None:
    # The first upload opens the run, appends, and ends it: every layer of the run log is crossed.
    answer = await client.post("/v1/runs/r-once/status", json=UPLOAD)
    assert answer.status_code == 200, answer.text
    assert answer.json()["terminal_set"] is True
    assert run_id_checks == ["r-once"]
    run_id_checks.clear()
    # A read and an append, likewise.
    assert (await client.get("/v1/runs/r-once")).status_code == 200
    assert run_id_checks == ["r-once"]


async def test_an_append_served_by_the_fast_route_checks_its_run_id_once(
    client: httpx.AsyncClient, run_id_checks: list[object]
) -> None:
    assert (await client.post("/v1/runs", json={"run_id": "r-append"})).status_code in (200, 201)
    run_id_checks.clear()
    answer = await client.post("/v1/runs/r-append/events", json={"events": [{"type": "log", "line": "x"}]})
    assert answer.status_code == 200, answer.text
    assert run_id_checks == ["r-append"]


async def test_the_edge_still_refuses_a_bad_run_id_and_a_dot_segment(client: httpx.AsyncClient) -> None:
    bad = await client.post("/v1/runs/a%2Fb/status", json=UPLOAD)
    assert (bad.status_code, bad.json()["error"]) == (422, "run_id: must not contain '/'")
    # `%2E%2E` reaches the route as `..`: a run so named could never be addressed again.
    dots = await client.post("/v1/runs/%2E%2E/status", json=UPLOAD)
    assert (dots.status_code, dots.json()["error"]) == (
        422,
        "run_id: must not be '.' or '..' (a URL path cannot address it)",
    ), dots.text


async def test_a_library_caller_s_string_is_checked_once(db: Database, run_id_checks: list[object]) -> None:
    answer = await apply_status_upload(db, "r-lib", dict(UPLOAD))
    assert answer["terminal_set"] is True
    assert run_id_checks == ["r-lib"]


KEYED: dict[str, Any] = {**UPLOAD, "status": "running", "producer_attempt": 1, "last_checkpoint_at": 5}


async def test_a_status_upload_checks_each_key_field_once(
    client: httpx.AsyncClient, key_checks: list[str]
) -> None:
    """An upload applied, a late duplicate of it and the next one: each checks each key field once
    (the late duplicate's read of the key is what answers it; an applied upload's body validation
    takes the key as read)."""
    for seq, duplicate in ((1, False), (1, True), (2, False)):
        answer = await client.post("/v1/runs/r-key/status", json={**KEYED, "upload_seq": seq})
        assert answer.status_code == 200, answer.text
        assert answer.json()["duplicate"] is duplicate
        assert key_checks == list(KEY_FIELDS), (seq, duplicate)
        key_checks.clear()


async def test_a_key_field_or_a_foreign_run_id_is_refused_as_the_body_validation_names_it(
    client: httpx.AsyncClient,
) -> None:
    """A key field read before the body is still refused with its own field and words, and the first
    bad field of the body is the one named: a bad status before a bad `upload_seq`."""
    refusals: list[tuple[dict[str, Any], str]] = [
        ({"upload_seq": 0}, "upload_seq: must be >= 1"),
        ({"upload_seq": 1, "producer_attempt": -1}, "producer_attempt: must be >= 0"),
        ({"upload_seq": 1, "last_checkpoint_at": "5"}, "last_checkpoint_at: must be an integer, got str"),
        (
            {"upload_seq": 1, "run_id": "r-other"},
            "run_id: 'r-other' does not match the run 'r-bad' in the URL",
        ),
        (
            {"upload_seq": 0, "status": "done"},
            "status: must be one of running, interrupted, completed, failed, cancelled, got 'done'",
        ),
    ]
    for fields, error in refusals:
        answer = await client.post("/v1/runs/r-bad/status", json={**KEYED, **fields})
        assert (answer.status_code, answer.json()["error"]) == (422, error), fields


async def test_the_direct_transport_checks_the_run_id_it_is_handed_once(
    db: Database, run_id_checks: list[object], key_checks: list[str]
) -> None:
    answer = await DirectTransport(db).upload_once({**KEYED, "run_id": "r-direct", "upload_seq": 1})
    assert answer["duplicate"] is False
    assert run_id_checks == ["r-direct"]
    assert key_checks == list(KEY_FIELDS)
