"""Client commands: `ledger runs`, `ledger run`, `ledger events`, `ledger pool` (over HTTP).

They talk to the service through `ledger.client.LedgerClient.from_env()`: `LEDGER_URL` (default
http://127.0.0.1:8787) with the token from `LEDGER_TOKEN`, else the first of `LEDGER_API_TOKENS`,
else the token file `ledger serve` stored in the data dir. Failures are one line on stderr and a
non-zero exit.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager

import click
from rich.console import Console

from ledger.cli import render
from ledger.client import URL_VAR, LedgerClient, service_url
from ledger.errors import LedgerError, LedgerUnavailable, Unauthorized


def _now_ms() -> int:
    return int(time.time() * 1000)


def one_line(exc: BaseException) -> str:
    """The error's text with its notes (the HTTP status and request), on one line."""
    notes = getattr(exc, "__notes__", None) or []
    text = f"{exc} ({'; '.join(notes)})" if notes else str(exc)
    return " ".join(text.split())


@contextmanager
def _client() -> Iterator[LedgerClient]:
    url = service_url()
    try:
        with LedgerClient.from_env() as client:
            yield client
    except Unauthorized as exc:
        raise click.ClickException(
            f"the ledger service at {url} refused the API token ({one_line(exc)}); "
            "set LEDGER_TOKEN to one of the service's LEDGER_API_TOKENS"
        ) from None
    except LedgerUnavailable as exc:
        # No answer at all (no HTTP status noted): most likely nothing is listening there.
        hint = (
            ""
            if getattr(exc, "__notes__", None)
            else f"; is `ledger serve` running? (set {URL_VAR} to point elsewhere)"
        )
        raise click.ClickException(one_line(exc) + hint) from None
    except LedgerError as exc:
        raise click.ClickException(one_line(exc)) from None


def _console() -> Console:
    return Console(highlight=False)


@click.command()
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000), help="How many runs.")
@click.option("--before", metavar="CURSOR", help="The runs after this cursor (printed under a full page).")
def runs(limit: int, before: str | None) -> None:
    """List the newest runs: status, age, last event, steps done, rows."""
    with _client() as client:
        page = client.runs_page(limit, before)
    if not page["runs"]:
        click.echo("no runs yet" if before is None else "no more runs")
        return
    _console().print(render.runs_table(page["runs"], _now_ms()))
    if page["next_before"] is not None:
        click.echo(f"more: ledger runs --limit {limit} --before {shlex.quote(page['next_before'])}")


@click.command()
@click.argument("run_id")
def run(run_id: str) -> None:
    """Show one run: its steps with progress bars and counts, and its terminal state."""
    with _client() as client:
        body = client.get_run(run_id)
    _console().print(render.run_detail(body, _now_ms()))


@click.command()
@click.argument("run_id")
@click.option("--follow", "-f", is_flag=True, help="Keep tailing (SSE) until the run's terminal event.")
@click.option(
    "--after", default="-1", show_default=True, help="Start after this seq (-1: from the start; now)."
)
def events(run_id: str, follow: bool, after: str) -> None:
    """Print a run's events, one line each; with --follow, tail them live until the run ends."""
    with _client() as client:
        stream = client.tail(run_id, after) if follow else client.iter_events(run_id, after)
        for event in stream:
            click.echo(render.event_line(event))


@click.command()
@click.argument("version")
@click.option("--pool", "pool_name", default="default", show_default=True, help="The pool's name.")
def pool(version: str, pool_name: str) -> None:
    """Warm-pool availability of VERSION: available and warming counts, and the entries."""
    with _client() as client:
        counts = client.counts(pool_name, version)
        entries = client.list_entries(pool_name, version)
    _console().print(render.pool_view(pool_name, version, counts, entries, _now_ms()))


COMMANDS = (runs, run, events, pool)
