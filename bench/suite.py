"""Every measure of `python -m bench` next to its raw baseline, measured in one run on one database.

Each measure reuses the bench script that owns it (`bench_runlog`, `bench_pool`, `bench_ingest`,
`bench_service`) and its baseline from `baselines`. `ratio` is always "how close to raw": ours /
baseline for a rate, baseline / ours for a latency, so 1.0 is as fast as the baseline and every
ratio reads the same way.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import baselines
import bench_ingest
import bench_pool
import bench_reporter
import bench_runlog
import bench_service
import common

from ledger.db import Database
from ledger.ingest.store import apply_status_upload
from ledger.runlog.store import DEFAULT_MAX_EVENTS_PER_RUN

Kind = Literal["rate", "latency"]


@dataclass(frozen=True)
class Profile:
    """How long and how wide each measure runs."""

    name: str
    seconds: float  # per throughput measure
    pool_entries: int  # drained per claim measure
    wake_rounds: int  # appends timed with one waiter
    many_waiters: int  # waiters on one run for the fan-out rows
    many_rounds: int  # appends timed with `many_waiters`
    http: bool = True
    reporter_events: int = 20_000  # runner events per repeat of each reporter row (7 repeats)


FULL = Profile("full", seconds=5.0, pool_entries=2000, wake_rounds=200, many_waiters=1000, many_rounds=15)
QUICK = Profile(
    "quick",
    seconds=1.0,
    pool_entries=200,
    wake_rounds=20,
    many_waiters=100,
    many_rounds=3,
    reporter_events=2_000,
)


@dataclass(frozen=True)
class Measure:
    """One row: our figure, the raw baseline's, and what each is."""

    measure: str
    unit: str
    kind: Kind
    ours: float
    baseline: float
    baseline_is: str

    @property
    def ratio(self) -> float:
        return self.ours / self.baseline if self.kind == "rate" else self.baseline / self.ours

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": round(self.ratio, 4)}


def _p(samples: list[float], q: float) -> float:
    return bench_runlog.percentile(samples, q) * 1000


class Suite:
    """Runs the measures in order, keeping what later rows compare against."""

    def __init__(self, url: str, bin_dir: Path, profile: Profile, log: Callable[[str], None]) -> None:
        self.url = url
        self.bin_dir = bin_dir
        self.profile = profile
        self.log = log
        self.rows: list[Measure] = []
        self.n50_raw: float | None = None  # the 50-node upload's baseline, for its HTTP row

    def add(self, measure: Measure) -> Measure:
        self.rows.append(measure)
        self.log(f"{measure.measure}: {measure.ours:,.2f} vs {measure.baseline:,.2f} {measure.unit}")
        return measure

    async def appends(self) -> Measure:
        seconds = self.profile.seconds
        eight: Measure | None = None
        for runs, batch, unit in ((1, 1, "appends/s"), (8, 1, "appends/s"), (1, 1000, "events/s")):
            ours = await bench_runlog.throughput(self.url, runs, batch, seconds)
            raw = await asyncio.to_thread(baselines.append_rate, self.bin_dir, self.url, runs, batch, seconds)
            label = f"append, {runs} run{'s' if runs > 1 else ''}" + (
                f", {batch:,} events/call" if batch > 1 else ""
            )
            row = self.add(
                Measure(label, unit, "rate", ours, raw, "pgbench: one-statement append with NOTIFY")
            )
            if runs == 8:
                eight = row
            if batch > 1:
                # Past its retention ours deletes as many events as it inserts: beside the same.
                keep = DEFAULT_MAX_EVENTS_PER_RUN
                trimming = await asyncio.to_thread(
                    baselines.append_rate, self.bin_dir, self.url, runs, batch, seconds, keep
                )
                self.add(
                    Measure(
                        f"{label}, vs an append that trims",
                        unit,
                        "rate",
                        ours,
                        trimming,
                        f"pgbench: the same append, trimming the run to its last {keep:,} events",
                    )
                )
        assert eight is not None
        return eight

    async def claims(self) -> None:
        entries = self.profile.pool_entries
        for claimers in (1, 8):
            tag = f"c{claimers}-{time.time_ns()}"
            ours, _ = await bench_pool.scenario(self.url, claimers, entries, tag)
            raw = await asyncio.to_thread(
                baselines.claim_rate, self.bin_dir, self.url, claimers, self.profile.seconds
            )
            self.add(
                Measure(
                    f"pool claim, {claimers} claimer{'s' if claimers > 1 else ''}",
                    "claims/s",
                    "rate",
                    ours,
                    raw,
                    "pgbench: one-statement SKIP LOCKED claim CTE",
                )
            )

    async def wakes(self) -> list[float]:
        raw = await bench_runlog.raw_wake_latency(self.url, self.profile.wake_rounds)
        what = "one bare LISTEN connection + one re-read"
        for waiters, rounds in (
            (1, self.profile.wake_rounds),
            (self.profile.many_waiters, self.profile.many_rounds),
        ):
            ours = await bench_runlog.wake_latency(self.url, waiters, rounds)
            label = f"commit → wake, {waiters:,} waiter{'s' if waiters > 1 else ''} on one run"
            self.add(Measure(f"{label}, p50", "ms", "latency", _p(ours, 0.5), _p(raw, 0.5), what))
            self.add(Measure(f"{label}, p99", "ms", "latency", _p(ours, 0.99), _p(raw, 0.99), what))
        followers = self.profile.many_waiters
        ours = await bench_runlog.follow_latency(self.url, followers, self.profile.many_rounds)
        label = f"commit → wake, {followers:,} followers on one run (callbacks)"
        self.add(Measure(f"{label}, p50", "ms", "latency", _p(ours, 0.5), _p(raw, 0.5), what))
        self.add(Measure(f"{label}, p99", "ms", "latency", _p(ours, 0.99), _p(raw, 0.99), what))
        return raw

    async def ingestion(self) -> None:
        seconds = self.profile.seconds
        async with Database(self.url, min_size=1, max_size=2) as db:
            ours, _ = await bench_ingest.scenario(db, "dup", bench_ingest.duplicate, 1, seconds)
            run_id = f"dup-baseline-{time.time_ns()}"
            await apply_status_upload(db, run_id, bench_ingest.duplicate(1))
            raw = await baselines.upload_position_reads(self.url, run_id, seconds)
            self.add(
                Measure(
                    "ingestion: late duplicate of a 1,000-node upload",
                    "uploads/s",
                    "rate",
                    ours,
                    raw,
                    "psycopg: one indexed read of the run's upload position",
                )
            )
            ours, _ = await bench_ingest.scenario(db, "n50", bench_ingest.progress(50, nodes=50), 1, seconds)
            tick, _ = await bench_ingest.scenario(db, "tick", bench_ingest.progress(1, nodes=50), 1, seconds)
        # The upload shape a worker sends most: one node of its map moved (one step.progress event).
        raw_tick = await asyncio.to_thread(baselines.append_rate, self.bin_dir, self.url, 1, 1, seconds)
        self.add(
            Measure(
                "ingestion: progress tick, 1 of 50 nodes changed",
                "uploads/s",
                "rate",
                tick,
                raw_tick,
                "pgbench: one-statement append with NOTIFY",
            )
        )
        raw = await asyncio.to_thread(baselines.append_rate, self.bin_dir, self.url, 1, 50, seconds)
        self.n50_raw = raw / 50
        self.add(
            Measure(
                "ingestion: 50-node upload, every node changed",
                "uploads/s",
                "rate",
                ours,
                self.n50_raw,
                "pgbench: one-statement append of its 50 events with NOTIFY",
            )
        )

    async def http(self, in_process_8: Measure, raw_wake: list[float]) -> None:
        with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
            proc, base = await asyncio.to_thread(common.serve, self.url, Path(tmp), bench_service.TOKEN)
            try:
                appends, _ = await bench_service.throughput(base, 8, self.profile.seconds)
                self.add(
                    Measure(
                        "HTTP append, 8 clients (one event per request)",
                        "appends/s",
                        "rate",
                        appends,
                        in_process_8.ours,
                        "ours in-process, 8 runs (row above)",
                    )
                )
                # httpx costs more CPU per request than the server: on few cores it measures both.
                light = await bench_service.light_appends(base, 8, self.profile.seconds)
                self.add(
                    Measure(
                        "HTTP append, 8 clients, bare asyncio client",
                        "appends/s",
                        "rate",
                        light,
                        in_process_8.ours,
                        "ours in-process, 8 runs (row above)",
                    )
                )
                readers = self.profile.many_waiters
                fan = await bench_service.fanout(base, self.url, readers, sse=False)
                label = f"HTTP: {readers:,} long-polls woken by one append"
                what = "one bare LISTEN connection + one re-read"
                self.add(Measure(f"{label}, p50", "ms", "latency", fan["p50"], _p(raw_wake, 0.5), what))
                self.add(Measure(f"{label}, p99", "ms", "latency", fan["p99"], _p(raw_wake, 0.99), what))
                tails = await bench_service.fanout(base, self.url, readers, sse=True)
                label = f"HTTP: {readers:,} SSE tails woken by one append"
                self.add(Measure(f"{label}, p50", "ms", "latency", tails["p50"], _p(raw_wake, 0.5), what))
                self.add(Measure(f"{label}, p99", "ms", "latency", tails["p99"], _p(raw_wake, 0.99), what))
                if self.n50_raw is not None:
                    uploads = await bench_ingest.http_uploads(
                        base,
                        bench_service.TOKEN,
                        "n50",
                        bench_ingest.progress(50, nodes=50),
                        4,
                        self.profile.seconds,
                    )
                    self.add(
                        Measure(
                            "HTTP: 50-node upload, every node changed, 4 clients",
                            "uploads/s",
                            "rate",
                            uploads,
                            self.n50_raw,
                            "pgbench: one-statement append of its 50 events with NOTIFY",
                        )
                    )
            finally:
                proc.terminate()
                await asyncio.to_thread(proc.wait, 30)

    async def reporter(self) -> None:
        for kind in bench_reporter.HOT_KINDS:
            ours, decode = await bench_reporter.hot_path(kind, self.profile.reporter_events, 7)
            what = "json.loads of the same runner event's JSON line"
            self.add(Measure(f"reporter: {kind}", "µs/event", "latency", ours, decode, what))

    async def run(self) -> list[Measure]:
        eight = await self.appends()
        await self.claims()
        raw_wake = await self.wakes()
        await self.ingestion()
        if self.profile.http:
            await self.http(eight, raw_wake)
        await self.reporter()
        return self.rows


def _figure(value: float, unit: str) -> str:
    if unit in ("ms", "µs/event"):
        return f"{value:,.2f} {unit}"
    return f"{value:,.0f} {unit}"


def median_rows(rounds: Sequence[Sequence[Measure]]) -> tuple[list[Measure], dict[str, list[float]]]:
    """Per measure, the round whose ratio is the median of every round's (an odd count picks the
    middle one; an even one the lower middle), with its own figures so a row stays one measurement;
    and each measure's ratios in round order, for the spread. A shared machine's noise moves one
    round; the median of interleaved rounds keeps it out of the verdict."""
    by_name: dict[str, list[Measure]] = {}
    for measures in rounds:
        for row in measures:
            by_name.setdefault(row.measure, []).append(row)
    chosen = [sorted(rows, key=lambda row: row.ratio)[(len(rows) - 1) // 2] for rows in by_name.values()]
    return chosen, {name: [row.ratio for row in rows] for name, rows in by_name.items()}


def table_rows(rows: list[Measure], spread: Mapping[str, list[float]] | None = None) -> list[tuple[str, ...]]:
    """`measure | ours | baseline | ratio`, and `ratio per round` when several rounds ran."""
    table: list[tuple[str, ...]] = []
    for row in rows:
        ours, baseline = _figure(row.ours, row.unit), _figure(row.baseline, row.unit)
        cells = (row.measure, ours, baseline, f"{row.ratio:.2f}")
        if spread is not None:
            cells += (" / ".join(f"{ratio:.2f}" for ratio in spread[row.measure]),)
        table.append(cells)
    return table
