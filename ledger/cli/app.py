"""The root `ledger` group and the error handling every command shares.

Errors a person can act on (bad configuration, unreachable database) are one line on stderr and
their exit code (`ledger.cli.exits`), never a traceback.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Sequence
from typing import Any, Final

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


# Where each command lives. A command's module is imported only when the command runs: the web
# stack, Alembic and SQLAlchemy cost seconds to import, and a typo, a malformed LEDGER_URL or a
# port in use is said before any of it loads.
_COMMAND_HOMES: Final[dict[str, str]] = {
    "cancel": "ledger.cli.cancel:cancel",
    "db": "ledger.cli.db:db",
    "demo": "ledger.cli.demo.command:demo",
    "events": "ledger.cli.client:COMMANDS#events",
    "gc": "ledger.cli.gc:gc",
    "pool": "ledger.cli.client:COMMANDS#pool",
    "psql": "ledger.cli.psql:psql",
    "report": "ledger.cli.report:report_command",
    "run": "ledger.cli.client:COMMANDS#run",
    "runs": "ledger.cli.client:COMMANDS#runs",
    "serve": "ledger.cli.serve:serve",
    "token": "ledger.cli.token:token",
    "watchdog": "ledger.cli.watchdog:watchdog",
}


class _LedgerGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*_COMMAND_HOMES, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _COMMAND_HOMES:
            self.add_command(_command(_COMMAND_HOMES[cmd_name]), cmd_name)
        return self.commands.get(cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else None
        if name is not None and not name.startswith("-") and self.get_command(ctx, name) is None:
            # Click suggests only among the commands it has loaded; here none are until one runs.
            close = difflib.get_close_matches(name, self.list_commands(ctx), n=1)
            ctx.fail(f"No such command {name!r}." + (f" Did you mean {close[0]!r}?" if close else ""))
        return super().resolve_command(ctx, args)

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
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            raise CliError(str(exc), EXIT_CONFIG) from None
        except DatabaseUnavailable as exc:
            # Imported here: `ledger.cli.database` loads psycopg's connection machinery.
            from ledger.cli.database import unreachable

            raise unreachable(exc, _settings()) from None


@click.group(cls=_LedgerGroup)
@click.version_option(package_name="run-ledger")
def cli() -> None:
    """Run Ledger: a Postgres-backed run ledger and progress reporter."""


def _command(home: str) -> click.Command:
    """The command at `home` (`module:attribute`, or `module:COMMANDS#name` for a module's tuple)."""
    module_name, _, attribute = home.partition(":")
    attribute, _, name = attribute.partition("#")
    found = getattr(importlib.import_module(module_name), attribute)
    if name:
        found = next(command for command in found if command.name == name)
    assert isinstance(found, click.Command)
    return found


def main() -> None:
    cli.main(prog_name="ledger", standalone_mode=True)
