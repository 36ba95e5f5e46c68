"""Shared fixtures. The Postgres ones (`pg_admin_url`, `database_url`, `clean_database_url`) come
from the `ledger.testing` plugin, which its `ledger` entry point loads."""

from __future__ import annotations

import atexit
import os
import random
import shutil
import tempfile
from collections.abc import AsyncIterator

import psycopg_pool.base
import pytest

import ledger.testing
from ledger.db import Database
from ledger.testing import BACKEND_VAR, delete_all_rows

# tests/unit/test_testing_backend.py runs pytest sessions of its own to see the plugin at work.
# tests.ci_skips: under CI, a skip that names no missing program fails.
pytest_plugins = ["pytester", "tests.ci_skips"]

# Tests import it from here.
__all__ = ["delete_all_rows"]

# psycopg_pool draws each new connection's lifetime jitter from the global `random`. The session's
# services open connections on threads of their own at any moment, and Hypothesis, which seeds that
# global generator for each example and compares its state around every draw, reads such a change
# as a strategy using `random`: the example fails as flaky. The pools get a generator of their own.
psycopg_pool.base.random = random.Random().random  # type: ignore[attr-defined]

# The suite never reaches the ledger's real database or the user's data. Code that names no
# database of its own reads its settings from the environment: here that is an empty data
# directory of this process's, never LEDGER_DATABASE_URL or the user's data dir. A test that relied
# on what some earlier command left there (a database the demo had migrated) then fails the same
# way on every machine, where it passed only on machines that had run that command.
for _name in ("LEDGER_DATABASE_URL", "LEDGER_LISTEN_URL"):
    os.environ.pop(_name, None)
SESSION_DATA_DIR = tempfile.mkdtemp(prefix="ledger-test-data-")
os.environ["LEDGER_DATA_DIR"] = SESSION_DATA_DIR
atexit.register(shutil.rmtree, SESSION_DATA_DIR, ignore_errors=True)


def pytest_configure(config: pytest.Config) -> None:
    # The plugin normally arrives through its `ledger` entry point. Without plugin autoload (or on
    # an install older than the entry point) register it here, under the entry point's name, so it
    # is never registered twice (pluggy refuses one module under two names).
    if not config.pluginmanager.is_registered(ledger.testing):
        config.pluginmanager.register(ledger.testing, "ledger")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A test of the docker backend itself is deselected on any other: it does not apply there (a
    # skip would fail under CI); CI runs it with the docker backend (.ci/docker-tests).
    if os.environ.get(BACKEND_VAR, "").strip().lower() == "docker":
        return
    deselected = [item for item in items if item.get_closest_marker("docker_backend")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker("docker_backend")]


@pytest.fixture
async def db(clean_database_url: str) -> AsyncIterator[Database]:
    """An open `Database` (async pool) on an empty, migrated database."""
    async with Database(clean_database_url, min_size=1, max_size=20) as database:
        yield database
