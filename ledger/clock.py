"""Time: the database's by default, injectable so tests can move it across TTLs and stale limits.

Operations ask their `Clock` for "now" inside the transaction that uses it. `DatabaseClock` answers
with the transaction's `now()`, so every replica agrees on time; `ManualClock` is set by tests.
The wire speaks epoch milliseconds (what JavaScript clients and runners use); `to_ms`/`from_ms`
convert at the boundary.

Every conversion between a time and a count since the epoch is written here and nowhere else:
milliseconds (`to_ms`, `from_ms`, and `ms_sql` for a statement that answers in them), seconds
(`to_s`, `from_s`: HTTP dates, tokens, log records) and microseconds (`to_us`, `from_us`: cursors
that must keep a timestamptz exactly). A second copy would drift in its rounding or its epoch, so a
test fails when one appears elsewhere in the package.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Protocol, overload

if TYPE_CHECKING:
    # Only named in annotations: a rule module converts times without loading the driver.
    import psycopg

__all__ = [
    "EPOCH",
    "Clock",
    "DatabaseClock",
    "ManualClock",
    "from_ms",
    "from_s",
    "from_us",
    "ms_sql",
    "to_ms",
    "to_s",
    "to_us",
]

EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND: Final = timedelta(milliseconds=1)
_MICROSECOND: Final = timedelta(microseconds=1)


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
    return (value - EPOCH) // _MILLISECOND


def from_ms(ms: float) -> datetime:
    """The instant `ms` epoch milliseconds name (UTC)."""
    return EPOCH + timedelta(milliseconds=ms)


def ms_sql(column: str) -> str:
    """SQL that reads the timestamptz `column` as epoch milliseconds, or the interval `column` as
    milliseconds: a bigint, rounded to the nearest millisecond (the cast of Postgres's numeric
    rounds, where `to_ms` floors: they differ on a time with 500 microseconds or more)."""
    return f"(extract(epoch FROM {column}) * 1000)::bigint"


def to_s(value: datetime) -> float:
    """Epoch seconds (HTTP dates, token expiries, `time.time()`), with the microseconds."""
    return (value - EPOCH) / timedelta(seconds=1)


def from_s(seconds: float) -> datetime:
    """The instant `seconds` epoch seconds name (UTC), e.g. a log record's `created`."""
    return EPOCH + timedelta(seconds=seconds)


def to_us(value: datetime) -> int:
    """Epoch microseconds: all a timestamptz holds, so `from_us` gives the same instant back."""
    return (value - EPOCH) // _MICROSECOND


def from_us(us: int) -> datetime:
    """The instant `us` epoch microseconds name (UTC)."""
    return EPOCH + us * _MICROSECOND
