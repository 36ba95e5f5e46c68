"""The lean read path is taken: a long-poll or a tail whose query is plainly the route's is answered
without FastAPI solving a single dependency (the point of `ledger.service.read_route`), its
refusals included; a request it leaves to the route is solved as usual. A change that quietly sends
these reads back through FastAPI fails here, though every answer would stay the same."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import fastapi.routing
import httpx
import pytest
from fastapi import FastAPI

from ledger.service.app import create_app
from ledger.service.settings import ServiceSettings

TOKEN = "in-process-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Solves:
    """Counts FastAPI's dependency solving (one call per routed request, more with sub-solves)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        solve = fastapi.routing.solve_dependencies

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return await solve(*args, **kwargs)

        monkeypatch.setattr(fastapi.routing, "solve_dependencies", counted)


@pytest.fixture
async def http(clean_database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    app: FastAPI = create_app(ServiceSettings(watchdog=False), clean_database_url, [TOKEN])
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        base = "http://in-process"
        async with httpx.AsyncClient(transport=transport, base_url=base, headers=AUTH) as client:
            for run_id, ended in (("r-open", False), ("r-ended", True)):
                assert (await client.post("/v1/runs", json={"run_id": run_id})).status_code == 200
                line = {"events": [{"type": "log", "line": "x"}]}
                assert (await client.post(f"/v1/runs/{run_id}/events", json=line)).status_code == 200
                if ended:
                    done = await client.put(f"/v1/runs/{run_id}/terminal", json={"status": "completed"})
                    assert done.is_success
            yield client


# (path and query, extra headers, the status)
DIRECT = [
    ("/v1/runs/r-open/events", {}, 200),
    ("/v1/runs/r-open/events?after=0&timeout_ms=10&limit=5", {}, 200),
    ("/v1/runs/r-open/events?after=yesterday", {}, 422),
    ("/v1/runs/r-missing/events", {}, 404),
    ("/v1/runs/r-open/events", {"Authorization": "Bearer wrong"}, 401),
    ("/v1/runs/r-ended/events/stream?after=0", {}, 200),
    ("/v1/runs/r-ended/events/stream", {"Last-Event-ID": "2"}, 204),
    ("/v1/runs/r-ended/events/stream", {"Last-Event-ID": "soon"}, 422),
    ("/v1/runs/r-missing/events/stream", {}, 404),
]


@pytest.mark.parametrize(("target", "headers", "status"), DIRECT, ids=[f"{t} {h}" for t, h, _ in DIRECT])
async def test_a_plain_read_is_answered_without_solving_a_dependency(
    http: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
    target: str,
    headers: dict[str, str],
    status: int,
) -> None:
    solves = Solves(monkeypatch)
    answer = await http.get(target, headers=headers)
    assert answer.status_code == status, answer.text
    assert solves.count == 0


# What the lean path leaves to the route: an undeclared parameter, one given twice, an integer
# FastAPI reads in a spelling other than plain digits, two Last-Event-ID headers.
ROUTED = [
    ("/v1/runs/r-open/events?via=route", {}, 200),
    ("/v1/runs/r-open/events?after=0&after=0", {}, 200),
    ("/v1/runs/r-open/events?limit=+5", {}, 200),
    ("/v1/runs/r-open/events?timeout_ms=soon", {}, 422),
    ("/v1/runs/r-ended/events/stream?after=2&via=route", {}, 204),
]


@pytest.mark.parametrize(("target", "headers", "status"), ROUTED, ids=[t for t, _, _ in ROUTED])
async def test_anything_else_goes_to_the_route(
    http: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
    target: str,
    headers: dict[str, str],
    status: int,
) -> None:
    solves = Solves(monkeypatch)
    answer = await http.get(target, headers=headers)
    assert answer.status_code == status, answer.text
    assert solves.count >= 1


async def test_two_last_event_ids_go_to_the_route(
    http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    solves = Solves(monkeypatch)
    headers = httpx.Headers([("Last-Event-ID", "2"), ("Last-Event-ID", "2")])
    answer = await http.get("/v1/runs/r-ended/events/stream", headers=headers)
    assert answer.status_code == 204, answer.text
    assert solves.count >= 1
