"""The suite's own process reaches no database or data the user's settings name."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from ledger.config import load_settings


def test_settings_read_from_the_environment_name_no_real_database_and_an_empty_data_dir() -> None:
    settings = load_settings()
    assert settings.database_url is None and "LEDGER_DATABASE_URL" not in os.environ
    assert settings.listen_url is None
    assert settings.data_dir != Path(platformdirs.user_data_dir("run-ledger", appauthor=False))
    assert settings.data_dir == Path(os.environ["LEDGER_DATA_DIR"])
    # The directory the suite made for this process, which nothing before it wrote to.
    assert settings.data_dir.name.startswith("ledger-test-data-")
