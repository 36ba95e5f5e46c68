"""`ledger gc [--retention 30d] [--batch N] [--dry-run]`: delete finished runs past retention.

The service's watchdog loop already does this every pass (a capped number of runs each); this
command works off a whole backlog at once, straight on the database, e.g. from cron or right after
lowering the retention. It deletes in batches, each its own transaction, skipping runs another
transaction holds (`ledger.runlog.retention`), so it never waits on an append and may run beside
the service. Event log partitions whose runs have all expired go first, whole
(`ledger.runlog.partitions`). A partition whose detach or drop waits past `--wait` for a session
that has the event log open (a reader left idle in a transaction) is cancelled and left for the
next run; the command then ends with one line naming that session, and exit 13.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

import click

from ledger.cli.database import database
from ledger.cli.exits import EXIT_BLOCKED, CliError
from ledger.cli.shown import shown
from ledger.db import Database
from ledger.errors import ConfigError, HeldBySession, SchemaMissing
from ledger.runlog import partitions
from ledger.runlog import retention as run_retention
from ledger.runlog.watchdog import Watchdog

__all__ = [
    "gc",
]


async def _collect(
    url: str, *, retention: timedelta, batch: int, dry_run: bool, wait_s: float
) -> tuple[list[str], HeldBySession | None]:
    """The lines to print: what was (or, `dry_run`, would be) deleted; and the session that held a
    partition's detach or drop past `wait_s`, if one did."""
    age = run_retention.describe(retention)
    async with Database(url, min_size=1, max_size=2) as db:
        dog = Watchdog(
            db, retention=retention, retention_batch_size=batch, retention_pass_cap=None, detach_wait_s=wait_s
        )
        try:
            if not dry_run:
                count = await dog.sweep_runs()
                return [
                    f"deleted {count} finished run(s) older than {age}"
                    f" ({dog.partitions_dropped} event log partition(s) dropped whole)"
                ], dog.retention_blocked
            plan = await dog.plan_retention()
        except SchemaMissing as exc:
            raise click.ClickException(str(exc)) from None
    lines = [f"would delete {plan.runs} finished run(s) older than {age}"]
    lines += [
        f"  partition {p.name} (runs created {p.from_at.isoformat()} to {p.to_at.isoformat()}):"
        f" dropped whole with its {runs} run(s)"
        for p, runs in plan.partitions
    ]
    lines.append(f"  {plan.per_run} run(s) deleted one by one (their partition holds a run not expired yet)")
    return lines, None


@click.command()
@click.option(
    "--retention",
    "retention_text",
    default=None,
    metavar="DURATION",
    help=f"Delete finished runs that completed longer ago than this (30d, 720h, 90m; off = none). "
    f"Default: {run_retention.RETENTION_VAR}, else 30d.",
)
@click.option(
    "--batch",
    default=run_retention.DEFAULT_RETENTION_BATCH_SIZE,
    show_default=True,
    type=click.IntRange(min=1),
    help="Runs deleted per transaction.",
)
@click.option(
    "--wait",
    "wait_s",
    default=partitions.DEFAULT_DETACH_WAIT_S,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds a partition's detach or drop may wait for sessions that have the event log open; "
    "past it, it is cancelled (finished next time) and the command exits 11 naming them.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Only say what would go: the event log partitions dropped whole, the runs deleted one by one.",
)
def gc(retention_text: str | None, batch: int, wait_s: float, dry_run: bool) -> None:
    """Delete finished runs older than the retention, with their events, sheet rows, node
    observations and run mappings (on the configured database)."""
    try:
        if retention_text is None:
            retention = run_retention.parse_retention(os.environ.get(run_retention.RETENTION_VAR))
        else:
            retention = run_retention.parse_retention(retention_text, source="--retention")
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if retention is None:
        click.echo("retention is off: no run deleted")
        return
    with database(announce=False) as url:
        lines, blocked = asyncio.run(
            _collect(url, retention=retention, batch=batch, dry_run=dry_run, wait_s=wait_s)
        )
    for line in lines:
        click.echo(shown(line, markup=False))
    if blocked is not None:
        raise CliError(str(blocked), EXIT_BLOCKED)
