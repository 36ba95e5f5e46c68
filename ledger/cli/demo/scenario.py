"""The demo's worker: a simulated play run reported to the ledger service through the HTTP transport.

`DemoPlan` shapes the run so that every part of the reporter shows: three code steps before the
dataset (they start at creation and settle when the map starts), a map over thousands of rows with
some failures, a tool step, an untaken branch (skipped when the run ends), and a terminal result
with a checkpoint that the reporter reconciles the map's counts from, then from the sheet outcomes
the data plane wrote. The three sources tell one story: the live counters, the checkpoint and the
sheet outcomes agree, so every number the demo shows, at every moment, is one the ledger keeps
(counts only grow, and the closing log line says the final counts).

`drive` feeds the runner events into a `ProgressReporter` at `rows_per_second`, stamping each log
line with the time it is written, writes the sheet outcomes page by page through
`POST /v1/runs/{id}/sheets` as the data plane would, then finalizes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import httpx

from reporter import HttpTransport, ProgressReporter, SimulatedRun

__all__ = [
    "DEMO_PLAY",
    "DemoPlan",
    "DriveReport",
    "Pacer",
    "drive",
    "open_run",
    "restamped",
]

DEMO_PLAY = "demo.enrich-leads"
_PRE_DATASET_STEPS = ("load", "validate", "dedupe")
_SHEET_BATCH = 2_000


@dataclass(frozen=True, kw_only=True)
class DemoPlan:
    """What the simulated run does (rows, failures, pace) and what the ledger must end with."""

    # Keep in step with the command's defaults (ledger.cli.demo.command; a unit test checks).
    rows: int = 6_000
    fail_every: int = 97
    rows_per_second: float = 900.0
    setup_s: float = 1.2
    tool_s: float = 0.8

    def duration_s(self) -> float:
        """About how long the run takes: the setup, the rows at their rate, the tool call."""
        return self.setup_s + self.rows / self.rows_per_second + self.tool_s

    def paced(self, seconds: float) -> DemoPlan:
        """The same run stretched to take about `seconds` (never shortened): every part slower
        by one factor, so the story keeps its shape, only slow enough for a person to watch."""
        factor = seconds / self.duration_s()
        if factor <= 1:
            return self
        return dataclasses.replace(
            self,
            rows_per_second=self.rows_per_second / factor,
            setup_s=self.setup_s * factor,
            tool_s=self.tool_s * factor,
        )

    def simulation(self) -> SimulatedRun:
        return SimulatedRun(rows=self.rows, fail_every=self.fail_every, physical_suffix="demo")

    def contract(self) -> dict[str, Any]:
        """The simulation's pipeline with two more code steps before the dataset."""
        contract = self.simulation().contract()
        substeps = contract["staticPipeline"]["substeps"]
        extra = [{"type": "code", "id": step, "field": step} for step in _PRE_DATASET_STEPS[1:]]
        contract["staticPipeline"]["substeps"] = [substeps[0], *extra, *substeps[1:]]
        return contract

    def step_order(self) -> list[str]:
        return [str(step["id"]) for step in self.contract()["staticPipeline"]["substeps"]]

    def map_node_id(self) -> str:
        return str(self.simulation().expected()["map_node_id"])

    def live_events(self) -> Iterator[dict[str, Any]]:
        """The runner's events as the reporter receives them."""
        return self.simulation().events()

    def sheet_rows(self) -> list[dict[str, str]]:
        """The data plane's outcome of every row."""
        return self.simulation().sheet_rows()

    def expected(self) -> dict[str, Any]:
        """What the ledger must hold for the map step at the end."""
        simulation = self.simulation()
        return {
            "status": "completed",
            "map_node_id": self.map_node_id(),
            "completed": simulation.completed_rows,
            "failed": simulation.failed_rows,
            "total": self.rows,
        }


def restamped(event: dict[str, Any], now: Callable[[], float] = time.time) -> dict[str, Any]:
    """A log line with its `[timestamp] ` prefix set to the time it is written (the simulation
    stamps its lines from a fixed start); other events as they are."""
    line = event.get("line")
    if event.get("type") != "log" or not isinstance(line, str) or not line.startswith("["):
        return event
    end = line.find("] ")
    if end < 0:
        return event
    at = datetime.fromtimestamp(now(), tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {**event, "line": f"[{at}]{line[end + 1 :]}"}


_Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class DriveReport:
    """The runner's result and the map step's live counters just before reconciliation."""

    result: dict[str, Any]
    live_completed: int | None
    live_failed: int | None
    live_total: int | None


class Pacer:
    """Holds the simulated worker to `rate` rows per second (sleeping only when ahead)."""

    def __init__(self, rate: float, clock: Callable[[], float], sleep: _Sleep) -> None:
        self.rate = rate
        self.clock = clock
        self.sleep = sleep
        self.start = clock()
        self.rows = 0

    async def row(self) -> None:
        self.rows += 1
        ahead = self.rows / self.rate - (self.clock() - self.start)
        # Sleeping per row would cost more than the rows; catch up in slices of >= 20 ms.
        if ahead >= 0.02:
            await self.sleep(ahead)


def _is_tool_start(event: dict[str, Any]) -> bool:
    inner = event.get("event")
    return isinstance(inner, dict) and inner.get("type") == "tool.call.started"


def _run_path(run_id: str, tail: str = "") -> str:
    return f"/v1/runs/{quote(run_id, safe='')}{tail}"


async def open_run(http: httpx.AsyncClient, run_id: str) -> None:
    response = await http.post("/v1/runs", json={"run_id": run_id, "play_name": DEMO_PLAY})
    response.raise_for_status()


async def _post_sheet_rows(http: httpx.AsyncClient, run_id: str, rows: list[dict[str, str]]) -> None:
    for start in range(0, len(rows), _SHEET_BATCH):
        response = await http.post(
            _run_path(run_id, "/sheets"), json={"rows": rows[start : start + _SHEET_BATCH]}
        )
        response.raise_for_status()


async def drive(
    plan: DemoPlan,
    base_url: str,
    token: str,
    run_id: str,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: _Sleep = asyncio.sleep,
) -> DriveReport:
    """Run the simulated worker against the service; returns its result and the pre-reconciliation
    counters of the map step.

    The run must already be open (`open_run`), so that a watcher can tail it from the first event.
    """
    sheet_rows = plan.sheet_rows()
    page = plan.simulation().page_size
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as http,
        HttpTransport(base_url, token) as transport,
    ):
        reporter = ProgressReporter(run_id, transport, contract=plan.contract())
        # The steps before the dataset start now; let them show before the map begins.
        await reporter.flush(force=True)
        await sleep(plan.setup_s)
        pacer = Pacer(plan.rows_per_second, clock, sleep)
        written = 0
        result: dict[str, Any] | None = None
        for event in plan.live_events():
            if event.get("type") == "result":
                result = event
                break
            reporter.on_runner_event(restamped(event))
            if _is_tool_start(event):
                # The notify call takes a moment, long enough to be seen running.
                await reporter.flush(force=True)
                await sleep(plan.tool_s)
            if event.get("type") == "row_update":
                await pacer.row()
                # The data plane records each page's outcomes once the page is through.
                if pacer.rows - written >= page or pacer.rows == plan.rows:
                    await _post_sheet_rows(http, run_id, sheet_rows[written : pacer.rows])
                    written = pacer.rows
        assert result is not None, "the simulation always ends with a result"
        await _post_sheet_rows(http, run_id, sheet_rows[written:])
        # Read now: finalize rewrites the node in place.
        live = reporter.state.nodes.get(plan.map_node_id())
        report = DriveReport(
            result=result,
            live_completed=live.completed if live else None,
            live_failed=live.failed if live else None,
            live_total=live.total if live else None,
        )
        await reporter.load_terminal_truth()
        await reporter.finalize(result)
        await reporter.aclose()
    return report
