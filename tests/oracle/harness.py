"""Playing a scenario through real reporters into the real ledger, with and without faults.

`play` feeds a `Scenario` to `ProgressReporter`s batch by batch, exactly as a worker would:

* one batch — one reporter, finalized at the end the way `ledger report` does it (its `report`
  reads the stream's result line, the terminal truth, and finalizes, or fails the run without one);
* ``resume`` — the same attempt in several batches: a batch ends with ``end_batch()`` (a required
  forced flush, retried) and `aclose` (no finalize), the next batch is a new reporter that first
  calls ``resume()``;
* ``attempts`` — batch *i* is producer attempt *i*, a new reporter without resume.

Uploads happen only at the scenario's flush points, at batch ends, and when the harness awaits
(sheet rows, terminal truth, finalize): the reporter's throttle is off (``interval`` 0) and so is
its trailing timer, its wall clock is a counter, so the oracle run and the faulty run make the same
uploads from the same states unless a fault changes that. Before the last batch's finalize the
scenario's sheet rows are recorded through `ledger.ingest.sheets.record_sheet_rows`; `report` then
reads the terminal truth.

A `Backend` builds the transport (direct or HTTP, each with or without a `FaultPlan`) and carries
out disruptions at flush points: a service restart or outage (HTTP) and a real Postgres restart or
outage. An *outage* takes the server down, starts the upload, and brings it back while the upload
is being tried; a *restart* takes it down and up between two uploads.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from ledger.cli import report as report_cli
from ledger.client import RetryPolicy
from ledger.db import DB_FAULTS, Database
from ledger.ingest.sheets import record_sheet_rows
from reporter import DirectTransport, ProgressReporter
from reporter.transports.http import HttpTransport
from reporter.transports.protocol import Transport
from tests.oracle.faults import DirectFaults, FaultPlan, HttpFaults
from tests.oracle.services import OwnPostgres, ServiceThread
from tests.oracle.strategies import BATCH_END, Scenario, burst_lines

FINALIZE_DEADLINE_S = 20.0
OUTAGE_S = 0.3
START_MS = 1_767_225_600_000


async def fast_sleep(seconds: float) -> None:
    """The reporter's and the retry policy's sleep: real but tiny, so retries cannot spin."""
    await asyncio.sleep(min(seconds, 0.005))


def counter_wall_clock() -> Callable[[], int]:
    ticks = itertools.count()
    return lambda: START_MS + 1_000 * next(ticks)


Action = Callable[[], Awaitable[None]]


class Backend(Protocol):
    name: str
    db: Database  # the harness's own pool: sheet rows and projections

    async def transport(self, plan: FaultPlan | None) -> tuple[Transport, Callable[[], Awaitable[None]]]: ...

    async def disrupt(self, kind: str, action: Action) -> None: ...


async def _restart_postgres(pg: OwnPostgres, harness_db: Database, kind: str, action: Action) -> None:
    if kind == "pg_restart":
        await asyncio.to_thread(pg.restart)
        await harness_db.pool.check()
        await action()
        return
    await asyncio.to_thread(pg.stop)
    task = asyncio.ensure_future(action())
    try:
        await asyncio.sleep(OUTAGE_S)
    finally:
        await asyncio.to_thread(pg.start)
        await harness_db.pool.check()
    await task


@dataclass
class DirectBackend:
    """The direct transport on a pool of its own (the system under test's connections)."""

    db: Database
    ledger_db: Database
    pg: OwnPostgres | None = None
    name: str = "direct"

    async def transport(self, plan: FaultPlan | None) -> tuple[Transport, Callable[[], Awaitable[None]]]:
        inner = DirectTransport(self.ledger_db)

        async def close() -> None:
            return None

        return (inner if plan is None else DirectFaults(inner, plan, fast_sleep)), close

    async def disrupt(self, kind: str, action: Action) -> None:
        if kind in ("pg_restart", "pg_outage") and self.pg is not None:
            await _restart_postgres(self.pg, self.db, kind, action)
        else:
            await action()


@dataclass
class HttpBackend:
    """The HTTP transport to a real service (uvicorn in a thread) through a fault-injecting transport."""

    db: Database
    service: ServiceThread
    pg: OwnPostgres | None = None
    name: str = "http"
    retry: RetryPolicy = field(
        default_factory=lambda: RetryPolicy(max_attempts=4, max_total_s=10.0, initial_wait_s=0.001)
    )

    async def transport(self, plan: FaultPlan | None) -> tuple[Transport, Callable[[], Awaitable[None]]]:
        wire: httpx.AsyncBaseTransport = httpx.AsyncHTTPTransport()
        if plan is not None:
            wire = HttpFaults(wire, plan)
        http = HttpTransport(
            self.service.base_url,
            self.service.token,
            transport=wire,
            retry_policy=self.retry,
            timeout_s=10.0,
            sleep=fast_sleep,
        )
        return http, http.aclose

    async def disrupt(self, kind: str, action: Action) -> None:
        if kind == "service_restart":
            await asyncio.to_thread(self.service.restart)
            await action()
        elif kind == "service_outage":
            await asyncio.to_thread(self.service.stop)
            task = asyncio.ensure_future(action())
            try:
                await asyncio.sleep(OUTAGE_S)
            finally:
                await asyncio.to_thread(self.service.start)
            await task
        elif kind in ("pg_restart", "pg_outage") and self.pg is not None:
            await _restart_postgres(self.pg, self.db, kind, action)
        else:
            await action()


@dataclass
class PlayLog:
    """What happened during a play, for the failure message."""

    uploads_received: int = 0
    injected: dict[str, int] = field(default_factory=dict)
    disruptions_done: list[str] = field(default_factory=list)
    reporters: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None  # what `ledger report` answered for the last batch
    warnings: list[str] = field(default_factory=list)


async def result_lines(result: Any) -> AsyncIterator[str]:
    """The stream's end as `ledger report` reads it from stdin: the result line, if there is one."""
    if result is not None:
        yield json.dumps(result)


async def _with_retries(operation: Callable[[], Awaitable[Any]], attempts: int = 50) -> Any:
    """A harness-side database call that outlives a Postgres restart (the harness is not under test)."""
    for attempt in range(attempts):
        try:
            return await operation()
        except DB_FAULTS:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.1)
    return None


def _new_reporter(scenario: Scenario, run_id: str, transport: Transport, attempt: int) -> ProgressReporter:
    return ProgressReporter(
        run_id,
        transport,
        contract=scenario.contract,
        mode=scenario.mode,  # type: ignore[arg-type]
        producer_attempt=attempt,
        trailing_flush=False,
        interval=lambda rows: 0.0,
        # Real monotonic time: it only paces the retries towards the finalize deadline (the
        # throttle is off), and an outage lasts real time.
        clock=time.monotonic,
        wall_clock_ms=counter_wall_clock(),
        sleep=fast_sleep,
    )


async def play(
    scenario: Scenario,
    run_id: str,
    backend: Backend,
    *,
    plan: FaultPlan | None = None,
    disruptions: dict[int, str] | None = None,
    exits: tuple[int, ...] = (report_cli.EXIT_OK, report_cli.EXIT_NO_RESULT),
) -> PlayLog:
    """Feed the scenario to reporters for `run_id` (see the module docstring); `ledger report`
    exiting other than `exits` raises."""
    disruptions = disruptions or {}
    record = PlayLog()
    point = 0

    async def at_point(action: Action) -> None:
        nonlocal point
        kind = disruptions.get(point)
        point += 1
        if kind is None:
            await action()
        else:
            record.disruptions_done.append(f"{kind}@{point - 1}")
            await backend.disrupt(kind, action)

    batches = scenario.batches()
    attempts = scenario.attempts
    for index, (batch, attempt) in enumerate(zip(batches, attempts, strict=True)):
        last = index == len(batches) - 1
        transport, close = await backend.transport(plan)
        reporter = _new_reporter(scenario, run_id, transport, attempt)
        try:
            if index > 0 and scenario.batching == "resume":
                await reporter.resume(deadline_s=FINALIZE_DEADLINE_S)
            for item in batch:
                if item[0] == "event":
                    reporter.on_runner_event(item[1])
                elif item[0] == "burst":
                    for line in burst_lines(item[2], item[1], item[3]):
                        reporter.on_runner_event({"type": "log", "line": line, "source": "runner"})
                else:

                    async def flush(reporter: ProgressReporter = reporter, item: Any = item) -> None:
                        await reporter.flush(force=True, whole_tail=item == BATCH_END)

                    await at_point(flush)
            if last:
                rows = scenario.sheet_rows()
                if rows and report_cli.EXIT_OK in exits:  # not again into an ended run
                    await _with_retries(lambda rows=rows: record_sheet_rows(backend.db, run_id, rows))

                async def finalize(reporter: ProgressReporter = reporter) -> None:
                    record.exit_code = await report_cli.report(
                        reporter, result_lines(scenario.result), record.warnings.append
                    )
                    if record.exit_code not in exits:
                        raise RuntimeError(f"ledger report exited {record.exit_code}: {record.warnings}")

                await at_point(finalize)
            else:

                async def end_batch(reporter: ProgressReporter = reporter) -> None:
                    await reporter.end_batch(deadline_s=FINALIZE_DEADLINE_S)

                await at_point(end_batch)
        finally:
            await reporter.aclose()
            await close()
        record.reporters.append(
            {
                "attempt": attempt,
                "uploads_made": reporter.uploader.uploads_made,
                "failed_uploads": reporter.uploader.failed_uploads,
                "stopped": reporter.stopped,
            }
        )
    if plan is not None:
        record.uploads_received = len(plan.received)
        record.injected = dict(plan.injected)
    return record


async def late_upload(backend: Backend, plan: FaultPlan) -> str | None:
    """A running upload to the ended run after the last one: a new `upload_seq`, one step's message
    changed (a change that appends no event). What refused it (None: it was taken)."""
    payload = copy.deepcopy(plan.received[-1])
    payload["status"] = "running"
    payload["upload_seq"] = int(payload.get("upload_seq") or 0) + 1_000
    payload.pop("terminal_log_replay", None)
    nodes = payload.setdefault("live_node_progress", {})
    node = next(iter(nodes.values()), None)
    if node is None:
        nodes["late-step"] = {"message": "a late upload"}
    else:
        node["message"] = "a late upload"
    transport, close = await backend.transport(None)
    try:
        await transport.upload(payload)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        await close()
    return None


async def redeliver(backend: Backend, plan: FaultPlan, picks: tuple[int, ...]) -> list[str]:
    """Deliver some received payloads once more, without faults; what was refused, and why."""
    if not plan.received:
        return []
    transport, close = await backend.transport(None)
    refused = []
    try:
        for pick in picks:
            payload = plan.received[pick % len(plan.received)]
            try:
                await transport.upload(payload)
            except Exception as exc:
                refused.append(f"{type(exc).__name__}: {exc}")
    finally:
        await close()
    return refused
