from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ledger.config import ConfigError, load_settings, sqlalchemy_url, validate_database_url
from ledger.service.settings import load_service_settings


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:p@localhost:5432/db",
        "postgres://u@db.example/x",
        "postgresql+psycopg://u@h/x",
        "postgresql://postgres:@/postgres?host=/tmp/sock",
    ],
)
def test_accepts_postgres_urls(url: str) -> None:
    assert validate_database_url(url).startswith("postgresql://")


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("mysql://u@h/db", "postgresql:// URL"),
        ("localhost:5432", "postgresql:// URL"),
        ("postgresql://u@h:notaport/db", "invalid port"),
        ("postgresql:///db", "names no host"),
    ],
)
def test_rejects_bad_urls_naming_the_variable(url: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_database_url(url)
    assert "LEDGER_DATABASE_URL" in str(info.value)
    assert fragment in str(info.value)


def test_settings_from_environment(tmp_path: Path) -> None:
    settings = load_settings({"LEDGER_DATA_DIR": str(tmp_path)})
    assert settings.embedded and settings.data_dir == tmp_path
    settings = load_settings({"LEDGER_DATABASE_URL": "postgres://u@h/d"})
    assert not settings.embedded and settings.database_url == "postgresql://u@h/d"


def test_listen_url_defaults_to_none_and_is_checked_under_its_own_name() -> None:
    assert load_settings({"LEDGER_DATABASE_URL": "postgres://u@pooler:6432/d"}).listen_url is None
    settings = load_settings(
        {"LEDGER_DATABASE_URL": "postgres://u@pooler/d", "LEDGER_LISTEN_URL": "postgres://u@db/d"}
    )
    assert settings.listen_url == "postgresql://u@db/d"
    with pytest.raises(ConfigError) as info:
        load_settings({"LEDGER_LISTEN_URL": "mysql://u@db/d"})
    assert "LEDGER_LISTEN_URL" in str(info.value)


def test_transaction_pooling_flag() -> None:
    assert not load_service_settings({}).db_transaction_pooling
    assert load_service_settings({"LEDGER_DB_TRANSACTION_POOLING": "1"}).db_transaction_pooling
    with pytest.raises(ConfigError, match="LEDGER_DB_TRANSACTION_POOLING"):
        load_service_settings({"LEDGER_DB_TRANSACTION_POOLING": "maybe"})


def test_sqlalchemy_url_names_the_driver() -> None:
    assert sqlalchemy_url("postgresql://u@h/d") == "postgresql+psycopg://u@h/d"


def test_cli_bad_url_is_one_line_and_non_zero() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ledger.cli", "db", "current"],
        env={"LEDGER_DATABASE_URL": "mysql://nope", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0
    assert "LEDGER_DATABASE_URL" in proc.stderr
