"""`ledger demo`: start Postgres and the service, drive a simulated worker run, show it live.

The work lives in `ledger.cli.demo.run`, imported only when the command runs, so that the other
`ledger` commands do not pay for loading the reporter and the web stack.
"""

from __future__ import annotations

import sys

import click

__all__ = [
    "DEFAULT_RATE",
    "DEFAULT_ROWS",
    "TERMINAL_PACE_S",
    "demo",
    "pace_for",
]

DEFAULT_ROWS = 6_000
DEFAULT_RATE = 900.0
# On a terminal the run is stretched to about a minute: long enough to open its page and sign in.
TERMINAL_PACE_S = 60.0


def pace_for(pace: float | None, *, terminal: bool) -> float:
    """Seconds the run should take: `--pace`, else a minute for a person at a terminal, else 0
    (as fast as `--rate` goes: a test or CI waits for nothing)."""
    if pace is not None:
        return pace
    return TERMINAL_PACE_S if terminal else 0.0


@click.command()
@click.option("--rows", default=DEFAULT_ROWS, show_default=True, type=click.IntRange(100, 200_000))
@click.option(
    "--rate",
    default=DEFAULT_RATE,
    show_default=True,
    type=click.FloatRange(min=10),
    help="Rows per second the simulated worker processes.",
)
@click.option(
    "--pace",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help=f"Stretch the run to take about this long, so a person can watch it live (default: "
    f"{TERMINAL_PACE_S:g} on a terminal, else as fast as --rate goes; 0: as fast).",
)
@click.option(
    "--exit",
    "exit_at_once",
    is_flag=True,
    help="Stop the service when the run ends (it always does when stdout is not a terminal).",
)
@click.option(
    "--serve",
    "serve_after",
    is_flag=True,
    help="Keep serving after the run until Ctrl-C or SIGTERM even when stdout is not a terminal "
    "(then the run's page and the token are printed as on a terminal).",
)
def demo(rows: int, rate: float, pace: float | None, exit_at_once: bool, serve_after: bool) -> None:
    """Start Postgres and the service, run a simulated worker through the reporter, show it live.

    On a terminal (or with --serve) it prints the run's page on the dashboard and the token to sign
    in with, and keeps serving after the run, so the page can be opened, until Ctrl-C.
    """
    from ledger.cli.demo import run as demo_run
    from ledger.cli.demo.scenario import DemoPlan

    # Only a person at a terminal can open the page; a pipe (a test, CI) wants the demo to end.
    terminal = sys.stdout.isatty()
    keep_serving = serve_after or (terminal and not exit_at_once)
    plan = DemoPlan(rows=rows, rows_per_second=rate).paced(pace_for(pace, terminal=terminal))
    demo_run.main(plan, keep_serving=keep_serving)
