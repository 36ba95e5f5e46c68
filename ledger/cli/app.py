"""The root `ledger` group and the error handling every command shares.

Errors a person can act on (bad configuration, unreachable database) are one line on stderr and
their exit code (`ledger.cli.exits`), never a traceback.
"""

from __future__ import annotations

import sys

import click

from ledger.cli.exits import EXIT_CONFIG, CliError
from ledger.config import Settings, load_settings
from ledger.errors import ConfigError, DatabaseUnavailable

__all__ = [
    "cli",
    "main",
]


def _settings() -> Settings | None:
    try:
        return load_settings()
    except ConfigError:
        return None


class _LedgerGroup(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        # Imported here: `ledger.cli.database` loads psycopg's connection machinery.
        from ledger.cli.database import unreachable

        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            raise CliError(str(exc), EXIT_CONFIG) from None
        except DatabaseUnavailable as exc:
            raise unreachable(exc, _settings()) from None


@click.group(cls=_LedgerGroup)
@click.version_option(package_name="run-ledger")
def cli() -> None:
    """Run Ledger: a Postgres-backed run ledger and progress reporter."""


def _register() -> None:
    from ledger.cli import client, db, gc, psql, serve, watchdog
    from ledger.cli.demo import command as demo

    cli.add_command(db.db)
    cli.add_command(serve.serve)
    for command in client.COMMANDS:
        cli.add_command(command)
    cli.add_command(watchdog.watchdog)
    cli.add_command(gc.gc)
    cli.add_command(demo.demo)
    cli.add_command(psql.psql)
    from ledger.cli import report

    cli.add_command(report.report_command)
    from ledger.cli import token

    cli.add_command(token.token)


_register()


def main() -> None:
    cli.main(prog_name="ledger", standalone_mode=True)
    sys.exit(0)
