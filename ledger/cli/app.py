"""The root `ledger` group and the error handling every command shares.

Errors a person can act on (bad configuration, unreachable database) are one line on stderr and a
non-zero exit, never a traceback.
"""

from __future__ import annotations

import sys

import click
import psycopg
import sqlalchemy.exc

from ledger.errors import ConfigError, DatabaseUnavailable


class LedgerGroup(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (ConfigError, DatabaseUnavailable) as exc:
            raise click.ClickException(str(exc)) from None
        except (psycopg.OperationalError, sqlalchemy.exc.OperationalError) as exc:
            first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise click.ClickException(f"cannot reach Postgres: {first}") from None


@click.group(cls=LedgerGroup)
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
