"""The pool's default windows have one home, `ledger.pool_windows()`: the claim and the collect use
them for a window their caller leaves NULL, exactly as `PoolSettings()` (read from the same file)
does in Python, on each side of every limit."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from ledger.pool.rules import PoolSettings

S = PoolSettings()
NOW = datetime(2026, 1, 1, 12, 0, 0, 500_000, tzinfo=UTC)
MS = timedelta(milliseconds=1)
US = timedelta(microseconds=1)
STALE = S.ready_max_age_ms * MS

INSERT = """
INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)
VALUES ('p', %s, 'v1', 'ready', %s, %s, %s)
"""
INSERT_WARMING = """
INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)
VALUES ('p', %s, 'v1', 'warming', %s, NULL, %s)
"""
CLAIM_DEFAULTS = "SELECT * FROM ledger.pool_claim_v2('p', 'v1', %s, %s, false, %s)"
CLAIM_EXPLICIT = "SELECT * FROM ledger.pool_claim_v2('p', 'v1', %s, %s, false, %s, %s, %s, %s)"

Conn = psycopg.Connection[tuple[object, ...]]


@pytest.fixture
def conn(clean_database_url: str) -> Iterator[Conn]:
    with psycopg.connect(clean_database_url) as c, c.transaction(force_rollback=True):
        yield c


def add(conn: Conn, entry_id: str, ready_ago: timedelta) -> None:
    conn.execute(INSERT, (entry_id, NOW - timedelta(hours=1), NOW - ready_ago, NOW + timedelta(minutes=5)))


def claims(conn: Conn, statement: str, *windows: int) -> list[tuple[object, ...] | None]:
    """Three claims for new runs at NOW, undone afterwards: what each takes and counts."""
    with conn.transaction(force_rollback=True):
        return [conn.execute(statement, (run, run, NOW, *windows)).fetchone() for run in ("r1", "r2", "r3")]


def test_a_claim_without_windows_takes_the_defaults_on_each_side_of_the_stale_limit(conn: Conn) -> None:
    add(conn, "just-fresh", STALE - MS)
    add(conn, "at-limit", STALE)
    add(conn, "just-stale", STALE + MS)
    taken = claims(conn, CLAIM_DEFAULTS)
    # Newest first; the entry ready exactly at the limit is still available, one past it never is.
    assert taken == [("just-fresh", 1, 0), ("at-limit", 0, 0), (None, 0, 0)]
    explicit = (S.min_ready_age_ms, S.ready_max_age_ms, S.mapping_ttl_ms)
    assert claims(conn, CLAIM_EXPLICIT, *explicit) == taken


def test_a_claim_without_a_minimum_age_takes_an_entry_ready_now_but_not_one_ready_later(conn: Conn) -> None:
    add(conn, "ready-now", timedelta(0))
    add(conn, "ready-later", -US)
    assert claims(conn, CLAIM_DEFAULTS) == [("ready-now", 0, 1), (None, 0, 1), (None, 0, 1)]


def test_a_claim_without_a_mapping_ttl_maps_the_run_for_the_default(conn: Conn) -> None:
    add(conn, "a", timedelta(seconds=1))
    conn.execute(CLAIM_DEFAULTS, ("run", "run", NOW))
    row = conn.execute("SELECT expires_at FROM ledger.run_mappings WHERE run_id = 'run'").fetchone()
    assert row == (NOW + S.mapping_ttl_ms * MS,)


def test_a_collect_without_a_window_deletes_what_is_stale_by_default(conn: Conn) -> None:
    add(conn, "at-limit", STALE)
    add(conn, "just-stale", STALE + US)
    assert conn.execute("SELECT ledger.pool_collect_v2('p', 'v1', %s)", (NOW,)).fetchone() == (1,)
    assert conn.execute("SELECT id FROM ledger.pool_entries").fetchall() == [("at-limit",)]


def test_a_collect_without_a_time_reads_the_transaction_s(conn: Conn) -> None:
    now = conn.execute("SELECT now()").fetchone()
    assert now is not None and isinstance(now[0], datetime)
    conn.execute(INSERT_WARMING, ("gone", now[0] - timedelta(hours=1), now[0]))
    conn.execute(INSERT_WARMING, ("kept", now[0] - timedelta(hours=1), now[0] + US))
    assert conn.execute("SELECT ledger.pool_collect_v2('p', 'v1')").fetchone() == (1,)
    assert conn.execute("SELECT id FROM ledger.pool_entries").fetchall() == [("kept",)]
