"""Mixed load: the traffic of a busy platform at once, against `ledger serve`, from a bare client.

    python -m bench --load [--seconds 60] [--workers 1 2] [--json]

100 clients for `seconds` (60 by default): 40 append one event per request to runs of their own, 20
post status uploads (a 10-node progress map and 10 log lines each) to runs of their own, 25
long-poll the appenders' runs and 15 tail them over SSE. Every client is a keep-alive connection of
`bare_http` (httpx would cost more CPU than the server). Per kind: requests (or events delivered),
throughput, p50/p99 latency — for appends and uploads the request's, for long-polls and SSE the
delivery lag of each event (its commit timestamp to its arrival here) — and 5xx answers. Beside
them the CPU seconds of the server (all its processes) and of this client, and the server's RSS
before and after. Run once per `--workers` value, on the same database.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common
import orjson
import psutil
from bare_http import BareConnection

TOKEN = "bench-load-token"
POLL_TIMEOUT_MS = 5_000


@dataclass(frozen=True)
class Mix:
    appenders: int = 40
    uploaders: int = 20
    pollers: int = 25
    tails: int = 15
    seconds: float = 60.0


@dataclass
class Kind:
    """What one kind of client saw: latencies (ms), how many, and the 5xx among them (the 503s,
    a fault's or an overload's answer that a client retries, counted apart too)."""

    latencies: list[float] = field(default_factory=list)
    server_errors: int = 0
    unavailable: int = 0
    other_errors: int = 0


@dataclass
class LoadResult:
    workers: int
    seconds: float
    kinds: dict[str, Kind]
    server_cpu_s: float
    client_cpu_s: float
    rss_before_mb: float
    rss_after_mb: float


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _cpu_s(pid: int) -> float:
    return sum(p.cpu_times().user + p.cpu_times().system for p in _tree(pid))


def _rss_mb(pid: int) -> float:
    return sum(p.memory_info().rss for p in _tree(pid)) / 2**20


def _upload(seq: int) -> bytes:
    nodes = {
        f"node-{n}": {"started_at": 1, "total": 1_000, "completed": min(seq, 1_000), "updated_at": seq}
        for n in range(10)
    }
    lines = [f"upload {seq} line {i}" for i in range(10)]
    return orjson.dumps(
        {
            "status": "running",
            "upload_seq": seq,
            "producer_attempt": 1,
            "live_node_progress": nodes,
            "live_logs": lines,
            "live_log_total_count": seq * 10,
        }
    )


def _count(kind: Kind, status: int) -> bool:
    if status >= 500:
        kind.server_errors += 1
        if status == 503:
            kind.unavailable += 1
    elif status != 200:
        kind.other_errors += 1
    return status == 200


async def _timed(kind: Kind, call: Callable[[], Awaitable[tuple[int, bytes]]]) -> bytes | None:
    started = time.perf_counter()
    status, body = await call()
    if _count(kind, status):
        kind.latencies.append((time.perf_counter() - started) * 1000)
        return body
    return None


def _lag_ms(event: dict[str, Any]) -> float:
    return time.time() * 1000 - float(event["ts"])


async def run_load(base: str, mix: Mix) -> tuple[dict[str, Kind], float]:
    """Drive the mix against `base`; what each kind saw and the client's CPU seconds."""
    stamp = time.time_ns()
    appended_runs = [f"load-a-{stamp}-{n}" for n in range(mix.appenders)]
    uploaded_runs = [f"load-u-{stamp}-{n}" for n in range(mix.uploaders)]
    setup = await BareConnection(base, TOKEN).open()
    for run in appended_runs:
        status, body = await setup.request("POST", "/v1/runs", orjson.dumps({"run_id": run}))
        assert status == 200, body
    setup.close()
    kinds = {name: Kind() for name in ("append", "upload", "long-poll", "SSE")}
    deadline = time.perf_counter() + mix.seconds
    event = orjson.dumps({"events": [{"type": "log", "line": "load"}]})

    async def append(run: str) -> None:
        connection = await BareConnection(base, TOKEN).open()
        path = f"/v1/runs/{run}/events"
        while time.perf_counter() < deadline:
            await _timed(kinds["append"], lambda: connection.request("POST", path, event))
        connection.close()

    async def upload(run: str) -> None:
        connection = await BareConnection(base, TOKEN).open()
        path, seq = f"/v1/runs/{run}/status", 0
        while time.perf_counter() < deadline:
            seq += 1
            body = _upload(seq)
            await _timed(kinds["upload"], lambda body=body: connection.request("POST", path, body))
        connection.close()

    async def poll(run: str) -> None:
        connection = await BareConnection(base, TOKEN).open()
        kind, after = kinds["long-poll"], "now"
        while (left := deadline - time.perf_counter()) > 0:
            wait = min(POLL_TIMEOUT_MS, int(left * 1000))
            status, body = await connection.request(
                "GET", f"/v1/runs/{run}/events?after={after}&timeout_ms={wait}&limit=1000"
            )
            if not _count(kind, status):
                continue
            page = orjson.loads(body)
            kind.latencies.extend(_lag_ms(e) for e in page["events"])
            after = str(page["latest_seq"])
        connection.close()

    async def tail(run: str) -> None:
        connection = await BareConnection(base, TOKEN).open()
        kind = kinds["SSE"]

        async def read() -> None:
            async for line in connection.lines(f"/v1/runs/{run}/events/stream?after=now"):
                if line.startswith(b"data: "):
                    kind.latencies.append(_lag_ms(json.loads(line[6:])))

        # The stream never ends on its own while the run is live: the deadline ends it.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(read(), timeout=max(0.0, deadline - time.perf_counter()))
        connection.close()

    started_cpu = time.process_time()
    await asyncio.gather(
        *(append(run) for run in appended_runs),
        *(upload(run) for run in uploaded_runs),
        *(poll(appended_runs[n % len(appended_runs)]) for n in range(mix.pollers)),
        *(tail(appended_runs[n % len(appended_runs)]) for n in range(mix.tails)),
    )
    return kinds, time.process_time() - started_cpu


async def measure(url: str, workers: int, mix: Mix) -> LoadResult:
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
        proc, base = await asyncio.to_thread(common.serve, url, Path(tmp), TOKEN, LEDGER_WORKERS=str(workers))
        try:
            # The workers answer once each has started: give the last one a moment to finish.
            await asyncio.sleep(1.0)
            rss_before, cpu_before = _rss_mb(proc.pid), _cpu_s(proc.pid)
            kinds, client_cpu = await run_load(base, mix)
            server_cpu, rss_after = _cpu_s(proc.pid) - cpu_before, _rss_mb(proc.pid)
        finally:
            proc.terminate()
            await asyncio.to_thread(proc.wait, 30)
    return LoadResult(workers, mix.seconds, kinds, server_cpu, client_cpu, rss_before, rss_after)


def _p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rows(result: LoadResult) -> list[dict[str, Any]]:
    """One row per kind of client, then one for the processes' CPU and memory."""
    out: list[dict[str, Any]] = []
    for name, kind in result.kinds.items():
        measured = "delivery lag" if name in ("long-poll", "SSE") else "request"
        out.append(
            {
                "workers": result.workers,
                "kind": name,
                "count": len(kind.latencies),
                "per_s": len(kind.latencies) / result.seconds,
                "measured": measured,
                "p50_ms": statistics.median(kind.latencies) if kind.latencies else float("nan"),
                "p99_ms": _p(kind.latencies, 0.99),
                "5xx": kind.server_errors,
                "503": kind.unavailable,
                "other_errors": kind.other_errors,
            }
        )
    out.append(
        {
            "workers": result.workers,
            "kind": "processes",
            "server_cpu_s": result.server_cpu_s,
            "client_cpu_s": result.client_cpu_s,
            "server_rss_mb_before": result.rss_before_mb,
            "server_rss_mb_after": result.rss_after_mb,
        }
    )
    return out


def print_rows(all_rows: list[dict[str, Any]], mix: Mix) -> None:
    table = []
    for row in all_rows:
        if row["kind"] == "processes":
            table.append(
                (
                    str(row["workers"]),
                    "server / client CPU",
                    f"{row['server_cpu_s']:.1f} s / {row['client_cpu_s']:.1f} s",
                    f"RSS {row['server_rss_mb_before']:.0f} → {row['server_rss_mb_after']:.0f} MB",
                    "",
                    "",
                )
            )
            continue
        table.append(
            (
                str(row["workers"]),
                f"{row['kind']} ({row['measured']})",
                f"{row['count']:,} ({row['per_s']:,.0f}/s)",
                f"{row['p50_ms']:.1f} ms",
                f"{row['p99_ms']:.1f} ms",
                f"{row['5xx']} × 5xx"
                + (f" ({row['503']} × 503)" if row["503"] else "")
                + (f", {row['other_errors']} other" if row["other_errors"] else ""),
            )
        )
    print(
        f"Mixed load: {mix.appenders} appending, {mix.uploaders} uploading, {mix.pollers} long-polling, "
        f"{mix.tails} on SSE clients, {mix.seconds:g} s per --workers value\n"
    )
    common.print_table(("workers", "kind", "count", "p50", "p99", "errors"), table)


def run(url: str, workers: list[int], mix: Mix) -> list[dict[str, Any]]:
    all_rows: list[dict[str, Any]] = []
    for count in workers:
        result = asyncio.run(measure(url, count, mix))
        all_rows.extend(rows(result))
    return all_rows
