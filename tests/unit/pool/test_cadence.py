"""When claims collect garbage: `GcCadence`, on a ticker the test moves."""

from __future__ import annotations

import pytest

from ledger.pool import cadence
from ledger.pool.cadence import GcCadence


class Ticker:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_first_claim_collects_then_once_per_interval_per_pool_and_version() -> None:
    tick = Ticker()
    c = GcCadence(10, ticker=tick)
    assert c.due("p", "v1")
    assert not c.due("p", "v1")
    assert c.due("p", "v2") and c.due("q", "v1")  # each pool and version on its own
    tick.now += 9.999
    assert not c.due("p", "v1")
    tick.now += 0.001
    assert c.due("p", "v1")
    assert not c.due("p", "v1")  # counted from the claim that collected, not the last one asked


def test_interval_zero_collects_every_time() -> None:
    c = GcCadence(0, ticker=Ticker())
    assert all(c.due("p", "v1") for _ in range(5))


def test_default_is_once_a_second_of_monotonic_time() -> None:
    c = GcCadence()
    assert c.interval == cadence.DEFAULT_INTERVAL == 1.0
    assert c.due("p", "v1") and not c.due("p", "v1")


def test_memory_is_bounded_and_starting_over_only_collects_again() -> None:
    tick = Ticker()
    c = GcCadence(10, ticker=tick)
    for n in range(cadence.MAX_KEYS):
        assert c.due("p", f"v{n}")
    assert not c.due("p", "v0")
    assert c.due("p", "new")  # past the bound: forgotten, so v0 may collect once more
    assert c.due("p", "v0")
    assert len(c._last) <= cadence.MAX_KEYS


def test_negative_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="interval"):
        GcCadence(-1)
