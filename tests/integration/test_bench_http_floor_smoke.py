"""`bench/http_floor.py --quick --json` on a database of its own, and the floor's honesty.

The floor (`bench/floor_app.py`) is worth measuring only while it answers what our service answers:
the same status, headers and body for a long-poll and a tail woken by one append. That is checked
here against our app in process, so a change to our answer that the floor does not follow fails
(both driven over ASGI directly: what uvicorn then writes around the answer is the same for both).
The bench run is checked for its shape only; timings are never asserted (the machine is shared).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Scope

from bench.floor_app import FloorApp
from tests.integration.bench_runs import database_of_its_own, quick_json
from tests.integration.in_process import AUTH, TOKEN

FIGURES = ("poll_p50", "poll_p99", "sse_p50", "sse_p99", "poll_cpu_us", "sse_cpu_us")
RUN = "floor-honesty"


@pytest.fixture
def bench_database_url(pg_admin_url: str) -> Iterator[str]:
    with database_of_its_own(pg_admin_url, "ledger_bench_floor") as url:
        yield url


@pytest.mark.timeout(120)
def test_quick_floor_bench_measures_both_servers(bench_database_url: str) -> None:
    document = quick_json(bench_database_url, ["bench/http_floor.py"], timeout_s=100)
    readers = document["readers"]
    assert readers > 0
    assert set(document["servers"]) == {"ours", "floor"}
    for server, figures in document["servers"].items():
        assert set(figures) == set(FIGURES), server
        assert all(figures[name] > 0 for name in FIGURES), (server, figures)
    assert len(document["rounds"]) == 1
    for server, measured in document["rounds"][0].items():
        assert measured["poll_answers"] == readers and measured["sse_answers"] == readers, server
    assert len(document["load_average"]["start"]) == len(document["load_average"]["end"]) == 3


async def woken(
    app: ASGIApp, http: httpx.AsyncClient, path: str, until: bytes
) -> tuple[int, list[Any], bytes]:
    """The status, headers and body `app` sends for GET `path` once an append wakes it, up to the
    body's `until` (a tail never ends: the client then goes away)."""
    query = path.partition("?")[2]
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path.partition("?")[0],
        "raw_path": path.partition("?")[0].encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"in-process"), (b"authorization", f"Bearer {TOKEN}".encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    sent: list[Message] = []
    arrived, gone = asyncio.Event(), asyncio.Event()
    requested = False

    async def receive() -> Message:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)
        if until in b"".join(m.get("body", b"") for m in sent):
            arrived.set()

    async def waiting() -> float:
        text = (await http.get("/metrics")).text
        return next(float(x.split()[1]) for x in text.splitlines() if x.startswith("ledger_waiters "))

    assert (await http.post("/v1/runs", json={"run_id": RUN})).status_code == 200
    answering = asyncio.create_task(app(scope, receive, send))
    async with asyncio.timeout(10):
        while await waiting() < 1:  # noqa: ASYNC110 - a gauge read over HTTP, not an event
            await asyncio.sleep(0.01)
        line = {"events": [{"type": "log", "line": "wake"}]}
        assert (await http.post(f"/v1/runs/{RUN}/events", json=line)).status_code == 200
        await arrived.wait()
        gone.set()
        await answering
    start = sent[0]
    assert start["type"] == "http.response.start"
    body = b"".join(m.get("body", b"") for m in sent[1:])
    # The one figure that differs: when the event was appended.
    return start["status"], list(start["headers"]), re.sub(rb'"ts":\d+', b'"ts":0', body)


@pytest.mark.parametrize(
    ("path", "until"),
    [
        (f"/v1/runs/{RUN}/events?after=0&timeout_ms=5000", b'"terminal":null}'),
        (f"/v1/runs/{RUN}/events/stream?after=0", b'"wake"}\n\n'),
    ],
    ids=["long-poll", "tail"],
)
async def test_the_floor_answers_what_our_service_answers(
    app: FastAPI, client: httpx.AsyncClient, path: str, until: bytes
) -> None:
    floor = FloorApp()
    transport = httpx.ASGITransport(app=floor)
    async with httpx.AsyncClient(transport=transport, base_url="http://in-process", headers=AUTH) as http:
        theirs = await woken(floor, http, path, until)
    ours = await woken(app, client, path, until)
    assert theirs == ours
