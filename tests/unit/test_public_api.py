"""The public faces, pinned: what `ledger`, `ledger.client` and `ledger.testing` export.

A name added or removed here is a change of the public API, made on purpose. `import ledger` must
stay cheap: the worker side imports `ledger.validate` (and with it `ledger`) and must not pay for
the database or web stack.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import ledger
import ledger.client
import ledger.testing

LEDGER_EXPORTS = [
    "AsyncLedgerClient",
    "ConfigError",
    "Conflict",
    "CursorExpired",
    "Database",
    "DatabaseUnavailable",
    "InvalidInput",
    "LedgerClient",
    "LedgerError",
    "LedgerFailure",
    "LedgerUnavailable",
    "Listener",
    "NotFound",
    "PayloadTooLarge",
    "RunLog",
    "RunTerminal",
    "StaleAttempt",
    "Unauthorized",
    "WarmPool",
    "Watchdog",
    "__version__",
    "apply_status_upload",
    "list_observations",
    "record_observations",
    "record_sheet_rows",
    "sheet_outcomes",
]

CLIENT_EXPORTS = [
    "DEFAULT_URL",
    "URL_VAR",
    "AsyncLedgerClient",
    "LedgerClient",
    "RetryPolicy",
    "StatusDelivery",
    "segment",
    "service_url",
]

TESTING_EXPORTS = [
    "BACKEND_VAR",
    "DOCKER_IMAGE",
    "FRESH_SERVER_VAR",
    "IMAGE_VAR",
    "OWN_POSTGRES_MARKER",
    "URL_VAR",
    "Backend",
    "BackendUnavailable",
    "Container",
    "ContainerFactory",
    "InProcessService",
    "Server",
    "Service",
    "check_url",
    "choose_backend",
    "clone_database",
    "create_empty_database",
    "delete_all_rows",
    "docker_server",
    "drop_database",
    "drop_orphaned_databases",
    "embedded_server",
    "ensure_template",
    "free_port",
    "ping_docker",
    "postgres_container",
    "psycopg_url",
    "redact",
    "reused_server_dir",
    "serve_in_process",
    "start_server",
    "stop_server",
    "with_database",
    "worker_database",
]

TESTING_FIXTURES = {
    "pg_admin_url",
    "database_url",
    "clean_database_url",
    "ledger_service_env",
    "ledger_service",
    "ledger_client",
}


def test_ledger_exports_exactly_its_public_names() -> None:
    assert ledger.__all__ == LEDGER_EXPORTS
    for name in LEDGER_EXPORTS:
        assert getattr(ledger, name) is not None
    # Once every lazy name is loaded, nothing public is there that __all__ does not list.
    public = {
        name
        for name, value in vars(ledger).items()
        if not name.startswith("_") and not inspect.ismodule(value) and name != "annotations"
    }
    assert public == set(LEDGER_EXPORTS) - {"__version__"}
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = ledger.Nope  # type: ignore[attr-defined]


def test_the_errors_are_ledger_errors_and_the_classes_live_in_their_modules() -> None:
    assert ledger.RunLog.__module__ == "ledger.runlog.store"
    assert ledger.WarmPool.__module__ == "ledger.pool.store"
    assert ledger.Database.__module__ == "ledger.db"
    errors = [ledger.NotFound, ledger.Conflict, ledger.StaleAttempt, ledger.RunTerminal, ledger.Unauthorized]
    errors += [ledger.InvalidInput, ledger.CursorExpired, ledger.PayloadTooLarge]
    assert all(issubclass(error, ledger.LedgerError) for error in errors)
    # An outage is not a refusal: `except LedgerError` must not swallow it.
    assert issubclass(ledger.DatabaseUnavailable, ledger.LedgerUnavailable)
    assert not issubclass(ledger.LedgerUnavailable, ledger.LedgerError)
    # One root above both families, for a caller that handles any failure alike.
    assert issubclass(ledger.LedgerError, ledger.LedgerFailure)
    assert issubclass(ledger.LedgerUnavailable, ledger.LedgerFailure)


def test_ledger_client_exports() -> None:
    assert ledger.client.__all__ == CLIENT_EXPORTS
    assert all(hasattr(ledger.client, name) for name in CLIENT_EXPORTS)
    # One public surface over private modules: every other name of the package starts with `_`
    # (its modules included), and the public names are the package's, wherever they are written.
    # (Names that are no identifiers are pytest's, when it rewrites the package's asserts.)
    names = {name: value for name, value in vars(ledger.client).items() if name.isidentifier()}
    public = {name for name in names if not name.startswith("_") and name != "annotations"}
    assert public == set(CLIENT_EXPORTS)
    modules = {name for name, value in names.items() if inspect.ismodule(value)}
    assert modules and all(name.startswith("_") for name in modules)
    for name in CLIENT_EXPORTS:
        value = getattr(ledger.client, name)
        assert getattr(value, "__module__", "ledger.client") == "ledger.client", name
    assert ledger.LedgerClient is ledger.client.LedgerClient


def test_both_clients_have_every_operation() -> None:
    def api(cls: type) -> set[str]:
        return {name for name in dir(cls) if not name.startswith("_")}

    assert api(ledger.LedgerClient) - {"close"} == api(ledger.AsyncLedgerClient) - {"aclose"}
    assert {"open_run", "list_events", "tail", "iter_events", "claim", "upload_status", "from_env"} <= api(
        ledger.LedgerClient
    )


def test_ledger_testing_exports_and_fixtures() -> None:
    assert ledger.testing.__all__ == TESTING_EXPORTS
    assert all(hasattr(ledger.testing, name) for name in ledger.testing.__all__)
    # A fixture is whatever pytest's decorator left: its marker attribute (named so since 8.4).
    markers = ("_fixture_function_marker", "_pytestfixturefunction")
    fixtures = {
        name
        for name, value in vars(ledger.testing).items()
        if any(hasattr(value, marker) for marker in markers)
    }
    assert fixtures == TESTING_FIXTURES


def test_import_ledger_loads_neither_the_database_nor_the_web_stack() -> None:
    heavy = ("psycopg", "psycopg_pool", "sqlalchemy", "alembic", "fastapi", "starlette", "httpx", "pydantic")
    probe = (
        "import sys, ledger, ledger.validate, ledger.errors; "
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(heavy)!r}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
