"""`ledger demo`: start Postgres and the service, drive a simulated worker run, show it live.

The work lives in `ledger.cli.demo.run`, imported only when the command runs, so that the other
`ledger` commands do not pay for loading the reporter and the web stack.
"""

from __future__ import annotations

import click

DEFAULT_ROWS = 6_000
DEFAULT_RATE = 900.0


@click.command()
@click.option("--rows", default=DEFAULT_ROWS, show_default=True, type=click.IntRange(100, 200_000))
@click.option(
    "--rate",
    default=DEFAULT_RATE,
    show_default=True,
    type=click.FloatRange(min=10),
    help="Rows per second the simulated worker processes.",
)
def demo(rows: int, rate: float) -> None:
    """Start Postgres and the service, run a simulated worker through the reporter, show it live."""
    from ledger.cli.demo import run as demo_run
    from ledger.cli.demo.scenario import DemoPlan

    demo_run.main(DemoPlan(rows=rows, rows_per_second=rate))
