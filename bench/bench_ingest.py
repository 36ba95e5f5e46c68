"""Status-ingestion benchmark: uploads/s for `apply_status_upload`, in-process and over HTTP.

    .venv/bin/python bench/bench_ingest.py [--seconds 3] [--no-http]

Uses LEDGER_DATABASE_URL when set, else a throwaway embedded Postgres (server defaults: fsync on),
migrated (bench/common.py), then applies uploads to fresh runs for `--seconds` per scenario, one
client per run:

- all 1,000 nodes change counts every upload (1,000 step.progress events + the snapshot),
- 10 of 1,000 nodes change (the common case: the snapshot is still read and written whole),
- 1,000 new log lines per upload (a full tail, no node progress),
- a late duplicate of a 1,000-node upload (absorbed: one read of the run's upload position, the
  body is not validated), without and with the heartbeat (`last_checkpoint_at`: one more write),
- all 50 nodes of a 50-node upload change,
- one node of a 50-node upload changes (a progress tick: the shape a worker sends most).

Then how the cost of an upload grows with its node count (every node changed, 10 / 100 / 1,000
nodes: `node_growth`), and, unless `--no-http`, the 50-node upload and the late duplicate over
HTTP against `ledger serve` (`http_uploads`: a bare asyncio HTTP/1.1 client sending pre-encoded
bodies, so the client's CPU does not crowd the server's on a small machine).

The bodies are built before they are timed where they can be (a duplicate is one body sent again);
an upload whose nodes all change is built per upload (its node dicts are part of the input).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from common import bench_database, print_footer, print_table, serve

from ledger.db import Database
from ledger.ingest.store import apply_status_upload

NODES = 1000
GROWTH_NODES = (10, 100, 1000)
TOKEN = "bench-ingest-token"

Builder = Callable[[int], dict[str, Any]]


def progress(changed: int, nodes: int = NODES) -> Builder:
    """Uploads of a `nodes`-node progress map whose first `changed` nodes advance every upload
    (the others repeat themselves unchanged, `updated_at` too, as the reporter sends them)."""

    def build(seq: int) -> dict[str, Any]:
        progress_map = {
            f"node-{n:04d}": {
                "started_at": 1,
                "total": 10_000,
                "completed": seq if n < changed else 0,
                "message": f"{seq if n < changed else 0:,} / 10,000 rows processed",
                "updated_at": seq if n < changed else 1,
            }
            for n in range(nodes)
        }
        return {"status": "running", "upload_seq": seq, "live_node_progress": progress_map}

    return build


def logs(seq: int) -> dict[str, Any]:
    lines = [f"[2026-01-01T00:00:00Z] upload {seq} line {i}" for i in range(1000)]
    return {"status": "running", "upload_seq": seq, "live_logs": lines, "live_log_total_count": seq * 1000}


@functools.cache
def _first_upload() -> dict[str, Any]:
    return progress(10)(1)


def duplicate(seq: int) -> dict[str, Any]:
    # After the warm-up (upload 1) every upload is the same late retry of upload 1: the same body,
    # as the uploader resends it (nothing here or in the ledger changes it).
    return _first_upload()


@functools.cache
def _first_upload_with_heartbeat() -> dict[str, Any]:
    return {**progress(10)(1), "producer_attempt": 1, "last_checkpoint_at": 1_767_225_600_000}


def duplicate_with_heartbeat(seq: int) -> dict[str, Any]:
    """`duplicate` as the reporter sends it: with its attempt and `last_checkpoint_at` (a heartbeat)."""
    return _first_upload_with_heartbeat()


async def scenario(
    db: Database, name: str, build: Builder, clients: int, seconds: float
) -> tuple[float, float]:
    """(uploads/s, events/s) over `seconds`, `clients` runs uploading at once, after a warm-up upload."""
    run_ids = [f"{name}-{clients}-{index}-{time.time_ns()}" for index in range(clients)]
    # The first upload of a run starts every node (2,000 events): steady state is what we measure.
    await asyncio.gather(*(apply_status_upload(db, run_id, build(1)) for run_id in run_ids))
    deadline = time.perf_counter() + seconds
    counts = [0] * clients
    events = [0] * clients

    async def client(index: int) -> None:
        seq = 1
        while time.perf_counter() < deadline:
            seq += 1
            answer = await apply_status_upload(db, run_ids[index], build(seq), max_events_per_run=10_000)
            counts[index] += 1
            events[index] += sum(answer["events_appended"].values())

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    elapsed = time.perf_counter() - started
    return sum(counts) / elapsed, sum(events) / elapsed


async def node_growth(db_url: str, seconds: float = 2.0) -> list[tuple[int, float]]:
    """(nodes, milliseconds per upload) for uploads whose every node changes, one client, at 10,
    100 and 1,000 nodes: how an upload's cost grows with its node count."""
    rows = []
    async with Database(db_url, min_size=1, max_size=2) as db:
        for nodes in GROWTH_NODES:
            uploads, _ = await scenario(db, f"growth{nodes}", progress(nodes, nodes=nodes), 1, seconds)
            rows.append((nodes, 1000 / uploads))
    return rows


class _Connection:
    """One keep-alive HTTP/1.1 connection posting status uploads of one run."""

    def __init__(self, base: str, token: str, run: str) -> None:
        self.host, self.port = base.removeprefix("http://").split(":")
        self.head = (
            f"POST /v1/runs/{run}/status HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {token}\r\n"
        )

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, int(self.port))

    async def post(self, body: bytes) -> None:
        self.writer.write(
            f"{self.head}Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        answer = await self.reader.readuntil(b"\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        length = next(
            int(line.split(b":", 1)[1])
            for line in answer.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await self.reader.readexactly(length)


async def http_uploads(
    base: str, token: str, name: str, build: Builder, clients: int, seconds: float
) -> float:
    """Uploads/s over HTTP (POST /v1/runs/{id}/status) from `clients` keep-alive connections, one
    run each, after a warm-up upload; every answer must be a 200."""
    connections = [
        _Connection(base, token, f"http-{name}-{clients}-{index}-{time.time_ns()}")
        for index in range(clients)
    ]
    for connection in connections:
        await connection.open()
    await asyncio.gather(*(connection.post(orjson.dumps(build(1))) for connection in connections))
    deadline = time.perf_counter() + seconds

    async def client(connection: _Connection) -> int:
        done, seq = 0, 1
        while time.perf_counter() < deadline:
            seq += 1
            await connection.post(orjson.dumps(build(seq)))
            done += 1
        return done

    started = time.perf_counter()
    try:
        done = sum(await asyncio.gather(*(client(connection) for connection in connections)))
    finally:
        for connection in connections:
            connection.writer.close()
    return done / (time.perf_counter() - started)


async def measure(url: str, seconds: float) -> list[tuple[str, str, str, str]]:
    rows = []
    async with Database(url, min_size=1, max_size=8) as db:
        for label, name, build, widths in (
            ("1,000 nodes, all changed", "all", progress(NODES), (1, 4)),
            ("1,000 nodes, 10 changed", "few", progress(10), (1, 4)),
            ("1,000 new log lines", "logs", logs, (1, 4)),
            ("late duplicate of a 1,000-node upload", "dup", duplicate, (1, 4)),
            ("the same with its heartbeat", "dupbeat", duplicate_with_heartbeat, (1, 4)),
            ("50 nodes, all changed", "n50", progress(50, nodes=50), (1, 4)),
            ("50 nodes, 1 changed (a progress tick)", "tick", progress(1, nodes=50), (1, 4)),
        ):
            for clients in widths:
                uploads, events = await scenario(db, name, build, clients, seconds)
                rows.append((label, str(clients), f"{uploads:,.0f}", f"{events:,.0f}"))
    return rows


async def measure_http(url: str, seconds: float) -> list[tuple[str, str, str]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-ingest-http-") as tmp:
        proc, base = await asyncio.to_thread(serve, url, Path(tmp), TOKEN)
        try:
            for label, name, build in (
                ("50 nodes, all changed", "n50", progress(50, nodes=50)),
                ("late duplicate of a 1,000-node upload", "dup", duplicate),
            ):
                for clients in (1, 4):
                    uploads = await http_uploads(base, TOKEN, name, build, clients, seconds)
                    rows.append((label, str(clients), f"{uploads:,.0f}"))
        finally:
            proc.terminate()
            await asyncio.to_thread(proc.wait, 30)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each scenario")
    parser.add_argument("--no-http", action="store_true", help="leave out the rows over HTTP")
    args = parser.parse_args()
    with bench_database("bench-ingest-") as database:
        started = time.perf_counter()
        rows = asyncio.run(measure(database.url, args.seconds))
        print_table(("in-process scenario", "clients", "uploads/s", "events/s"), rows, align="right")
        growth = asyncio.run(node_growth(database.url, args.seconds))
        print()
        print_table(
            ("nodes, all changed", "ms per upload", "µs per node"),
            [(f"{n:,}", f"{ms:,.2f}", f"{ms * 1000 / n:,.1f}") for n, ms in growth],
            align="right",
        )
        if not args.no_http:
            print()
            http = asyncio.run(measure_http(database.url, args.seconds))
            print_table(("over HTTP", "clients", "uploads/s"), http, align="right")
        print_footer(started, database.where)


if __name__ == "__main__":
    main()
