"""The root `ledger` group and the error handling every command shares.

Errors a person can act on (bad configuration, unreachable database) are one line on stderr and
their exit code (`ledger.cli.exits`), never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from ledger.cli.exits import EXIT_CONFIG, EXIT_INTERRUPTED, CliError, usage_line
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


# Click 8.2+ says a group's help when it is named without a command, as a usage error.
_NO_ARGS_IS_HELP: tuple[type[click.UsageError], ...] = tuple(
    t for t in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if t is not None
)


class _LedgerGroup(click.Group):
    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Click's main, with every mistake and interruption one line on stderr: click's own
        would print a usage block of four lines for a typo, and `Aborted!` for a Ctrl-C."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            answer = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _NO_ARGS_IS_HELP as exc:
            exc.show()  # a group named alone: its help is what the person asked for
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            help_command = exc.ctx.command_path if exc.ctx is not None else "ledger"
            said = usage_line(exc.format_message())
            click.echo(f"Error: {said} (`{help_command} --help` says more)", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Error: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        # A command's own `ctx.exit(code)` (and --help, --version) comes back as its code.
        sys.exit(answer if isinstance(answer, int) else 0)

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
    from ledger.cli import cancel, client, db, gc, psql, serve, watchdog
    from ledger.cli.demo import command as demo

    cli.add_command(db.db)
    cli.add_command(serve.serve)
    for command in client.COMMANDS:
        cli.add_command(command)
    cli.add_command(cancel.cancel)
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
