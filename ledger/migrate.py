"""Alembic, driven from Python: `ledger db upgrade|downgrade|current` and the service's start-up.

The migrations ship inside the package (`ledger/migrations`), so a plain (non-editable) install can
migrate its database; `alembic.ini` at the repository root points at the same folder for people
who run `alembic` by hand.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine
from sqlalchemy.exc import DBAPIError

from ledger.config import sqlalchemy_url
from ledger.db import driver_errors

__all__ = [
    "VERSION_TABLE",
    "alembic_config",
    "current",
    "downgrade",
    "head",
    "upgrade",
]

_MIGRATIONS = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "ledger_alembic_version"


def alembic_config(url: str) -> Config:
    cfg = Config(stdout=io.StringIO())
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    # env.py reads the URL from here when it is given, else from the ledger's configuration.
    cfg.attributes["ledger_url"] = url
    return cfg


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """The driver's error inside SQLAlchemy's wrapper, translated as every other call's is (a
    database that cannot be reached is `DatabaseUnavailable`, ...)."""
    try:
        yield
    except DBAPIError as exc:
        if not isinstance(exc.orig, Exception):
            raise
        with driver_errors():
            # The wrapper adds nothing but its own name to the driver's message.
            raise exc.orig from None


def upgrade(url: str, revision: str = "head") -> None:
    with _translated():
        command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    with _translated():
        command.downgrade(alembic_config(url), revision)


def current(url: str) -> str | None:
    """The database's revision, or None when it has never been migrated."""
    engine = create_engine(sqlalchemy_url(url))
    try:
        with _translated(), engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            return ctx.get_current_revision()
    finally:
        engine.dispose()


def head() -> str:
    head = ScriptDirectory.from_config(alembic_config("")).get_current_head()
    assert head is not None
    return head
