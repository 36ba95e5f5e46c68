"""`ledger demo`'s work: the whole system on one machine, with nothing configured.

It starts (or reuses) Postgres — the embedded one unless `LEDGER_DATABASE_URL` says otherwise —
migrates it, serves the HTTP API in this process on a free local port with a one-off token, and
drives a simulated worker run (`ledger.cli.demo.scenario`) through the reporter's HTTP transport. Meanwhile it
tails the run's events from the service (SSE) and shows them: rich progress bars on a terminal,
plain lines otherwise. At the end it prints the reconciliation and the SQL to inspect the run. The
data stays in the database for `ledger runs`.

When the run starts it prints the run's page on the dashboard and the token to sign in with (never
in the URL). On a terminal the service then stays up after the run, so the page can be opened,
until Ctrl-C or SIGTERM; elsewhere (tests, CI), or with `--exit`, it stops at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import secrets
import signal
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import click
import httpx
from httpx_sse import aconnect_sse
from rich.console import Console
from rich.live import Live

from ledger import migrate, tracing
from ledger.cli import render
from ledger.cli.database import probe
from ledger.cli.demo.scenario import DemoPlan, DriveReport, drive, open_run
from ledger.cli.demo.view import DemoView
from ledger.cli.exits import EXIT_INTERRUPTED
from ledger.config import load_settings
from ledger.db import resolve_url

__all__ = [
    "main",
]

_STARTUP_TIMEOUT_S = 30.0
_WATCH_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True)
class _DemoService:
    """The demo's running service: where it listens, the one-off token it accepts, and the event
    set by Ctrl-C or SIGTERM."""

    base_url: str
    token: str
    stop: asyncio.Event

    def run_page(self, run_id: str) -> str:
        return f"{self.base_url}/ui/runs/{run_id}"


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[asyncio.Event]:
    """An event set by SIGINT or SIGTERM while the block runs.

    uvicorn installs handlers of its own while it serves, which would stop the service on the
    first Ctrl-C and then re-raise the signal (ending the process before the embedded Postgres is
    released). Entered once the service has started, these replace them, so the demo decides when
    the service stops; leaving the block restores the default handlers.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        # Not available off the main thread or on Windows: then the signals act as they would.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        yield stop
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


@contextlib.asynccontextmanager
async def _running_service(database_url: str) -> AsyncIterator[_DemoService]:
    """The ledger service in this process on a free local port, with a one-off token."""
    # The web stack loads only for the commands that serve.
    from ledger.service.app import create_app
    from ledger.service.server import build_server
    from ledger.service.settings import load_service_settings

    token = secrets.token_urlsafe(24)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # No watchdog: the demo must not fail other runs that happen to share the database.
    settings = dataclasses.replace(load_service_settings(port=port), watchdog=False, shutdown_grace_s=2.0)
    server = build_server(create_app(settings, database_url, [token]), settings)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while not server.started:
            if task.done():
                task.result()
                raise click.ClickException("the demo's ledger service stopped while starting")
            if time.monotonic() > deadline:
                raise click.ClickException(
                    f"the demo's ledger service did not start in {_STARTUP_TIMEOUT_S:g}s"
                )
            await asyncio.sleep(0.05)
        # The handlers stay until the service has shut down: a second Ctrl-C meanwhile is absorbed.
        with _stop_on_signals() as stop:
            try:
                yield _DemoService(f"http://127.0.0.1:{port}", token, stop)
            finally:
                server.should_exit = True
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, timeout=15)
    finally:
        server.should_exit = True
        if not task.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, timeout=15)
        sock.close()


async def _watch(base_url: str, token: str, run_id: str, on_event: Callable[[dict[str, Any]], None]) -> None:
    """Tail the run's events (SSE) until its terminal event, resuming after a dropped connection."""
    last_seq: int | None = None
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, timeout=httpx.Timeout(10, read=60)
    ) as http:
        for _ in range(20):
            extra = {} if last_seq is None else {"Last-Event-ID": str(last_seq)}
            path = f"/v1/runs/{run_id}/events/stream"
            try:
                async with aconnect_sse(http, "GET", path, params={"after": "-1"}, headers=extra) as source:
                    if source.response.status_code == 204:
                        return
                    source.response.raise_for_status()
                    async for sse in source.aiter_sse():
                        if not sse.data:
                            continue
                        event = json.loads(sse.data)
                        last_seq = int(sse.id) if sse.id else last_seq
                        on_event(event)
                        if event.get("type") == "terminal":
                            return
            except httpx.TransportError:
                await asyncio.sleep(0.2)
    raise click.ClickException(f"lost the event stream of run {run_id}")


class _Interrupted(Exception):
    """Ctrl-C or SIGTERM before the run finished."""


async def _run_demo(
    database_url: str,
    plan: DemoPlan,
    console: Console,
    *,
    live: bool,
    keep_serving: bool = False,
    on_outcome: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Serve, drive and show one demo run; returns the run and its sheet outcomes as the ledger has
    them, after handing them to `on_outcome`. With `keep_serving`, the service then stays up until
    Ctrl-C or SIGTERM. Raises `_Interrupted` when either comes before the run has finished."""
    run_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    view = DemoView(run_id=run_id, step_order=plan.step_order())
    screen = Live(view.renderable(), console=console, refresh_per_second=8) if live else None

    def on_event(event: dict[str, Any]) -> None:
        line = view.apply(event, time.monotonic())
        if screen is not None:
            screen.update(view.renderable())
        elif line is not None:
            print(line, flush=True)

    async with _running_service(database_url) as service:
        headers = {"Authorization": f"Bearer {service.token}"}
        async with httpx.AsyncClient(base_url=service.base_url, headers=headers, timeout=30) as http:
            await open_run(http, run_id)
            _say(console, f"run {run_id}: {plan.rows:,} rows through the reporter's HTTP transport")
            if keep_serving:
                # Only while the page stays up after the run: a link printed into a log or a pipe
                # would outlive the service it points at.
                for line in _page_lines(service, run_id):
                    _say(console, line)
            with screen or contextlib.nullcontext():
                report = await _until_stopped(
                    _drive_and_watch(plan, service.base_url, service.token, run_id, on_event), service.stop
                )
            run = (await http.get(f"/v1/runs/{run_id}")).json()
            sheets = (await http.get(f"/v1/runs/{run_id}/sheets")).json()
        outcome = {"run": run, "sheets": sheets.get("outcomes", []), "report": report}
        if on_outcome is not None:
            on_outcome(outcome)
        if keep_serving and not service.stop.is_set():
            _say(console, f"\nserving {service.run_page(run_id)} until Ctrl-C")
            await service.stop.wait()
            _say(console, "stopping the service")
    return outcome


def _say(console: Console, line: str) -> None:
    # As written: no markup, and no wrapping inside a URL or a token.
    console.print(line, markup=False, soft_wrap=True)


def _page_lines(service: _DemoService, run_id: str) -> list[str]:
    """Where to watch the run in a browser and how to sign in; the token is never part of a URL."""
    return [
        f"watch it in a browser: {service.run_page(run_id)}",
        f"  sign in with this demo's token (valid until Ctrl-C after the run): {service.token}",
    ]


async def _until_stopped(work: Any, stop: asyncio.Event) -> DriveReport:
    """`work`'s result, unless `stop` is set first: then `work` is cancelled and `_Interrupted` raised."""
    task: asyncio.Task[DriveReport] = asyncio.ensure_future(work)
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        raise _Interrupted
    finally:
        for pending in (task, stopped):
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pending


async def _drive_and_watch(
    plan: DemoPlan, base_url: str, token: str, run_id: str, on_event: Callable[[dict[str, Any]], None]
) -> DriveReport:
    watcher = asyncio.create_task(_watch(base_url, token, run_id, on_event))
    try:
        # The worker's side of the run as one trace (when OTEL_* asks): its uploads and what they did.
        with tracing.span("ledger demo run", run_id=run_id):
            report = await drive(plan, base_url, token, run_id)
        await asyncio.wait_for(asyncio.shield(watcher), timeout=_WATCH_TIMEOUT_S)
        return report
    finally:
        if not watcher.done():
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


def _summary_lines(outcome: dict[str, Any], plan: DemoPlan) -> list[str]:
    """How the run ended and the map step's counts, as the ledger holds them, checked against every
    other source of them: the live counters, the result's checkpoint and the sheet outcomes. Agreeing,
    they make one line; a source that disagrees is named with what it said."""
    run, report = outcome["run"], outcome["report"]
    stored = (run.get("live_node_progress") or {}).get(plan.map_node_id()) or {}
    held = (stored.get("completed"), stored.get("failed"), stored.get("total"))
    frames = ((report.result.get("checkpoint") or {}).get("mapFrames") or {}).get(plan.map_node_id()) or {}
    sources: list[tuple[str, tuple[object, object, object]]] = [
        ("the live counters", (report.live_completed, report.live_failed, report.live_total)),
        (
            "the checkpoint",
            (frames.get("completedRowsCount"), frames.get("failedRowsCount"), frames.get("totalRows")),
        ),
    ]
    sources.extend(
        (
            f"the sheet outcomes of {sheet['table_namespace']}",
            (sheet["completed"], sheet["failed"], sheet["total"]),
        )
        for sheet in outcome["sheets"]
    )
    lines = [f"run {run['run_id']}: {render.terminal_line(run)}"]
    counts = render.rows_cell(*held)
    differing = [(name, said) for name, said in sources if said != held]
    if not differing:
        agreeing = ", ".join(name for name, _ in sources[:-1]) + f" and {sources[-1][0]}"
        lines.append(f"step {plan.map_node_id()!r}: {counts} rows; {agreeing} agree")
        return lines
    lines.append(f"step {plan.map_node_id()!r}: {counts} rows, reconciled; before that:")
    lines.extend(f"  {name} said {render.rows_cell(*said)}" for name, said in differing)
    return lines


def _inspection_sql(run_id: str) -> list[str]:
    return [
        "SELECT run_id, status, age, last_event_type, steps_done, steps_total, rows_completed, rows_failed"
        f" FROM ledger.run_overview WHERE run_id = '{run_id}';",
        "SELECT node_id, completed, failed, total, started_at, completed_at, message"
        f" FROM ledger.step_progress WHERE run_id = '{run_id}' ORDER BY started_at NULLS LAST;",
        f"SELECT seq, type, ts, payload FROM ledger.event_log WHERE run_id = '{run_id}'"
        " AND type <> 'log' ORDER BY seq;",
    ]


def _print_outcome(outcome: dict[str, Any], plan: DemoPlan) -> None:
    """The reconciliation and how to inspect the run afterwards."""
    for line in _summary_lines(outcome, plan):
        click.echo(line)
    run_id = outcome["run"]["run_id"]
    click.echo("\nInspect it with SQL: `ledger psql` opens psql on this database, then")
    for statement in _inspection_sql(run_id):
        click.echo(f"    {statement}")
    click.echo(f"\nOr with `ledger serve` running: ledger runs; ledger run {run_id}")


def main(plan: DemoPlan, *, keep_serving: bool) -> None:
    """Run the demo with `plan` on the configured (or embedded) Postgres and print how to inspect
    it; with `keep_serving`, serve the dashboard afterwards until Ctrl-C or SIGTERM."""
    console = Console(highlight=False)
    settings = load_settings()
    url, server = resolve_url(settings)
    try:
        if server is not None:
            click.echo(f"embedded Postgres: data in {server.pgdata}")
        else:
            probe(url)
        migrate.upgrade(url)
        demo = _run_demo(
            url,
            plan,
            console,
            live=console.is_terminal,
            keep_serving=keep_serving,
            on_outcome=lambda outcome: _print_outcome(outcome, plan),
        )
        try:
            asyncio.run(demo)
        except _Interrupted:
            click.echo("Error: interrupted before the run finished; it stays open in the ledger", err=True)
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
    finally:
        if server is not None:
            server.stop()
