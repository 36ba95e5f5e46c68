"""Reporter benchmarks: the hot path's cost per event, uploads per minute, memory of a 1M-row map.

    .venv/bin/python bench/bench_reporter.py [--events 100000] [--repeats 7] [--rows 1000000]

1. microseconds per `on_runner_event` for ``map.progress`` execution events and for log lines
   (parsed for the three patterns, appended to the tail), inside a running event loop, with the
   uploader's throttle in the path (uploads go to a no-op transport): the median of the repeats,
   beside the median of `json.loads` of the same events timed interleaved with them;
2. uploads made during 60 s of *simulated* time (a fake clock; 1,000 events/s) for runs of
   several sizes: the adaptive interval at work, including the trailing flush;
3. peak memory growth (tracemalloc) while folding every event of a simulated 1M-row map;
4. milliseconds per `on_runner_event` for one 3 MB log line that repeats the map-start
   diagnostic's head (``Starting map over 1 items ``: what made a backtracking search quadratic)
   beside a plain line of the same size, timed interleaved: the hostile line must cost about
   what the plain one does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from common import print_footer, print_table

from reporter import ProgressReporter, SimulatedRun

CONTRACT = SimulatedRun().contract()


class NullTransport:
    def __init__(self) -> None:
        self.uploads = 0

    def deadline(self, seconds: float | None) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()  # it never fails: nothing to retry

    async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.uploads += 1
        return {}

    async def sheet_outcomes(self, run_id: str) -> list[dict[str, Any]]:
        return []

    async def node_observations(self, run_id: str) -> list[dict[str, Any]]:
        return []


class SimClock:
    """Simulated time: sleepers wake when `advance` passes their deadline."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def monotonic(self) -> float:
        return self.now

    def wall_ms(self) -> int:
        return int(self.now * 1000)

    async def sleep(self, delay: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sleepers.append((self.now + delay, future))
        await future

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [f for t, f in self.sleepers if t <= self.now]
        self.sleepers = [(t, f) for t, f in self.sleepers if t > self.now]
        for future in due:
            if not future.done():
                future.set_result(None)


def progress_event(i: int, total: int) -> dict[str, Any]:
    return {
        "type": "execution_event",
        "event": {
            "type": "map.progress",
            "mapNodeId": None,
            "artifactTableNamespace": "leads_r1",
            "totalRows": total,
            "completedRows": i,
            "failedRows": i // 100,
        },
    }


HOT_KINDS = ("map.progress event", "log line (no match)", "log line (tool batch)")


def hot_events(kind: str, total: int) -> list[dict[str, Any]]:
    """1,000 runner events of one kind, as the runner sends them."""
    if kind == "map.progress event":
        return [progress_event(i, total) for i in range(1000)]
    if kind == "log line (no match)":
        return [
            {"type": "log", "line": f"[2026-01-01T00:00:00.000Z] row {i} enriched: ok", "source": "runner"}
            for i in range(1000)
        ]
    return [
        {"type": "log", "line": f"Executing tool batch enrich:{i}: 25 calls", "source": "runner"}
        for i in range(1000)
    ]


def _us_per_item(call: Callable[[Any], object], items: list[Any]) -> float:
    # timeit-style: the collector off while timing, so a collection started by someone else's
    # garbage is not billed to this loop.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        for item in items:
            call(item)
        return (time.perf_counter() - start) / len(items) * 1e6
    finally:
        if gc_was_on:
            gc.enable()


async def hot_path(kind: str, events: int, repeats: int, total: int = 1_000_000) -> tuple[float, float]:
    """Median µs per `on_runner_event` of `kind` inside a running loop (the uploader's throttle
    in the path, uploads to a no-op transport), and the median µs of `json.loads` of the same
    events' JSON lines, timed interleaved in the same run: decoding the event is the least any
    consumer of the runner's stream does with it."""
    batch = (hot_events(kind, total) * (events // 1000 + 1))[:events]
    texts = [json.dumps(event) for event in batch]
    reporter = ProgressReporter("bench", NullTransport(), contract=CONTRACT)
    reporter.on_runner_event(progress_event(0, total))  # an active map for the batch lines
    ours: list[float] = []
    decode: list[float] = []
    for _ in range(repeats):
        ours.append(_us_per_item(reporter.on_runner_event, batch))
        decode.append(_us_per_item(json.loads, texts))
    await reporter.aclose()
    return statistics.median(ours), statistics.median(decode)


async def per_event_cost(count: int, repeats: int) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for kind in HOT_KINDS:
        ours, decode = await hot_path(kind, count, repeats)
        rows.append(
            (
                f"on_runner_event: {kind}",
                f"{ours:.2f} µs/event (json.loads of it: {decode:.2f} µs; median of {repeats} x {count:,})",
            )
        )
    return rows


async def uploads_per_minute(total_rows: int, events_per_s: int = 1000, seconds: int = 60) -> int:
    clock = SimClock()
    transport = NullTransport()
    reporter = ProgressReporter(
        "bench",
        transport,
        contract=CONTRACT,
        clock=clock.monotonic,
        sleep=clock.sleep,
        wall_clock_ms=clock.wall_ms,
    )
    step = 1.0 / events_per_s
    for i in range(events_per_s * seconds):
        reporter.on_runner_event(progress_event(i % total_rows, total_rows))
        clock.advance(step)
        if i % 10 == 0:
            await asyncio.sleep(0)
    for _ in range(5):
        await asyncio.sleep(0)
    uploads = transport.uploads
    await reporter.aclose()
    return uploads


async def memory_for_map(rows: int) -> tuple[str, str]:
    run = SimulatedRun(
        rows=rows, fail_every=97, page_size=10_000, progress_every=1_000, keep_result_logs=False
    )
    reporter = ProgressReporter("bench", NullTransport(), contract=run.contract())
    tracemalloc.start()
    baseline, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    count = 0
    for event in run.events():
        if event["type"] != "result":
            reporter.on_runner_event(event)
            count += 1
    _, peak = tracemalloc.get_traced_memory()
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    await reporter.aclose()
    return (
        f"peak memory growth, {rows:,}-row map ({count:,} events)",
        f"{(peak - baseline) / 1024:.0f} KiB peak, {(current - baseline) / 1024:.0f} KiB retained",
    )


HOSTILE_UNIT = "Starting map over 1 items "


async def hostile_line(size: int = 3_000_000, repeats: int = 5) -> tuple[float, float]:
    """Median ms per `on_runner_event` of one `size`-character line repeating `HOSTILE_UNIT`, and
    of a plain line of the same size, timed interleaved (repeats of each)."""
    hostile = {"type": "log", "line": (HOSTILE_UNIT * (size // len(HOSTILE_UNIT) + 1))[:size]}
    plain = {"type": "log", "line": ("plain text " * (size // 11 + 1))[:size]}
    reporter = ProgressReporter("bench", NullTransport(), contract=CONTRACT)
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(repeats):
        ours.append(_us_per_item(reporter.on_runner_event, [hostile]) / 1000)
        theirs.append(_us_per_item(reporter.on_runner_event, [plain]) / 1000)
    await reporter.aclose()
    return statistics.median(ours), statistics.median(theirs)


async def measure(events: int, repeats: int, rows: int) -> list[tuple[str, str]]:
    table: list[tuple[str, str]] = []
    hostile, plain = await hostile_line()
    table.append(
        (
            "on_runner_event: 3 MB line repeating the map-start head",
            f"{hostile:.1f} ms (a plain 3 MB line: {plain:.1f} ms; median of 5)",
        )
    )
    table += await per_event_cost(events, repeats)
    for total in (5_000, 50_000, 500_000, 5_000_000):
        uploads = await uploads_per_minute(total)
        table.append((f"uploads in 60 s simulated, {total:,}-row run, 1,000 ev/s", f"{uploads}"))
    table.append(await memory_for_map(rows))
    return table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=100_000, help="events per hot-path repeat")
    parser.add_argument("--repeats", type=int, default=7, help="repeats per hot-path measure (median)")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the simulated map")
    args = parser.parse_args()
    started = time.perf_counter()
    print_table(("measure", "value"), asyncio.run(measure(args.events, args.repeats, args.rows)))
    print_footer(started)


if __name__ == "__main__":
    main()
