"""`LEDGER_PARTITION_INTERVAL`: day or month, any case and spacing; unset keeps what is stored."""

from __future__ import annotations

import pytest

from ledger.errors import ConfigError
from ledger.runlog.partitions import PERIOD_VAR, parse_period


@pytest.mark.parametrize(("text", "period"), [("day", "day"), (" Month ", "month"), ("", None), (None, None)])
def test_day_or_month_or_nothing(text: str | None, period: str | None) -> None:
    assert parse_period(text) == period


@pytest.mark.parametrize("text", ["week", "days", "1d", "year"])
def test_anything_else_names_the_variable(text: str) -> None:
    with pytest.raises(ConfigError, match=PERIOD_VAR):
        parse_period(text)
