from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from ledger.clock import from_ms, from_s, from_us, ms_sql, to_ms, to_s, to_us


@given(st.integers(min_value=0, max_value=4_102_444_800_000))
def test_ms_round_trip_is_exact(ms: int) -> None:
    assert to_ms(from_ms(ms)) == ms


def test_to_ms_of_known_instants() -> None:
    assert to_ms(datetime(1970, 1, 1, tzinfo=UTC)) == 0
    assert to_ms(datetime(2026, 1, 1, 0, 0, 0, 999_999, tzinfo=UTC)) == 1_767_225_600_999
    assert to_ms(None) is None


def test_seconds_and_microseconds_of_known_instants() -> None:
    at = datetime(2024, 10, 9, 0, 0, 1, 500_001, tzinfo=UTC)
    assert to_s(at) == 1_728_432_001.500001
    assert from_s(1_728_432_001.5) == datetime(2024, 10, 9, 0, 0, 1, 500_000, tzinfo=UTC)
    assert to_us(at) == 1_728_432_001_500_001
    assert from_us(1_728_432_001_500_001) == at
    # Before the epoch too: a cursor may name any instant a timestamptz holds.
    assert to_us(datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)) == -1
    assert from_us(-1) == datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)


@given(st.integers(min_value=-62_135_596_800_000_000, max_value=253_402_300_799_999_999))
def test_us_round_trip_is_exact(us: int) -> None:
    assert to_us(from_us(us)) == us


def test_ms_sql_reads_a_column_as_milliseconds() -> None:
    assert ms_sql("o.created_at") == "(extract(epoch FROM o.created_at) * 1000)::bigint"
