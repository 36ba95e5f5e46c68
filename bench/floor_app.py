"""The floor: a bare ASGI app that answers what `ledger serve` answers to a fan-out, under uvicorn as
`ledger serve` runs it.

    .venv/bin/python bench/floor_app.py --port 8000

No FastAPI, no middleware, no database, no token check: waiters are futures in a dict. It serves
what `bench_service.fanout` asks for, with our service's status, headers and body bytes
(`tests/integration/test_bench_http_floor_smoke.py` holds it to that):

- `POST /v1/runs`: the run, 200;
- `GET /v1/runs/{id}/events?after=…&timeout_ms=…`: waits for the run's next append (or the
  timeout), then answers the page: `{"events":[…],"latest_seq":…,"first_seq":…,"terminal":null}`;
- `GET /v1/runs/{id}/events/stream?after=…`: `: stream open`, then each append's events framed as
  `id:` / `event:` / `data:` lines, until the client goes (no keep-alive comments: a fan-out ends
  well within one interval);
- `POST /v1/runs/{id}/events`: appends, and wakes every waiter of the run with one shared encoding;
- `GET /metrics`: `ledger_waiters N`; `GET /readyz`: 200.

It is served by `build_server` and `run_until_stopped` with the settings `ledger serve` reads from
the same environment (uvicorn with httptools and uvloop, our connection limits, the same options),
so what it costs per answer is what uvicorn itself costs: the floor under ours.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.types import Receive, Scope, Send

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

__all__ = ["FloorApp", "main"]

JSON = [(b"content-type", b"application/json")]
STREAM = [
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
    (b"content-type", b"text/event-stream; charset=utf-8"),
]
WAITERS_HELP = b"# HELP ledger_waiters Long-poll and SSE readers waiting for a wake-up.\n"


def encode(value: Any) -> bytes:
    """Compact UTF-8 JSON, as our answers are written."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class Wake:
    """One append's answers, encoded once for every waiter it wakes."""

    page: bytes  # the long-poll's body
    frames: bytes  # the tail's chunk


@dataclass
class Run:
    run_id: str
    created_at: int
    last_seq: int = 0
    waiters: list[asyncio.Future[Wake]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "play_name": None,
            "status": "running",
            "created_at": self.created_at,
            "updated_at": self.created_at,
            "last_seq": self.last_seq,
            "producer_attempt": 0,
            "last_upload_seq": 0,
            "live_log_count": 0,
            "last_heartbeat_at": None,
            "terminal": None,
            "live_node_progress": {},
        }


async def answer(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    # content-length first, as Starlette's Response writes it.
    head = [(b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


class FloorApp:
    """The ASGI app (see the module docstring)."""

    def __init__(self) -> None:
        self.runs: dict[str, Run] = {}

    def waiting(self) -> int:
        return sum(len(run.waiters) for run in self.runs.values())

    def run(self, run_id: str) -> Run:
        found = self.runs.get(run_id)
        if found is None:
            found = self.runs[run_id] = Run(run_id, int(time.time() * 1000))
        return found

    def wait(self, run: Run) -> asyncio.Future[Wake]:
        future: asyncio.Future[Wake] = asyncio.get_running_loop().create_future()
        run.waiters.append(future)
        return future

    def append(self, run: Run, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        ts = int(time.time() * 1000)
        stored = []
        for event in events:
            run.last_seq += 1
            stored.append({"seq": run.last_seq, "type": event["type"], "ts": ts, **event})
        page = {"events": stored, "latest_seq": run.last_seq, "first_seq": 1, "terminal": None}
        frames = "".join(
            f"id: {event['seq']}\nevent: {event['type']}\ndata: {encode(event).decode()}\n\n"
            for event in stored
        )
        wake = Wake(encode(page), frames.encode())
        waiters, run.waiters = run.waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(wake)
        return stored

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        method, parts = scope["method"], scope["path"].strip("/").split("/")
        if method == "GET" and parts == ["readyz"]:
            await answer(send, 200, JSON, b'{"status":"ready"}')
        elif method == "GET" and parts == ["metrics"]:
            text = WAITERS_HELP + b"# TYPE ledger_waiters gauge\nledger_waiters %d.0\n" % self.waiting()
            await answer(send, 200, [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")], text)
        elif method == "POST" and parts == ["v1", "runs"]:
            body = json.loads(await read_body(receive))
            await answer(send, 200, JSON, encode(self.run(body["run_id"]).as_json()))
        elif len(parts) == 4 and parts[:2] == ["v1", "runs"] and parts[3] == "events":
            run = self.run(parts[2])
            if method == "POST":
                events = json.loads(await read_body(receive))["events"]
                await answer(send, 200, JSON, encode({"events": self.append(run, events)}))
            else:
                await self.long_poll(scope, run, send)
        elif (
            method == "GET"
            and len(parts) == 5
            and parts[:2] == ["v1", "runs"]
            and parts[3:] == ["events", "stream"]
        ):
            await self.tail(self.run(parts[2]), receive, send)
        else:
            await answer(send, 404, JSON, b'{"error":"not found","code":"not_found"}')

    async def long_poll(self, scope: Scope, run: Run, send: Send) -> None:
        query = parse_qs(scope["query_string"].decode("latin-1"))
        timeout_s = int(query.get("timeout_ms", ["0"])[0]) / 1000
        future = self.wait(run)
        try:
            async with asyncio.timeout(timeout_s):
                body = (await future).page
        except TimeoutError:
            run.waiters.remove(future)
            body = encode({"events": [], "latest_seq": run.last_seq, "first_seq": 1, "terminal": None})
        await answer(send, 200, JSON, body)

    async def tail(self, run: Run, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": STREAM})
        await send({"type": "http.response.body", "body": b": stream open\n\n", "more_body": True})
        # Starlette's StreamingResponse, which serves ours, listens for the client going away the
        # same way: with a task of its own.
        gone = asyncio.create_task(disconnect(receive))
        future = self.wait(run)
        try:
            while True:
                await asyncio.wait((future, gone), return_when=asyncio.FIRST_COMPLETED)
                if gone.done():
                    return
                frames = future.result().frames
                future = self.wait(run)
                await send({"type": "http.response.body", "body": frames, "more_body": True})
        finally:
            gone.cancel()
            if future in run.waiters:
                run.waiters.remove(future)


async def disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    # As `ledger serve` does it: the socket, the logging, then the server it builds.
    from ledger.service.address import bind_socket
    from ledger.service.logs import configure_json_logging
    from ledger.service.server import build_server, run_until_stopped
    from ledger.service.settings import load_service_settings

    settings = load_service_settings(host=args.host, port=args.port)
    sock = bind_socket(settings.host, settings.port)
    try:
        configure_json_logging()
        run_until_stopped(build_server(FloorApp(), settings), sockets=[sock])
    finally:
        sock.close()


if __name__ == "__main__":
    main()
