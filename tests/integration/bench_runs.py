"""What the bench smoke tests share: a database of the test's own, and one quick `--json` run of a
bench on it (the bench leaves runs, pool entries and whole peer databases behind that other tests
on the worker's database would see)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from ledger.testing import clone_database, drop_database, ensure_template

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def database_of_its_own(pg_admin_url: str, prefix: str) -> Iterator[str]:
    """A migrated database named `prefix` and this process's id, dropped on exit."""
    name = f"{prefix}_{os.getpid()}"
    yield clone_database(pg_admin_url, ensure_template(pg_admin_url), name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        drop_database(conn, name)


def quick_json(url: str, command: Sequence[str], timeout_s: float) -> dict[str, Any]:
    """`python <command> --quick --json` against `url`: its document, checked to be the quick
    profile measured on that database."""
    done = subprocess.run(
        [sys.executable, *command, "--quick", "--json"],
        cwd=ROOT,
        env={**os.environ, "LEDGER_DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document: dict[str, Any] = json.loads(done.stdout)
    assert document["profile"] == "quick"
    assert document["where"] == "LEDGER_DATABASE_URL"
    return document
