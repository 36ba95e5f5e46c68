"""Client commands: `ledger runs`, `ledger run`, `ledger events`, `ledger pool` (over HTTP).

They talk to the service through `ledger.client.LedgerClient.from_env()`: `LEDGER_URL` (default
http://127.0.0.1:8787) with the token from `LEDGER_TOKEN`, else the first of `LEDGER_API_TOKENS`,
else the token file `ledger serve` stored in the data dir. Failures are one line on stderr and a
non-zero exit.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from rich.console import Console

from ledger.auth import API_TOKENS_VAR, CLIENT_TOKEN_VAR
from ledger.cli import render
from ledger.cli.exits import EXIT_LEDGER, EXIT_TOKEN, CliError
from ledger.client import URL_VAR, LedgerClient, RetryPolicy, service_url
from ledger.errors import LedgerError, LedgerUnavailable, Unauthorized

__all__ = [
    "COMMANDS",
    "deadline_option",
]

# How long a client command keeps retrying an unreachable service, unless --deadline says.
_DEFAULT_DEADLINE_S = 30.0
_F = TypeVar("_F", bound=Callable[..., Any])


def _now_ms() -> int:
    return int(time.time() * 1000)


def _one_line(exc: BaseException) -> str:
    """The error's text with its notes (the HTTP status and request), on one line."""
    notes = getattr(exc, "__notes__", None) or []
    text = f"{exc} ({'; '.join(notes)})" if notes else str(exc)
    return " ".join(text.split())


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


def _token_refused(exc: Unauthorized, url: str, needs: str) -> CliError:
    """The one line for a refused token: what the service said, and which token would do."""
    if exc.status == 403:
        # The service's reason names the token's scope and what this request needs instead.
        advice = f"set {CLIENT_TOKEN_VAR} to such a token"
    else:
        advice = (
            f"this command needs {needs}: set {CLIENT_TOKEN_VAR} to one (an admin token is one of "
            f"the service's {API_TOKENS_VAR} or its api-token file; `ledger token create` mints the others)"
        )
    refused = f"the ledger service at {url} refused the API token ({_one_line(exc)})"
    return CliError(f"{refused}; {advice}", EXIT_TOKEN)


@contextmanager
def _client(
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
                f"{name}: {_one_line(exc)}{_unreachable_hint(exc)}; retrying for up to {deadline_s:g} s "
                "(--deadline)",
                err=True,
            )

    try:
        with LedgerClient.from_env(retry=RetryPolicy.until(deadline_s, first_failure)) as client:
            yield client
    except Unauthorized as exc:
        raise _token_refused(exc, url, needs) from None
    except LedgerUnavailable as exc:
        given_up = f"gave up after {deadline_s:g} s: " if printed else ""
        raise CliError(given_up + _one_line(exc) + _unreachable_hint(exc), EXIT_LEDGER) from None
    except LedgerError as exc:
        raise CliError(_one_line(exc)) from None


def _console() -> Console:
    return Console(highlight=False)


def _echo_json(value: object) -> None:
    """One JSON value on one line, exactly as the API gave it (machine-readable output)."""
    click.echo(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


_json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print the API's JSON as it is (events: one object a line)."
)


@click.command("runs")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000), help="How many runs.")
@click.option("--before", metavar="CURSOR", help="The runs after this cursor (printed under a full page).")
@_json_option
@deadline_option()
def _runs(limit: int, before: str | None, as_json: bool, deadline_s: float) -> None:
    """List the newest runs: status, age, last event, steps by state, rows, why a run ended."""
    with _client(deadline_s) as client:
        page = client.runs_page(limit, before)
    if as_json:
        _echo_json(page)
        return
    if not page["runs"]:
        click.echo("no runs yet" if before is None else "no more runs")
        return
    _console().print(render.runs_table(page["runs"], _now_ms()))
    if page["next_before"] is not None:
        click.echo(f"more: ledger runs --limit {limit} --before {shlex.quote(page['next_before'])}")


@click.command("run")
@click.argument("run_id")
@_json_option
@deadline_option()
def _run(run_id: str, as_json: bool, deadline_s: float) -> None:
    """Show one run: its steps with progress bars, counts, states and reasons, and how it ended."""
    with _client(deadline_s) as client:
        body = client.get_run(run_id)
    if as_json:
        _echo_json(body)
        return
    _console().print(render.run_detail(body, _now_ms()))


@click.command("events")
@click.argument("run_id")
@click.option("--follow", "-f", is_flag=True, help="Keep tailing (SSE) until the run's terminal event.")
@click.option(
    "--after", default="-1", show_default=True, help="Start after this seq (-1: from the start; now)."
)
@_json_option
@deadline_option()
def _events(run_id: str, follow: bool, after: str, as_json: bool, deadline_s: float) -> None:
    """Print a run's events, one line each; with --follow, tail them live until the run ends."""
    with _client(deadline_s) as client:
        stream = client.tail(run_id, after) if follow else client.iter_events(run_id, after)
        for event in stream:
            if as_json:
                _echo_json(event)
            else:
                click.echo(render.event_line(event))


@click.command("pool")
@click.argument("version")
@click.option("--pool", "pool_name", default="default", show_default=True, help="The pool's name.")
@deadline_option()
def _pool(version: str, pool_name: str, deadline_s: float) -> None:
    """Warm-pool availability of VERSION: available and warming counts, and the entries."""
    with _client(deadline_s) as client:
        counts = client.counts(pool_name, version)
        entries = client.list_entries(pool_name, version)
    _console().print(render.pool_view(pool_name, version, counts, entries, _now_ms()))


COMMANDS = (_runs, _run, _events, _pool)
