"""`ledger cancel RUN`: end a live run `cancelled`, with the reason every face then shows.

It needs an admin token or the run's own run token (`POST /v1/runs/{run_id}/cancel`). A run that
already ended otherwise is left as it is: the line says how it ended, and the exit code is 1.
"""

from __future__ import annotations

import click

from ledger.cli.client import command_client, deadline_option
from ledger.cli.exits import CliError
from ledger.errors import RunTerminal

__all__ = [
    "cancel",
]


@click.command("cancel")
@click.argument("run_id")
@click.option(
    "--reason", metavar="TEXT", help="Why: the run's terminal error (default: cancelled by an operator)."
)
@deadline_option()
def cancel(run_id: str, reason: str | None, deadline_s: float) -> None:
    """End a live run as cancelled (needs an admin token or the run's own token)."""
    with command_client(deadline_s, needs="an admin token or the run's own run token") as client:
        try:
            ended = client.cancel_run(run_id, reason)
        except RunTerminal as exc:
            status = exc.terminal.get("status")
            error = exc.terminal.get("error")
            why = f": {error}" if error else ""
            raise CliError(f"run {run_id!r} already ended {status}{why}; nothing was changed") from None
    click.echo(f"cancelled run {run_id}: {ended['error']}")
