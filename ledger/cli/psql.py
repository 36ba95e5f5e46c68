"""`ledger psql`: psql on the ledger's database, embedded or configured.

A fresh machine has no psql of its own; the embedded wheel ships one that works against any server.
For the embedded Postgres the server is started (or reused) for as long as psql runs.
"""

from __future__ import annotations

import os
import subprocess

import click

from ledger.cli.database import database
from ledger.embedded import client_bin_dir

__all__ = [
    "psql",
]


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("psql_args", nargs=-1, type=click.UNPROCESSED)
def psql(psql_args: tuple[str, ...]) -> None:
    """Open psql on the ledger's database; extra arguments go to psql (e.g. -c "SELECT ...")."""
    # The ledger's schema first, so `SELECT * FROM run_overview` works unqualified; a PGOPTIONS the
    # user set wins.
    env = {"PGOPTIONS": "-c search_path=ledger,public", **os.environ}
    with database(announce=False) as url:
        proc = subprocess.run(
            [str(client_bin_dir() / "psql"), "-v", "ON_ERROR_STOP=1", url, *psql_args], env=env, check=False
        )
    if proc.returncode != 0:
        raise SystemExit(proc.returncode)
