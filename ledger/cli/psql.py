"""`ledger psql`: psql on the ledger's database, embedded or configured.

A fresh machine has no psql of its own; the embedded wheel ships one that works against any server.
For the embedded Postgres the server is started (or reused) for as long as psql runs.
"""

from __future__ import annotations

import os
import subprocess

import click

from ledger.config import load_settings
from ledger.db import resolve_url
from ledger.embedded import client_bin_dir


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("psql_args", nargs=-1, type=click.UNPROCESSED)
def psql(psql_args: tuple[str, ...]) -> None:
    """Open psql on the ledger's database; extra arguments go to psql (e.g. -c "SELECT ...")."""
    url, server = resolve_url(load_settings())
    # The ledger's schema first, so `SELECT * FROM run_overview` works unqualified; a PGOPTIONS the
    # user set wins.
    env = {"PGOPTIONS": "-c search_path=ledger,public", **os.environ}
    try:
        proc = subprocess.run(
            [str(client_bin_dir() / "psql"), "-v", "ON_ERROR_STOP=1", url, *psql_args], env=env, check=False
        )
    finally:
        if server is not None:
            server.stop()
    if proc.returncode != 0:
        raise SystemExit(proc.returncode)
