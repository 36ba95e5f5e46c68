"""`ledger serve`: migrate, then serve the HTTP API with the listener and the watchdog.

With `--workers N` (N > 1), N processes serve one socket (`serve_workers`), each building its app with
`_worker_app` from what `serve` put in the environment (the resolved database URL, the tokens), so
each has its own pool, listener and watchdog, as N replicas would.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

import click

from ledger import auth, migrate
from ledger.cli.database import database
from ledger.cli.exits import EXIT_ADDRESS, EXIT_BLOCKED, EXIT_CONFIG, CliError
from ledger.config import DATABASE_URL_VAR, load_settings
from ledger.errors import ConfigError, HeldBySession
from ledger.runlog import conversion, partitions
from ledger.service.settings import DEFAULT_HOST, DEFAULT_PORT

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = [
    "serve",
]

_WORKER_APP = "ledger.cli.serve:_worker_app"


@click.command()
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to listen on.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--workers",
    default=1,
    show_default=True,
    envvar="LEDGER_WORKERS",
    type=click.IntRange(1, 256),
    help="Processes serving the port, each with its own pool and listener (env LEDGER_WORKERS).",
)
def serve(host: str, port: int, workers: int) -> None:
    """Serve the ledger over HTTP/JSON (schema at /openapi.json); on the embedded Postgres by default."""
    from ledger.service.address import bind_problem, bind_socket
    from ledger.service.settings import load_service_settings

    settings = load_settings()
    service_settings = load_service_settings(host=host, port=port)
    # The address first: a port in use is one line before anything starts (or is logged as ready).
    try:
        sock = bind_socket(service_settings.host, service_settings.port)
    except OSError as exc:
        raise CliError(
            bind_problem(exc, service_settings.host, service_settings.port), EXIT_ADDRESS
        ) from None
    # The web stack is imported after the bind: it takes seconds, and other commands start fast.
    from ledger.service.app import create_app
    from ledger.service.logs import configure_json_logging
    from ledger.service.server import build_server, run_until_stopped, serve_workers

    try:
        with database(settings) as url:
            tokens = auth.configured_tokens()
            if not tokens:
                stored = auth.ensure_token_file(settings.data_dir)
                verb = "generated and stored" if stored.created else "using the stored"
                click.echo(f"API token: {verb} token in {stored.path} (mode 0600)", err=True)
                tokens = [stored.token]
            keys = auth.token_keys(settings.data_dir)
            if keys.source != auth.TOKEN_SECRET_VAR:
                # Fine for one replica; replicas verify each other's tokens only with a shared secret.
                verb = "generated and stored" if keys.created else "using the stored"
                click.echo(
                    f"token secret: {verb} key in {keys.source} (set {auth.TOKEN_SECRET_VAR} for replicas)",
                    err=True,
                )
            try:
                migrate.upgrade(url)
            except HeldBySession as exc:
                raise CliError(str(exc), EXIT_BLOCKED) from None
            try:
                partitions.apply_period_setting(url, os.environ.get(partitions.PERIOD_VAR))
            except ConfigError as exc:
                raise CliError(str(exc), EXIT_CONFIG) from None
            if conversion.pending(url):
                # Appends go on; reads of a run's events answer 503 until the copy is done (a page
                # without the rows not copied yet would be wrong).
                click.echo(
                    "the event log is not converted to partitions yet: appends are taken, reads of"
                    " events answer 503 until `ledger db convert` is done",
                    err=True,
                )
            configure_json_logging()
            if workers > 1:
                # What each worker process reads back in `_worker_app`.
                os.environ[DATABASE_URL_VAR] = url
                os.environ[auth.API_TOKENS_VAR] = ",".join(tokens)
                _say_where(sock, signed_in_by_file=not auth.configured_tokens())
                serve_workers(_WORKER_APP, service_settings, workers, sock=sock)
                return
            app = create_app(service_settings, url, tokens, keys.keyring, listen_url=settings.listen_url)
            _say_where(sock, signed_in_by_file=not auth.configured_tokens())
            run_until_stopped(build_server(app, service_settings), sockets=[sock])
    finally:
        sock.close()


def _say_where(sock: socket.socket, *, signed_in_by_file: bool) -> None:
    """Where the service listens, its dashboard, and how to sign in: the three things a person
    starting it needs next (on stderr, beside the logs)."""
    host, port = sock.getsockname()[:2]
    # A wildcard address is not one a browser can open: this machine's loopback is.
    shown = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    base = f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"
    click.echo(f"Run Ledger listens on {base}", err=True)
    click.echo(f"dashboard: {base}/ui/", err=True)
    source = "`ledger token show` prints it" if signed_in_by_file else f"the first of {auth.API_TOKENS_VAR}"
    click.echo(f"sign in there with the admin token: {source}", err=True)


def _worker_app() -> FastAPI:
    """The app of one `--workers` process, from the environment `serve` prepared."""
    from ledger.service.app import create_app
    from ledger.service.logs import configure_json_logging
    from ledger.service.settings import load_service_settings

    configure_json_logging()
    settings = load_settings()
    if settings.database_url is None:
        raise click.ClickException(f"{DATABASE_URL_VAR} is not set: worker_app runs under `ledger serve`")
    keys = auth.token_keys(settings.data_dir)
    return create_app(
        load_service_settings(),
        settings.database_url,
        auth.configured_tokens(),
        keys.keyring,
        listen_url=settings.listen_url,
    )
