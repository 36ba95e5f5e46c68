"""Alembic, driven from Python: `ledger db upgrade|downgrade|current` and the service's start-up."""

from __future__ import annotations

import io
from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from alembic import command
from ledger.config import sqlalchemy_url

ROOT = Path(__file__).resolve().parent.parent
VERSION_TABLE = "ledger_alembic_version"


def alembic_config(url: str) -> Config:
    cfg = Config(str(ROOT / "alembic.ini"), stdout=io.StringIO())
    cfg.set_main_option("script_location", str(ROOT / "alembic"))
    # env.py reads the URL from here when it is given, else from the ledger's configuration.
    cfg.attributes["ledger_url"] = url
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


def current(url: str) -> str | None:
    """The database's revision, or None when it has never been migrated."""
    engine = create_engine(sqlalchemy_url(url))
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            return ctx.get_current_revision()
    finally:
        engine.dispose()


def head() -> str:
    head = ScriptDirectory.from_config(alembic_config("")).get_current_head()
    assert head is not None
    return head
