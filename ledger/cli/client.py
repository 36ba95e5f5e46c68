"""Client commands: `ledger runs`, `ledger run`, `ledger events`, `ledger pool` (over HTTP).

They talk to the service through `ledger.client.LedgerClient.from_env()`: `LEDGER_URL` (default
http://127.0.0.1:8787) with the token from `LEDGER_TOKEN`, else the first of `LEDGER_API_TOKENS`,
else the token file `ledger serve` stored in the data dir. Failures are one line on stderr and a
non-zero exit.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
from rich.console import Console

from ledger import tokens
from ledger.cli import render
from ledger.cli.exits import EXIT_LEDGER, EXIT_TOKEN, CliError, token_refused
from ledger.cli.shown import shown
from ledger.client import URL_VAR, LedgerClient, RetryPolicy, service_url
from ledger.errors import LedgerError, LedgerUnavailable, NotFound, Unauthorized
from ledger.text import one_line

__all__ = [
    "COMMANDS",
    "command_client",
    "deadline_option",
]

# How long a client command keeps retrying an unreachable service, unless --deadline says: long
# enough to ride out a restart of `ledger serve`, short enough that a person who forgot to start it
# learns it at once.
_DEFAULT_DEADLINE_S = 5.0
_F = TypeVar("_F", bound=Callable[..., Any])


def _now_ms() -> int:
    return int(time.time() * 1000)


def _one_line(exc: BaseException) -> str:
    """The error's text with its notes (the HTTP status and request), on one line."""
    notes = getattr(exc, "__notes__", None) or []
    return one_line(f"{exc} ({'; '.join(notes)})" if notes else exc)


def _unreachable_hint(exc: BaseException) -> str:
    """What to check when the service did not answer at all (no HTTP status noted)."""
    if getattr(exc, "__notes__", None):
        return ""
    return f"; is `ledger serve` running? (set {URL_VAR} to point elsewhere)"


def deadline_option(default: float = _DEFAULT_DEADLINE_S) -> Callable[[_F], _F]:
    return click.option(
        "--deadline",
        "deadline_s",
        default=default,
        show_default=True,
        type=click.FloatRange(min=0),
        metavar="SECONDS",
        help=f"Keep retrying an unreachable ledger ({URL_VAR}) this long; the first failure is "
        "printed at once.",
    )


@contextmanager
def command_client(
    deadline_s: float = _DEFAULT_DEADLINE_S, *, needs: str = "a read token or an admin token"
) -> Iterator[LedgerClient]:
    """A client of `LEDGER_URL` that retries an unreachable service until `deadline_s`, printing
    its first failure at once; every failure becomes one line and its exit code. `needs` says
    which token the command needs, for the line a refused token prints."""
    url = service_url()
    printed: list[Exception] = []
    name = click.get_current_context().command_path

    def first_failure(exc: Exception) -> None:
        if not printed:
            printed.append(exc)
            click.echo(
                shown(
                    f"Error: {name}: {_one_line(exc)}{_unreachable_hint(exc)}; retrying for up to "
                    f"{deadline_s:g} s (--deadline)",
                    markup=False,
                ),
                err=True,
            )

    try:
        with LedgerClient.from_env(retry=RetryPolicy.until(deadline_s, first_failure)) as client:
            yield client
    except Unauthorized as exc:
        refused = token_refused(_one_line(exc), exc.status, url=url, needs=needs, command="this command")
        raise CliError(refused, EXIT_TOKEN) from None
    except LedgerUnavailable as exc:
        given_up = f"gave up after {deadline_s:g} s: " if printed else ""
        raise CliError(given_up + _one_line(exc) + _unreachable_hint(exc), EXIT_LEDGER) from None
    except LedgerError as exc:
        raise CliError(_one_line(exc)) from None


# Piped, a table is as wide as its rows (rich would cut it to 80 columns and wrap its cells): a
# script reads whole values, and `--json` is there for one that wants the data itself.
_PIPED_WIDTH = 10_000


def _console() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(highlight=False, width=_PIPED_WIDTH)
    return console


def _since_ms(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """`--since`: a duration back from now (90s, 30m, 24h, 7d) or an ISO 8601 time (UTC unless it
    names an offset), as epoch milliseconds."""
    if value is None:
        return None
    try:
        return _now_ms() - tokens.ttl_seconds(value) * 1000
    except ValueError:
        pass
    try:
        at = datetime.fromisoformat(value.strip())
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is neither a duration (90s, 30m, 24h, 7d) nor an ISO time (2026-12-03T09:00)"
        ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return int(at.timestamp() * 1000)


def _echo_json(value: object) -> None:
    """One JSON value on one line, exactly as the API gave it (machine-readable output)."""
    click.echo(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


_json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print the API's JSON as it is (events: one object a line)."
)


@click.command("runs")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000), help="How many runs.")
@click.option("--before", metavar="CURSOR", help="The runs after this cursor (printed under a full page).")
@click.option("--status", metavar="STATUS", help="Only runs with this status (running, failed, …).")
@click.option("--play", metavar="NAME", help="Only runs of this play.")
@click.option(
    "--since",
    "since_ms",
    metavar="WHEN",
    callback=_since_ms,
    help="Only runs created since: a duration back from now (30m, 24h, 7d) or an ISO time.",
)
@_json_option
@deadline_option()
def _runs(
    limit: int,
    before: str | None,
    status: str | None,
    play: str | None,
    since_ms: int | None,
    as_json: bool,
    deadline_s: float,
) -> None:
    """List the newest runs: status, age, last event, steps by state, rows, why a run ended."""
    with command_client(deadline_s) as client:
        page = client.runs_page(limit, before, status=status, play=play, since_ms=since_ms)
    if as_json:
        _echo_json(page)
        return
    if not page["runs"]:
        filtered = status is not None or play is not None or since_ms is not None
        click.echo(
            ("no more runs" if before is not None else "no runs yet") + (" that match" if filtered else "")
        )
        return
    _console().print(render.runs_table(page["runs"], _now_ms()))
    if page["next_before"] is not None:
        # The next page is read with the same filters (a `--since` duration as the time it meant).
        again = [f"--limit {limit}"]
        if status is not None:
            again.append(f"--status {shlex.quote(status)}")
        if play is not None:
            again.append(f"--play {shlex.quote(play)}")
        if since_ms is not None:
            when = datetime.fromtimestamp(since_ms / 1000, UTC).isoformat(timespec="milliseconds")
            again.append(f"--since {shlex.quote(when)}")
        again.append(f"--before {shlex.quote(page['next_before'])}")
        click.echo(shown(f"more: ledger runs {' '.join(again)}", markup=False))


@click.command("run")
@click.argument("run_id")
@_json_option
@deadline_option()
def _run(run_id: str, as_json: bool, deadline_s: float) -> None:
    """Show one run: its steps with progress bars, counts, states and reasons, and how it ended."""
    with command_client(deadline_s) as client:
        body = client.get_run(run_id)
    if as_json:
        _echo_json(body)
        return
    _console().print(render.run_detail(body, _now_ms()))


# How long `ledger events --follow` waits for a run that does not exist yet, unless --wait says.
_DEFAULT_WAIT_S = 60.0
# How often it looks again meanwhile.
_WAIT_POLL_S = 0.5


def _wait_for_run(client: LedgerClient, run_id: str, wait_s: float) -> None:
    """Return once the run exists; `NotFound` once `wait_s` has passed without it. A watcher started
    beside the worker that creates the run must not lose the race to it."""
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            client.get_terminal(run_id)
            return
        except NotFound:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            if not said:
                click.echo(f"waiting up to {wait_s:g} s for run {run_id!r} to be created (--wait)", err=True)
                said = True
            time.sleep(min(_WAIT_POLL_S, left))


@click.command("events")
@click.argument("run_id")
@click.option("--follow", "-f", is_flag=True, help="Keep tailing (SSE) until the run's terminal event.")
@click.option(
    "--after", default="-1", show_default=True, help="Start after this seq (-1: from the start; now)."
)
@click.option(
    "--wait",
    "wait_s",
    default=_DEFAULT_WAIT_S,
    show_default=True,
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="With --follow: wait this long for a run that does not exist yet (0: not at all).",
)
@_json_option
@deadline_option()
def _events(run_id: str, follow: bool, after: str, wait_s: float, as_json: bool, deadline_s: float) -> None:
    """Print a run's events, one line each; with --follow, tail them live until the run ends."""
    with command_client(deadline_s) as client:
        if follow:
            _wait_for_run(client, run_id, wait_s)
        stream = client.tail(run_id, after) if follow else client.iter_events(run_id, after)
        for event in stream:
            if as_json:
                _echo_json(event)
            else:
                click.echo(shown(render.event_line(event), markup=False))


@click.command("pool")
@click.argument("version")
@click.option("--pool", "pool_name", default="default", show_default=True, help="The pool's name.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print {pool, version, counts, entries}: the API's counts and entries as they are.",
)
@deadline_option()
def _pool(version: str, pool_name: str, as_json: bool, deadline_s: float) -> None:
    """Warm-pool availability of VERSION: available and warming counts, and the entries."""
    with command_client(deadline_s) as client:
        counts = client.counts(pool_name, version)
        entries = client.list_entries(pool_name, version)
    if as_json:
        # Two answers in one object: `GET …/counts` whole, and `GET …/entries`'s `entries`.
        _echo_json({"pool": pool_name, "version": version, "counts": counts, "entries": entries})
        return
    _console().print(render.pool_view(pool_name, version, counts, entries, _now_ms()))


COMMANDS = (_runs, _run, _events, _pool)
