"""`ledger token create`: mint a read or run token through the service (`POST /v1/tokens`).

Minting needs an admin token (`LEDGER_TOKEN`, else the first of `LEDGER_API_TOKENS`, else the
token file), so the command asks the service rather than signing locally: the token is signed with
the key the service (and every replica sharing `LEDGER_TOKEN_SECRET`) verifies with.
"""

from __future__ import annotations

import json

import click

from ledger import auth, tokens
from ledger.cli.client import command_client, deadline_option
from ledger.config import load_settings
from ledger.errors import ConfigError
from ledger.validate import INT32_MAX

__all__ = [
    "admin_token",
    "token",
]


@click.group()
def token() -> None:
    """Scoped tokens: `read` for dashboards and readers, `run` for the worker of one run."""


def _ttl(ctx: click.Context, param: click.Parameter, value: str) -> int:
    try:
        seconds = tokens.ttl_seconds(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if not 1 <= seconds <= tokens.MAX_TTL_S:
        raise click.BadParameter(f"must be between 1 second and {tokens.MAX_TTL_S // 86400} days")
    return seconds


@token.command("create")
@click.option("--scope", type=click.Choice(["read", "run"]), required=True, help="What the token may do.")
@click.option("--run-id", help="The run a run token is for.")
@click.option(
    "--max-attempt",
    type=click.IntRange(0, INT32_MAX),
    help="The highest producer attempt a run token may upload as.",
)
@click.option("--ttl", default="24h", show_default=True, callback=_ttl, help="Lifetime: 90s, 30m, 24h or 7d.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole answer (expiry, key id) as JSON.")
@deadline_option()
def _create(
    scope: str, run_id: str | None, max_attempt: int | None, ttl: int, as_json: bool, deadline_s: float
) -> None:
    """Mint a token and print it (needs an admin token)."""
    if scope == "run" and (run_id is None or max_attempt is None):
        raise click.UsageError("--scope run needs --run-id and --max-attempt")
    if scope == "read" and (run_id is not None or max_attempt is not None):
        raise click.UsageError("--run-id and --max-attempt are for --scope run only")
    with command_client(deadline_s, needs="an admin token") as client:
        minted = client.mint_token(scope, run_id=run_id, max_attempt=max_attempt, ttl_s=ttl)
    click.echo(json.dumps(minted) if as_json else minted["token"])


def admin_token() -> str:
    """The admin token the service of this data dir accepts: the first of `LEDGER_API_TOKENS`, else
    the token `ledger serve` stored in the data dir (`ConfigError` when there is neither)."""
    configured = auth.configured_tokens()
    if configured:
        return configured[0]
    path = auth.token_file(load_settings().data_dir)
    stored = auth.read_token_file(path)
    if stored is None:
        raise ConfigError(
            f"no admin token yet: `ledger serve` stores one in {path} on its first start "
            f"(or set {auth.API_TOKENS_VAR})"
        )
    return stored


@token.command("show")
def _show() -> None:
    """Print the admin token of this data dir (what the dashboard's sign-in asks for)."""
    click.echo(admin_token())
