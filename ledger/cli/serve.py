"""`ledger serve`: migrate, then serve the HTTP API with the listener and the watchdog."""

from __future__ import annotations

import click

from ledger import auth, migrate
from ledger.config import load_settings
from ledger.db import resolve_url
from ledger.service.settings import DEFAULT_HOST, DEFAULT_PORT


@click.command()
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to listen on.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(0, 65535))
def serve(host: str, port: int) -> None:
    """Serve the ledger over HTTP/JSON (schema at /openapi.json); on the embedded Postgres by default."""
    # The web stack is imported here, not at module level, so other `ledger` commands start fast.
    from ledger.service.app import create_app
    from ledger.service.logs import configure_json_logging
    from ledger.service.server import build_server, run_until_stopped
    from ledger.service.settings import load_service_settings

    settings = load_settings()
    service_settings = load_service_settings(host=host, port=port)
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
            f"token secret: {verb} key in {keys.source} (set {auth.TOKEN_SECRET_VAR} for replicas)", err=True
        )
    url, server = resolve_url(settings)
    try:
        if server is not None:
            click.echo(f"embedded Postgres: data in {server.pgdata}", err=True)
        migrate.upgrade(url)
        configure_json_logging()
        app = create_app(service_settings, url, tokens, keys.keyring)
        run_until_stopped(build_server(app, service_settings))
    finally:
        if server is not None:
            server.stop()
