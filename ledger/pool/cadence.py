"""How often claims delete the pool's garbage: at most once per interval per pool and version.

Why amortized, and why here. Garbage (expired, stale-ready, other-version entries) is never visible:
every reader filters it (the claim window, the counts, `list`), so deleting it only reclaims rows
and keeps the claim's index scan short. Deleting it on every claim meant a scan of the pool's
entries per claim, the cost that grew with the pool. Once per interval per process bounds what
garbage can pile up to what turns to garbage within one interval, costs nothing between, and needs
no other process running (the watchdog sweep would, and cannot know which version is current,
which decides what "another version" is). The rarer operations (add, count, list, promote, ready,
delete) still collect on every call. A claim that collects also folds the pool's tallies (see
migration 0007), which keeps their rows few.

The clock is monotonic process time by default; a test passes its own ticker to make the cadence
follow a manual clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = [
    "DEFAULT_INTERVAL",
    "MAX_KEYS",
    "GcCadence",
]

# Seconds of `time.monotonic`.
DEFAULT_INTERVAL = 1.0
# Keys remembered at most (pool and version pairs); past it the memory starts over, which at worst
# lets each pair collect once more.
MAX_KEYS = 1024


class GcCadence:
    """Says when a claim should collect garbage: the first time for a pool and version, then once
    `interval` (in the ticker's unit) has passed since the last time it said so (0: every time)."""

    def __init__(
        self, interval: float = DEFAULT_INTERVAL, ticker: Callable[[], float] = time.monotonic
    ) -> None:
        if interval < 0:
            raise ValueError("interval must not be negative")
        self.interval = interval
        self.ticker = ticker
        self._last: dict[tuple[str, str], float] = {}

    def due(self, pool: str, version: str) -> bool:
        """Whether this claim collects; a True answer counts as collecting now (concurrent claims of
        one process then leave it to this one)."""
        key = (pool, version)
        now = self.ticker()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            return False
        if last is None and len(self._last) >= MAX_KEYS:
            self._last.clear()
        self._last[key] = now
        return True
