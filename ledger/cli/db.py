"""`ledger db upgrade|downgrade|current`: Alembic on the configured database."""

from __future__ import annotations

import click

from ledger import migrate
from ledger.cli.database import database as _database


@click.group()
def db() -> None:
    """Schema migrations (Alembic)."""


@db.command()
@click.argument("revision", default="head")
def upgrade(revision: str) -> None:
    """Migrate the schema up to REVISION (default: head)."""
    with _database() as url:
        before = migrate.current(url)
        migrate.upgrade(url, revision)
        after = migrate.current(url)
    if before == after:
        click.echo(f"already at {after}; nothing to do")
    else:
        click.echo(f"upgraded {before or 'empty database'} -> {after}")


@db.command()
@click.argument("revision", default="base")
def downgrade(revision: str) -> None:
    """Migrate the schema down to REVISION (default: base, which removes everything)."""
    with _database() as url:
        before = migrate.current(url)
        migrate.downgrade(url, revision)
        after = migrate.current(url)
    click.echo(f"downgraded {before or 'base'} -> {after or 'base'}")


@db.command()
def current() -> None:
    """Print the database's schema revision and the newest one this code knows."""
    with _database() as url:
        rev = migrate.current(url)
    head = migrate.head()
    state = "up to date" if rev == head else "behind: run `ledger db upgrade`"
    click.echo(f"{rev or 'none (empty database)'} (head {head}, {state})")
