"""The service's environment knobs (ledger.service.settings)."""

from __future__ import annotations

import pytest

from ledger.config import ConfigError
from ledger.service.settings import ServiceSettings, load_service_settings


def test_defaults_match_the_spec() -> None:
    settings = load_service_settings({})
    assert (settings.host, settings.port) == ("127.0.0.1", 8787)
    assert settings.max_body_bytes == 1024 * 1024
    assert settings.sse_keepalive_s == 15.0
    assert settings == ServiceSettings()


def test_environment_and_options_override_the_defaults() -> None:
    env = {
        "LEDGER_MAX_BODY_BYTES": "2048",
        "LEDGER_SSE_KEEPALIVE_S": "0.5",
        "LEDGER_PUBLIC_DOCS": "on",
        "LEDGER_MAX_EVENTS_PER_RUN": "0",
    }
    settings = load_service_settings(env, host="0.0.0.0", port=9000)
    assert (settings.host, settings.port) == ("0.0.0.0", 9000)
    assert settings.max_body_bytes == 2048
    assert settings.sse_keepalive_s == 0.5
    assert settings.public_docs is True
    assert settings.max_events_per_run == 0


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("LEDGER_MAX_BODY_BYTES", "lots"),
        ("LEDGER_MAX_BODY_BYTES", "0"),
        ("LEDGER_SSE_KEEPALIVE_S", "-1"),
        ("LEDGER_SSE_KEEPALIVE_S", "nan"),
        ("LEDGER_PUBLIC_DOCS", "maybe"),
        ("LEDGER_DB_POOL_SIZE", "1"),
        ("LEDGER_DB_LOCK_TIMEOUT_S", "0"),
        ("LEDGER_DB_STATEMENT_TIMEOUT_S", "never"),
        ("LEDGER_MAX_HEADER_BYTES", "100"),
        ("LEDGER_MAX_HEADERS", "2"),
        ("LEDGER_KEEPALIVE_TIMEOUT_S", "0"),
        ("LEDGER_REQUEST_TIMEOUT_S", "-5"),
        ("LEDGER_MAX_CONNECTIONS", "0"),
    ],
)
def test_a_bad_value_is_a_config_error_naming_the_variable(var: str, value: str) -> None:
    with pytest.raises(ConfigError, match=var):
        load_service_settings({var: value})


def test_bounded_waits_and_connection_limits_come_from_the_environment() -> None:
    env = {
        "LEDGER_DB_LOCK_TIMEOUT_S": "0.25",
        "LEDGER_DB_STATEMENT_TIMEOUT_S": "7",
        "LEDGER_MAX_HEADER_BYTES": "4096",
        "LEDGER_MAX_HEADERS": "20",
        "LEDGER_KEEPALIVE_TIMEOUT_S": "1.5",
        "LEDGER_REQUEST_TIMEOUT_S": "9",
        "LEDGER_MAX_CONNECTIONS": "50",
    }
    settings = load_service_settings(env)
    assert (settings.db_lock_timeout_s, settings.db_statement_timeout_s) == (0.25, 7.0)
    assert (settings.max_header_bytes, settings.max_headers) == (4096, 20)
    assert (settings.keepalive_timeout_s, settings.request_timeout_s, settings.max_connections) == (
        1.5,
        9.0,
        50,
    )
