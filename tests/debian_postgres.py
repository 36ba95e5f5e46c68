"""A server of Debian's PostgreSQL 15 package (`/usr/lib/postgresql/15/bin`), the oldest release the
ledger is tested on, for a test of its own (marker `own_postgres`).

Some behaviour differs by release (on 15 a concurrent detach waiting in its second phase is
interrupted by neither `statement_timeout` nor `lock_timeout`): tests of it run here as well as on
the tests' embedded server, which is newer. Started with `initdb` and `pg_ctl` in a temporary
directory, on a Unix socket only; as root, run as the package's `postgres` user (Postgres refuses
to run as root). Without the package, `unavailable` skips the test (fails it under CI).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql

from ledger import migrate
from tests.prerequisites import unavailable

BIN = Path("/usr/lib/postgresql/15/bin")
PORT = 5415
START_TIMEOUT_S = 60


def _as_server_user(directory: Path) -> list[str]:
    """The command prefix that runs a server program as a user Postgres accepts."""
    if os.geteuid() != 0:
        return []
    user = pwd.getpwnam("postgres")
    for path in (directory, *directory.rglob("*")):
        os.chown(path, user.pw_uid, user.pw_gid)
    return ["runuser", "-u", "postgres", "--"]


@contextmanager
def debian_postgres_15() -> Iterator[str]:
    """A running PostgreSQL 15 with a migrated database `ledger_template`; yields the server's admin
    URL (database `postgres`)."""
    if not (BIN / "postgres").exists():
        unavailable(
            "PostgreSQL 15 tests",
            f"{BIN / 'postgres'} is not installed (Debian: apt-get install postgresql-15)",
        )
    # A directory of its own, outside pytest's (which the server's user may not enter).
    directory = Path(tempfile.mkdtemp(prefix="ledger-pg15-"))
    data = directory / "data"
    data.mkdir()
    prefix = _as_server_user(directory)
    _run([*prefix, str(BIN / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"])
    options = f"-k {data} -p {PORT} -c listen_addresses='' -c fsync=off -c max_connections=200"
    _run(
        [
            *prefix,
            str(BIN / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(directory / "log"),
            "-o",
            options,
            "-w",
            "start",
        ]
    )
    url = f"postgresql://postgres@/postgres?host={data}&port={PORT}"
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE ledger_template")
        migrate.upgrade(template_url(url))
        yield url
    finally:
        subprocess.run(
            [*prefix, str(BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            timeout=START_TIMEOUT_S,
        )
        shutil.rmtree(directory, ignore_errors=True)


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=START_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{command[-1]} failed ({done.returncode}): {done.stderr or done.stdout}")


def template_url(admin_url: str, database: str = "ledger_template") -> str:
    return admin_url.replace("/postgres?", f"/{database}?", 1)


def fresh_database(admin_url: str, name: str) -> str:
    """A new database copied from the migrated template; its URL."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE ledger_template").format(sql.Identifier(name)))
    return template_url(admin_url, name)
