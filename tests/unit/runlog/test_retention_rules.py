"""The retention rule and how LEDGER_RUN_RETENTION is read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ledger.errors import ConfigError
from ledger.runlog.retention import DEFAULT_RETENTION, cutoff, describe, is_expired, parse_retention
from ledger.service.settings import load_service_settings

NOW = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, DEFAULT_RETENTION),
        ("", DEFAULT_RETENTION),
        ("30d", timedelta(days=30)),
        (" 720h ", timedelta(hours=720)),
        ("90m", timedelta(minutes=90)),
        ("3600", timedelta(hours=1)),
        ("0", None),
        ("OFF", None),
    ],
)
def test_retention_parses_durations_and_off(text: str | None, expected: timedelta | None) -> None:
    assert parse_retention(text) == expected


@pytest.mark.parametrize("text", ["-1d", "30 days", "1w", "1.5d"])
def test_a_bad_retention_names_its_variable(text: str) -> None:
    with pytest.raises(ConfigError, match="LEDGER_RUN_RETENTION"):
        parse_retention(text)
    with pytest.raises(ConfigError, match="LEDGER_RUN_RETENTION"):
        load_service_settings({"LEDGER_RUN_RETENTION": text})


def test_service_settings_default_to_thirty_days_and_take_off() -> None:
    assert load_service_settings({}).run_retention == timedelta(days=30)
    assert load_service_settings({"LEDGER_RUN_RETENTION": "off"}).run_retention is None


def test_describe_reads_back() -> None:
    for value in (timedelta(days=30), timedelta(hours=36), timedelta(minutes=90), timedelta(seconds=45)):
        assert parse_retention(describe(value)) == value


def test_only_finished_runs_completed_before_the_cutoff_are_expired() -> None:
    at = cutoff(NOW, timedelta(days=30))
    assert at == NOW - timedelta(days=30)
    assert is_expired("completed", at - timedelta(seconds=1), at)
    assert not is_expired("completed", at, at)
    assert not is_expired(None, None, at)
    assert not is_expired(None, at - timedelta(days=400), at)
