"""Time: the database's by default, injectable so tests can move it across TTLs and stale limits.

Operations ask their `Clock` for "now" inside the transaction that uses it. `DatabaseClock` answers
with the transaction's `now()`, so every replica agrees on time; `ManualClock` is set by tests.
The wire speaks epoch milliseconds (what JavaScript clients and runners use); `to_ms`/`from_ms`
convert at the boundary.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol, overload

import psycopg

__all__ = [
    "EPOCH",
    "Clock",
    "DatabaseClock",
    "ManualClock",
    "from_ms",
    "to_ms",
]

EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class Clock(Protocol):
    async def now(self, conn: psycopg.AsyncConnection[Any]) -> datetime:
        """The current time, as seen by the transaction on `conn`."""
        ...


class DatabaseClock:
    async def now(self, conn: psycopg.AsyncConnection[Any]) -> datetime:
        cur = await conn.execute("SELECT now() AS now")
        row = await cur.fetchone()
        assert row is not None
        value = row["now"] if isinstance(row, dict) else row[0]
        assert isinstance(value, datetime)
        return value


class ManualClock:
    """A clock that only moves when told to (tests)."""

    def __init__(self, start: datetime | None = None) -> None:
        self.current = start or datetime(2026, 1, 1, tzinfo=UTC)

    async def now(self, conn: psycopg.AsyncConnection[Any]) -> datetime:
        return self.current

    def advance(self, ms: float) -> None:
        self.current += timedelta(milliseconds=ms)


@overload
def to_ms(value: datetime) -> int: ...
@overload
def to_ms(value: datetime | None) -> int | None: ...
def to_ms(value: datetime | None) -> int | None:
    """Epoch milliseconds (the API's time unit), or None."""
    if value is None:
        return None
    # Integer arithmetic on the timedelta: float seconds lose the last millisecond now and then.
    return (value - EPOCH) // timedelta(milliseconds=1)


def from_ms(ms: float) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)
