"""Shared fixtures. The Postgres ones (`pg_admin_url`, `database_url`, `clean_database_url`) come
from the `ledger.testing` plugin, which its `ledger` entry point loads."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import ledger.testing
from ledger.db import Database
from ledger.testing import delete_all_rows

# tests/unit/test_testing_backend.py runs pytest sessions of its own to see the plugin at work.
pytest_plugins = ["pytester"]

# Tests import it from here.
__all__ = ["delete_all_rows"]


def pytest_configure(config: pytest.Config) -> None:
    # The plugin normally arrives through its `ledger` entry point. Without plugin autoload (or on
    # an install older than the entry point) register it here, under the entry point's name, so it
    # is never registered twice (pluggy refuses one module under two names).
    if not config.pluginmanager.is_registered(ledger.testing):
        config.pluginmanager.register(ledger.testing, "ledger")


@pytest.fixture
async def db(clean_database_url: str) -> AsyncIterator[Database]:
    """An open `Database` (async pool) on an empty, migrated database."""
    async with Database(clean_database_url, min_size=1, max_size=20) as database:
        yield database
