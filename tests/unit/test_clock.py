from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from ledger.clock import from_ms, to_ms


@given(st.integers(min_value=0, max_value=4_102_444_800_000))
def test_ms_round_trip_is_exact(ms: int) -> None:
    assert to_ms(from_ms(ms)) == ms


def test_to_ms_of_known_instants() -> None:
    assert to_ms(datetime(1970, 1, 1, tzinfo=UTC)) == 0
    assert to_ms(datetime(2026, 1, 1, 0, 0, 0, 999_999, tzinfo=UTC)) == 1_767_225_600_999
    assert to_ms(None) is None
