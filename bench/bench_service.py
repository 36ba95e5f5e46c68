"""HTTP service benchmark: request throughput and long-poll / SSE fan-out over the real `ledger serve`.

    .venv/bin/python bench/bench_service.py [--readers 1000] [--seconds 5]

Uses LEDGER_DATABASE_URL when set, else a throwaway embedded Postgres (server defaults: fsync on),
migrated (bench/common.py), runs `ledger serve` on it as a subprocess, and measures over HTTP
(httpx, one process):

- appends/s (one event per request) with 1 and 8 concurrent clients, and GET /v1/runs/{id} per s;
  appends/s with 8 clients again from a bare asyncio HTTP/1.1 client (`light_appends`), which
  costs the shared cores far less than httpx;
- fan-out: `--readers` concurrent long-polls on one run (bare asyncio HTTP/1.1 connections), then
  one append; latency from the append's answer to each long-poll's answer (p50/p99/max), and the
  server's Postgres connections while all readers wait (the point: waiting holds none);
- the same with `--readers // 10` SSE streams.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import psycopg
from bare_http import BareConnection
from common import bench_database, cpu_ns, print_footer, print_table, serve

TOKEN = "bench-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


def connections(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'run-ledger%%'"
        ).fetchone()
    return int(row[0]) if row else -1


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def throughput(base: str, clients: int, seconds: float) -> tuple[float, float]:
    limits = httpx.Limits(max_connections=clients + 2)
    async with httpx.AsyncClient(base_url=base, headers=HEADERS, limits=limits, timeout=30) as http:
        runs = [f"tp-{clients}-{n}-{time.time_ns()}" for n in range(clients)]
        for run in runs:
            await http.post("/v1/runs", json={"run_id": run})

        async def loop(run: str, path: str, post: bool) -> int:
            done, deadline = 0, time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                if post:
                    r = await http.post(path, json={"events": [{"type": "log", "line": "x"}]})
                else:
                    r = await http.get(path)
                assert r.status_code == 200, r.text
                done += 1
            return done

        appends = sum(await asyncio.gather(*(loop(r, f"/v1/runs/{r}/events", True) for r in runs)))
        reads = sum(await asyncio.gather(*(loop(r, f"/v1/runs/{r}", False) for r in runs)))
    return appends / seconds, reads / seconds


async def light_appends(base: str, clients: int, seconds: float) -> float:
    """Appends/s (one event per request) from `clients` keep-alive connections driven by a bare
    asyncio HTTP/1.1 client: one prepared request, the answer read by its Content-Length.

    httpx spends more CPU per request than the server does (several times this client's), and on a
    machine of few cores it shares them with the server and Postgres: `throughput` then measures
    httpx as much as the server. This measures the server.
    """
    async with httpx.AsyncClient(base_url=base, headers=HEADERS, timeout=30) as http:
        runs = [f"light-{clients}-{n}-{time.time_ns()}" for n in range(clients)]
        for run in runs:
            (await http.post("/v1/runs", json={"run_id": run})).raise_for_status()
    host, port = base.removeprefix("http://").split(":")
    body = b'{"events":[{"type":"log","line":"x"}]}'

    async def loop(run: str) -> int:
        request = (
            f"POST /v1/runs/{run}/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        reader, writer = await asyncio.open_connection(host, int(port))
        done, deadline = 0, time.perf_counter() + seconds
        try:
            while time.perf_counter() < deadline:
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200 "), head
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                done += 1
        finally:
            writer.close()
        return done

    started = time.perf_counter()
    done = sum(await asyncio.gather(*(loop(run) for run in runs)))
    return done / (time.perf_counter() - started)


async def fanout(
    base: str, url: str | None, readers: int, *, sse: bool, server_pid: int | None = None
) -> dict[str, float]:
    """`readers` long-polls (or SSE tails) of one new run woken by one append: the latency from
    the append to each answer (p50, p99, max, ms), the answers counted, the server's Postgres
    connections while they wait (`url`'s; 0 without a database) and, given the server's
    `server_pid`, its CPU (with its children's) from just before the append to the last answer,
    per answer (`cpu_us`)."""
    limits = httpx.Limits(max_connections=readers + 10, max_keepalive_connections=readers + 10)
    async with httpx.AsyncClient(base_url=base, headers=HEADERS, limits=limits, timeout=60) as http:
        run = f"fan-{'sse' if sse else 'poll'}-{time.time_ns()}"
        await http.post("/v1/runs", json={"run_id": run})
        answered: list[float] = []

        host, port = base.removeprefix("http://").split(":")
        request = (
            f"GET /v1/runs/{run}/events?after=0&timeout_ms=30000 HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
        ).encode()

        async def poll() -> None:
            # A bare asyncio HTTP/1.1 client: httpx's pool costs O(connections) per request, which
            # would measure the client, not the server, at 1,000 connections.
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(request)
            body = await reader.read()
            answered.append(time.perf_counter())
            writer.close()
            assert b" 200 " in body.split(b"\r\n", 1)[0] and b'"wake"' in body, body[:200]

        async def stream() -> None:
            # Bare too: httpx's stream costs the shared cores more per frame than the server does.
            connection = await BareConnection(base, TOKEN).open()
            try:
                async with contextlib.aclosing(
                    connection.lines(f"/v1/runs/{run}/events/stream?after=0")
                ) as lines:
                    async for line in lines:
                        if line.startswith(b"id: "):
                            answered.append(time.perf_counter())
                            return
            finally:
                connection.close()

        tasks = [asyncio.create_task(stream() if sse else poll()) for _ in range(readers)]
        while True:
            # A reader that ended before the append was refused (a 503 when the server's pool cannot
            # serve every first read in time): say so instead of waiting for it forever.
            ended = sum(task.done() for task in tasks)
            if ended:
                failures = [task.exception() for task in tasks if task.done() and task.exception()]
                raise RuntimeError(f"{ended} of {readers} readers ended before the append: {failures[:1]}")
            text = (await http.get("/metrics")).text
            waiting = next(float(x.split()[1]) for x in text.splitlines() if x.startswith("ledger_waiters "))
            if waiting >= readers:
                break
            await asyncio.sleep(0.05)
        held = connections(url) if url is not None else 0
        cpu_before = cpu_ns(server_pid) if server_pid is not None else 0
        appended = time.perf_counter()
        await http.post(f"/v1/runs/{run}/events", json={"events": [{"type": "log", "line": "wake"}]})
        await asyncio.gather(*tasks)
        cpu = cpu_ns(server_pid) - cpu_before if server_pid is not None else 0
    latencies = [(t - appended) * 1000 for t in answered]
    return {
        "p50": statistics.median(latencies),
        "p99": pct(latencies, 0.99),
        "max": max(latencies),
        "connections": held,
        "answers": len(answered),
        "cpu_us": cpu / 1000 / len(answered),
    }


async def measure(base: str, url: str, readers: int, seconds: float) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for clients in (1, 8):
        appends, reads = await throughput(base, clients, seconds)
        rows.append((f"appends/s, {clients} client(s)", f"{appends:.0f}"))
        rows.append((f"GET run/s, {clients} client(s)", f"{reads:.0f}"))
    light = await light_appends(base, 8, seconds)
    rows.append(("appends/s, 8 clients, bare asyncio client", f"{light:.0f}"))
    for sse, count in ((False, readers), (True, max(1, readers // 10))):
        kind = "SSE streams" if sse else "long-polls"
        result = await fanout(base, url, count, sse=sse)
        rows.append((f"{count} {kind}: wake p50 ms", f"{result['p50']:.1f}"))
        rows.append((f"{count} {kind}: wake p99 ms", f"{result['p99']:.1f}"))
        rows.append((f"{count} {kind}: wake max ms", f"{result['max']:.1f}"))
        rows.append((f"{count} {kind}: server PG connections", f"{result['connections']:.0f}"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--readers", type=int, default=1000, help="concurrent long-polls (SSE: a tenth)")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each throughput run")
    args = parser.parse_args()
    with bench_database("bench-service-") as database, tempfile.TemporaryDirectory() as tmp:
        proc, base = serve(database.url, Path(tmp), TOKEN)
        try:
            started = time.perf_counter()
            rows = asyncio.run(measure(base, database.url, args.readers, args.seconds))
            print_table(("measure", "value"), rows, align="right")
            print_footer(started, database.where)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


if __name__ == "__main__":
    main()
