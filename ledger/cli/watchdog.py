"""`ledger watchdog [--once]`: fail stalled runs, straight on the database (no service needed).

The service already runs the watchdog; this command is for a deployment that runs it as its own
process (or a cron job with `--once`). Each pass also makes the event log's partitions ahead.
Several may run at once: the watchdog locks the runs it fails (`ledger.runlog.watchdog`), so
nothing is failed twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import click

from ledger.cli.database import database
from ledger.cli.shown import shown
from ledger.db import Database
from ledger.errors import SchemaMissing
from ledger.runlog import retention
from ledger.runlog.watchdog import DEFAULT_INTERVAL_S, DEFAULT_STALL_AFTER_S, Watchdog

__all__ = [
    "watchdog",
]


async def _watch(url: str, *, once: bool, stall_after_s: float, interval_s: float) -> None:
    async with Database(url, min_size=1, max_size=2) as db:
        dog = Watchdog(
            db,
            stall_after_s=stall_after_s,
            interval_s=interval_s,
            retention=retention.parse_retention(os.environ.get(retention.RETENTION_VAR)),
        )
        try:
            await dog.record_stall_limit()
        except SchemaMissing as exc:
            raise click.ClickException(str(exc)) from None
        while True:
            try:
                failed = await dog.run_once()
            except SchemaMissing as exc:
                raise click.ClickException(str(exc)) from None
            await dog.make_partitions()
            if failed:
                click.echo(shown(f"failed {len(failed)} stalled run(s): {', '.join(failed)}", markup=False))
            elif once:
                click.echo("no stalled runs")
            if once:
                swept = await dog.sweep()
                click.echo(
                    f"swept {swept.mappings} expired run mapping(s), "
                    f"{swept.idempotency_keys} expired Idempotency-Key answer(s), "
                    f"{swept.runs} finished run(s) past retention "
                    f"({swept.partitions} event log partition(s) dropped whole)"
                )
                if dog.retention_blocked is not None:
                    # Not a failure of this pass: the next one finishes it.
                    click.echo(f"left for the next pass: {dog.retention_blocked}", err=True)
                return
            await asyncio.sleep(interval_s)


@click.command()
@click.option("--once", is_flag=True, help="One pass, then exit (for cron).")
@click.option(
    "--stall-after",
    "stall_after_s",
    default=DEFAULT_STALL_AFTER_S,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Seconds without an event after which a non-terminal run is failed.",
)
@click.option(
    "--interval",
    "interval_s",
    default=DEFAULT_INTERVAL_S,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds between passes.",
)
def watchdog(once: bool, stall_after_s: float, interval_s: float) -> None:
    """Fail runs with no event for --stall-after seconds and sweep expired run mappings,
    Idempotency-Key answers and finished runs past LEDGER_RUN_RETENTION (on the configured
    database)."""
    with database(announce=False) as url, contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_watch(url, once=once, stall_after_s=stall_after_s, interval_s=interval_s))
