"""The integration tests' own database, apart from the one the other suites' services run on.

A service started for the acceptance suite lives for the whole session on the worker's database,
and its watchdog sweeps with the real clock. Rows an integration test dates by its manual clock
(January 2026: long past in real time) look expired or stalled to it, and a sweep landing between
a test's write and its check removed them: a failure only a loaded machine shows. Here every
integration test, and the plugin's `ledger_service` the integration tests ask for, use a database
of their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ledger import testing
from ledger.testing_service import Service, serve_in_process


@pytest.fixture(scope="session")
def database_url(pg_admin_url: str) -> Iterator[str]:
    with testing.worker_database(pg_admin_url, "integration") as url:
        yield url


@pytest.fixture(scope="session")
def ledger_service(
    database_url: str, ledger_service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    """The plugin's service, on this suite's database (a session fixture is made once, so the
    plugin's own would stay on the database of whichever suite asked for it first)."""
    service = serve_in_process(database_url, tmp_path_factory.mktemp("ledger-service"), **ledger_service_env)
    try:
        yield service
    finally:
        service.stop()
