"""Fault tests: real `ledger serve` processes on a Postgres of each test's own, which the test
restarts, or whose backends it terminates or holds locks in. Each test ends with the invariants
check of every table (`tests.faults.invariants`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.acceptance.conftest import Server, start_server, stop_server
from tests.own_postgres import OwnPostgres, own_postgres


@pytest.fixture
def own_pg() -> Iterator[OwnPostgres]:
    with own_postgres() as server:
        yield server


@contextmanager
def serving(database_url: str, work_dir: Path, **env: str) -> Iterator[Server]:
    """A `ledger serve` for the block; afterwards its log must show no unhandled error (a 500)."""
    running = start_server(database_url, work_dir, **env)
    try:
        yield running
    finally:
        stop_server(running)
    assert "unhandled error" not in running.log(), running.log()[-5000:]
