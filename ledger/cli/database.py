"""The database a command works on: resolved, reached once, released.

A configured `LEDGER_DATABASE_URL` is tried with one plain connection, bounded by the connect
timeout, before anything else: a refused or unreachable server is then one line naming the
variable within seconds, instead of a connection pool retrying in the background until its own
timeout (15 s) with a warning per attempt.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

from ledger.cli.exits import EXIT_DATABASE, CliError, first_line
from ledger.config import DATA_DIR_VAR, DATABASE_URL_VAR, Settings, load_settings
from ledger.db import check_reachable, resolve_url
from ledger.errors import DatabaseUnavailable

__all__ = [
    "database",
    "probe",
    "unreachable",
]


def unreachable(exc: BaseException, settings: Settings | None = None) -> CliError:
    """The one-line error for a database that cannot be reached, naming where it was looked for."""
    embedded = settings is not None and settings.embedded
    where = f"the embedded Postgres ({DATA_DIR_VAR})" if embedded else f"the database at {DATABASE_URL_VAR}"
    return CliError(f"cannot reach {where}: {first_line(exc)}", EXIT_DATABASE)


def probe(url: str) -> None:
    """One connection to `url`, or `CliError` (exit 8) naming `LEDGER_DATABASE_URL`."""
    try:
        check_reachable(url)
    except DatabaseUnavailable as exc:
        raise unreachable(exc) from None


@contextmanager
def database(settings: Settings | None = None, *, announce: bool = True) -> Iterator[str]:
    """The URL of the configured database (reached once), or of the embedded one (started, and
    stopped when the block ends)."""
    settings = settings or load_settings()
    url, server = resolve_url(settings)
    try:
        if server is None:
            probe(url)
        elif announce:
            click.echo(f"embedded Postgres: data in {server.pgdata}", err=True)
        yield url
    finally:
        if server is not None:
            server.stop()
