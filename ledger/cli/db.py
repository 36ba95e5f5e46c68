"""`ledger db upgrade|downgrade|current|convert|partitions`: the configured database's schema.

`upgrade`, `downgrade` and `current` are Alembic; `convert` copies a filled event log into its
partitions after the upgrade to 0011 (`ledger.runlog.conversion`); `partitions` makes them ahead
and lists them (`ledger.runlog.partitions`).
"""

from __future__ import annotations

import asyncio

import click

from ledger import migrate
from ledger.cli.database import database as _database
from ledger.cli.exits import EXIT_BLOCKED, CliError
from ledger.clock import DatabaseClock
from ledger.db import Database
from ledger.errors import ConfigError, HeldBySession
from ledger.runlog import conversion, partitions

__all__ = [
    "db",
]


@click.group()
def db() -> None:
    """Schema migrations (Alembic)."""


@db.command("upgrade")
@click.argument("revision", default="head")
def _upgrade(revision: str) -> None:
    """Migrate the schema up to REVISION (default: head)."""
    with _database() as url:
        before = migrate.current(url)
        try:
            migrate.upgrade(url, revision)
        except HeldBySession as exc:
            raise CliError(str(exc), EXIT_BLOCKED) from None
        after = migrate.current(url)
    if before == after:
        click.echo(f"already at {after}; nothing to do")
    else:
        click.echo(f"upgraded {before or 'empty database'} -> {after}")


@db.command("downgrade")
@click.argument("revision", default="base")
def _downgrade(revision: str) -> None:
    """Migrate the schema down to REVISION (default: base, which removes everything)."""
    with _database() as url:
        before = migrate.current(url)
        migrate.downgrade(url, revision)
        after = migrate.current(url)
    click.echo(f"downgraded {before or 'base'} -> {after or 'base'}")


@db.command("current")
def _current() -> None:
    """Print the database's schema revision and the newest one this code knows."""
    with _database() as url:
        rev = migrate.current(url)
    head = migrate.head()
    state = "up to date" if rev == head else "behind: run `ledger db upgrade`"
    click.echo(f"{rev or 'none (empty database)'} (head {head}, {state})")


@db.command("convert")
@click.option(
    "--batch",
    default=conversion.DEFAULT_BATCH,
    show_default=True,
    type=click.IntRange(min=1),
    help="Events copied per transaction.",
)
def _convert(batch: int) -> None:
    """Copy a filled event log into its partitions (after `ledger db upgrade` to 0011), batch by
    batch beside live appends; `ledger serve` starts once it is done."""

    def report(progress: conversion.Progress) -> None:
        if progress.batches % 100 == 0:
            click.echo(f"copied {progress.copied} event(s) in {progress.batches} batch(es)", err=True)

    with _database() as url:
        if migrate.current(url) is None:
            raise click.ClickException("the database has no ledger schema yet; run `ledger db upgrade` first")
        if not conversion.pending(url):
            click.echo("the event log is partitioned already; nothing to do")
            return
        try:
            progress = conversion.convert(url, batch=batch, report=report)
        except HeldBySession as exc:
            raise CliError(str(exc), EXIT_BLOCKED) from None
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(
        f"converted: {progress.copied} event(s) copied in {progress.batches} batch(es)"
        f" (longest {progress.longest_batch_s * 1000:.0f} ms); the old table is dropped"
    )


@db.command(name="partitions")
@click.option(
    "--interval",
    type=click.Choice(partitions.PERIODS),
    default=None,
    help="Partitions made from now on cover a UTC day or month (existing ones keep their range).",
)
@click.option(
    "--ahead",
    default=partitions.DEFAULT_AHEAD,
    show_default=True,
    type=click.IntRange(0, 366),
    help="Partitions made ahead of the current one.",
)
def _partitions_command(interval: str | None, ahead: int) -> None:
    """Make the event log's partitions ahead of time (the watchdog does too) and list them."""
    with _database() as url:
        if migrate.current(url) is None:
            raise click.ClickException("the database has no ledger schema yet; run `ledger db upgrade` first")
        listed, period = asyncio.run(_partitions(url, interval, ahead))
    click.echo(f"new partitions cover one UTC {period}")
    for p in listed:
        click.echo(f"{p.name}  runs created {p.from_at.isoformat()} to {p.to_at.isoformat()}")


async def _partitions(url: str, interval: str | None, ahead: int) -> tuple[list[partitions.Partition], str]:
    async with Database(url, min_size=1, max_size=1) as database:
        if interval is not None:
            async with database.transaction() as conn:
                await partitions.set_period(conn, interval)
        async with database.connection() as conn:
            now = await DatabaseClock().now(conn)
        await partitions.ensure_ahead(database, now, ahead=ahead)
        async with database.connection() as conn:
            return await partitions.list_partitions(conn), await partitions.period(conn)
