"""The inspection views (migrations 0002, 0003) and the read-only role `ledger_reader`, on real Postgres."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from ledger.db import Database
from ledger.errors import InvalidInput
from ledger.runlog import overview

Conn = psycopg.Connection[dict[str, Any]]


@pytest.fixture
def conn(clean_database_url: str) -> Iterator[Conn]:
    with psycopg.connect(clean_database_url, row_factory=dict_row, autocommit=True) as c:
        yield c


def add_run(
    conn: Conn,
    run_id: str,
    *,
    progress: Any = None,
    idle: str = "0 seconds",
    age: str = "1 hour",
    terminal: str | None = None,
    error: str | None = None,
    events: tuple[str, ...] = (),
    play_name: str | None = "play",
) -> None:
    conn.execute(
        """
        INSERT INTO ledger.runs (run_id, status, play_name, created_at, updated_at, last_seq,
            live_node_progress, terminal_status, terminal_error, completed_at)
        VALUES (%(run_id)s, %(status)s, %(play)s, now() - %(age)s::interval, now() - %(idle)s::interval,
            %(last_seq)s, %(progress)s, %(terminal)s, %(error)s,
            CASE WHEN %(terminal)s::text IS NULL THEN NULL ELSE now() END)
        """,
        {
            "run_id": run_id,
            "status": terminal or "running",
            "play": play_name,
            "age": age,
            "idle": idle,
            "last_seq": len(events),
            "progress": Jsonb(progress if progress is not None else {}),
            "terminal": terminal,
            "error": error,
        },
    )
    conn.execute(
        "SELECT ledger.ensure_run_events_partition(created_at) FROM ledger.runs WHERE run_id = %s", (run_id,)
    )
    for seq, type_ in enumerate(events, start=1):
        conn.execute(
            "INSERT INTO ledger.run_events (run_id, seq, type, run_created_at)"
            " SELECT %s, %s, %s, created_at FROM ledger.runs WHERE run_id = %s",
            (run_id, seq, type_, run_id),
        )


def overview_row(conn: Conn, run_id: str) -> dict[str, Any]:
    row = conn.execute("SELECT * FROM ledger.run_overview WHERE run_id = %s", (run_id,)).fetchone()
    assert row is not None
    return row


# -- run_overview ----------------------------------------------------------------------------------


def test_run_overview_sums_rows_over_steps_and_counts_finished_steps(conn: Conn) -> None:
    add_run(
        conn,
        "r1",
        progress={
            "load": {
                "completed": 1,
                "total": 1,
                "started_at": 1_700_000_000_000,
                "completed_at": 1_700_000_001_000,
            },
            "map": {"completed": 4000, "failed": 12, "total": 5000, "started_at": 1_700_000_002_000},
            "tool": {"message": "3 calls in flight"},
        },
        events=("status", "step.started", "step.progress"),
        age="90 minutes",
    )
    row = overview_row(conn, "r1")
    assert (row["rows_completed"], row["rows_failed"], row["rows_total"]) == (4001, 12, 5001)
    assert (row["steps_total"], row["steps_done"]) == (3, 1)
    assert row["last_seq"] == 3
    assert row["last_event_type"] == "step.progress"
    assert row["terminal_status"] is None and row["status"] == "running"
    assert timedelta(minutes=89) < row["age"] < timedelta(minutes=91)


def test_run_overview_shows_terminal_state_and_zeroes_for_a_run_without_steps(conn: Conn) -> None:
    add_run(conn, "done", terminal="failed", error="boom", events=("status", "terminal"))
    row = overview_row(conn, "done")
    assert (row["terminal_status"], row["terminal_error"], row["last_event_type"]) == (
        "failed",
        "boom",
        "terminal",
    )
    assert (row["steps_total"], row["steps_done"]) == (0, 0)
    assert (row["rows_completed"], row["rows_failed"], row["rows_total"]) == (0, 0, 0)
    # A run with no event yet still shows (the event join is outer).
    add_run(conn, "fresh")
    assert overview_row(conn, "fresh")["last_event_type"] is None


def test_malformed_progress_values_are_ignored_not_fatal(conn: Conn) -> None:
    add_run(
        conn,
        "odd",
        progress={
            "a": {"completed": "12", "failed": None, "total": 10.0},
            "b": "not an object",
            "c": {"completed": 2, "completed_at": "yesterday"},
        },
    )
    add_run(conn, "array", progress=[1, 2, 3])
    row = overview_row(conn, "odd")
    assert (row["rows_completed"], row["rows_failed"], row["rows_total"]) == (2, 0, 10)
    assert (row["steps_total"], row["steps_done"]) == (3, 0)
    assert overview_row(conn, "array")["steps_total"] == 0
    # step_progress has a row per key and NULLs where a value is not usable.
    rows = conn.execute("SELECT * FROM ledger.step_progress WHERE run_id = 'odd' ORDER BY node_id").fetchall()
    assert [r["node_id"] for r in rows] == ["a", "b", "c"]
    assert (rows[0]["completed"], rows[0]["total"]) == (None, 10)
    assert rows[1]["completed"] is None and rows[2]["completed_at"] is None
    assert conn.execute(
        "SELECT count(*) AS n FROM ledger.step_progress WHERE run_id = 'array'"
    ).fetchone() == {"n": 0}


# -- step_progress ---------------------------------------------------------------------------------


def test_step_progress_has_one_row_per_node_with_times_from_epoch_ms(conn: Conn) -> None:
    add_run(
        conn,
        "r1",
        progress={
            "map": {
                "completed": 1234,
                "failed": 5,
                "total": 10000,
                "message": "1,234 / 10,000 rows processed",
                "started_at": 1_700_000_000_123,
                "completed_at": 1_700_000_060_000,
                "updated_at": 1_700_000_060_000,
            },
            "tool": {"started_at": 1_700_000_061_000},
        },
    )
    add_run(conn, "other", progress={"x": {"completed": 1}})
    rows = conn.execute(
        "SELECT *, extract(epoch FROM started_at) * 1000 AS started_ms FROM ledger.step_progress "
        "WHERE run_id = 'r1' ORDER BY node_id"
    ).fetchall()
    assert [r["node_id"] for r in rows] == ["map", "tool"]
    step = rows[0]
    assert (step["completed"], step["failed"], step["total"]) == (1234, 5, 10000)
    assert step["message"] == "1,234 / 10,000 rows processed"
    assert int(step["started_ms"]) == 1_700_000_000_123
    assert step["completed_at"] - step["started_at"] == timedelta(seconds=59, milliseconds=877)
    tool = rows[1]
    assert tool["completed_at"] is None and tool["completed"] is None and tool["message"] is None


# -- pool_availability -----------------------------------------------------------------------------


def add_entry(
    conn: Conn,
    id_: str,
    *,
    ready_ago: str | None,
    expires_in: str = "5 minutes",
    version: str = "v1",
    pool: str = "default",
) -> None:
    conn.execute(
        """
        INSERT INTO ledger.pool_entries (pool, id, version, state, created_at, ready_at, expires_at)
        VALUES (%(pool)s, %(id)s, %(version)s,
            CASE WHEN %(ready_ago)s::text IS NULL THEN 'warming' ELSE 'ready' END,
            now() - interval '1 minute', now() - %(ready_ago)s::interval, now() + %(expires_in)s::interval)
        """,
        {"pool": pool, "id": id_, "version": version, "ready_ago": ready_ago, "expires_in": expires_in},
    )


def availability(conn: Conn) -> dict[tuple[str, str], tuple[int, int, int]]:
    rows = conn.execute("SELECT * FROM ledger.pool_availability").fetchall()
    return {(r["pool"], r["version"]): (r["available"], r["warming"], r["stale"]) for r in rows}


def test_pool_availability_splits_unexpired_entries_into_available_warming_and_stale(conn: Conn) -> None:
    add_entry(conn, "fresh-1", ready_ago="10 seconds")
    add_entry(conn, "fresh-2", ready_ago="6 minutes")
    add_entry(conn, "warm-1", ready_ago=None)
    # Ready for 8 minutes: stale, so neither available nor warming (the next GC deletes it).
    add_entry(conn, "stale-1", ready_ago="8 minutes")
    # Expired entries count for nothing, ready or not.
    add_entry(conn, "expired-ready", ready_ago="1 minute", expires_in="-1 second")
    add_entry(conn, "expired-warm", ready_ago=None, expires_in="-1 second")
    add_entry(conn, "new-version", ready_ago="1 minute", version="v2")
    add_entry(conn, "other-pool", ready_ago=None, pool="blue")
    add_entry(conn, "only-expired", ready_ago="1 minute", version="v0", expires_in="-1 minute")
    assert availability(conn) == {
        ("default", "v1"): (2, 1, 1),
        ("default", "v2"): (1, 0, 0),
        ("blue", "v1"): (0, 1, 0),
    }


def test_pool_entry_ready_exactly_at_the_stale_limit_is_still_available(clean_database_url: str) -> None:
    # One transaction, so now() is the same instant for the insert and the view.
    with psycopg.connect(clean_database_url, row_factory=dict_row) as conn:
        add_entry(conn, "edge", ready_ago="7 minutes")
        add_entry(conn, "past", ready_ago="7 minutes 1 millisecond")
        # A ready_at ahead of now is not claimable yet: warming, as WarmPool.count says.
        add_entry(conn, "future", ready_ago="-1 second")
        assert availability(conn) == {("default", "v1"): (1, 1, 1)}
        conn.rollback()


# -- stalled_runs ----------------------------------------------------------------------------------


def test_stalled_runs_lists_only_non_terminal_runs_idle_past_five_minutes(conn: Conn) -> None:
    add_run(conn, "stalled", idle="6 minutes")
    add_run(conn, "busy", idle="4 minutes")
    add_run(conn, "finished-long-ago", idle="2 hours", terminal="completed")
    rows = conn.execute("SELECT * FROM ledger.stalled_runs").fetchall()
    assert [r["run_id"] for r in rows] == ["stalled"]
    assert timedelta(minutes=6) <= rows[0]["idle"] < timedelta(minutes=7)
    assert rows[0]["status"] == "running"


def test_stalled_runs_counts_a_heartbeat_like_an_event(conn: Conn) -> None:
    add_run(conn, "beating", idle="20 minutes")
    add_run(conn, "stopped-beating", idle="20 minutes")
    for run_id, beat in (("beating", "1 minute"), ("stopped-beating", "8 minutes")):
        conn.execute(
            "UPDATE ledger.runs SET last_heartbeat_at = now() - %s::interval WHERE run_id = %s",
            (beat, run_id),
        )
    rows = conn.execute("SELECT * FROM ledger.stalled_runs").fetchall()
    assert [r["run_id"] for r in rows] == ["stopped-beating"]
    # Idle since the later of the last event and the heartbeat.
    assert timedelta(minutes=8) <= rows[0]["idle"] < timedelta(minutes=9)
    assert rows[0]["last_heartbeat_at"] is not None


# -- ledger.runlog.overview (what the service's run list reads) --------------------------------------------


async def test_list_runs_returns_newest_first_in_epoch_ms(db: Database, clean_database_url: str) -> None:
    with psycopg.connect(clean_database_url, row_factory=dict_row, autocommit=True) as c:
        add_run(c, "old", age="2 hours", progress={"m": {"completed": 3, "failed": 1, "total": 9}})
        add_run(c, "mid", age="1 hour")
        add_run(c, "new", age="1 minute", terminal="completed", events=("terminal",))
        add_run(c, "stuck", age="3 hours", idle="10 minutes")
    runs = await overview.list_runs(db, limit=3)
    assert [r["run_id"] for r in runs] == ["new", "mid", "old"]
    old = runs[2]
    assert (old["rows_completed"], old["rows_failed"], old["rows_total"], old["steps_total"]) == (3, 1, 9, 1)
    assert 2 * 3_600_000 - 60_000 < old["age_ms"] < 2 * 3_600_000 + 60_000
    assert old["created_at"] < runs[1]["created_at"] < runs[0]["created_at"]
    assert runs[0]["terminal_status"] == "completed" and runs[0]["last_event_type"] == "terminal"
    assert [r["run_id"] for r in await overview.list_runs(db)] == ["new", "mid", "old", "stuck"]
    stalled = await overview.list_stalled_runs(db)
    assert [r["run_id"] for r in stalled] == ["stuck"] and stalled[0]["idle_ms"] >= 600_000


@pytest.mark.parametrize("limit", [0, -1, 1001])
async def test_list_runs_rejects_a_limit_out_of_range(db: Database, limit: int) -> None:
    with pytest.raises(InvalidInput) as err:
        await overview.list_runs(db, limit=limit)
    assert err.value.field == "limit"


async def test_pool_availability_reads_the_view(db: Database, clean_database_url: str) -> None:
    with psycopg.connect(clean_database_url, row_factory=dict_row, autocommit=True) as c:
        add_entry(c, "a", ready_ago="1 minute")
        add_entry(c, "b", ready_ago=None)
    rows = await overview.pool_availability(db)
    assert len(rows) == 1
    assert (rows[0]["available"], rows[0]["warming"], rows[0]["stale"]) == (1, 1, 0)
    assert rows[0]["newest_ready_at"] is not None


# -- the read-only role ----------------------------------------------------------------------------


def as_user(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


@pytest.fixture
def reader_url(clean_database_url: str) -> Iterator[str]:
    """A login role (unique name: roles are cluster-wide) that holds only `ledger_reader`, with a
    password: a server that asks for one (any but a trusting test server) refuses it otherwise."""
    name = f"reader_{uuid.uuid4().hex[:12]}"
    password = secrets.token_urlsafe(16)
    with psycopg.connect(clean_database_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE ledger_reader").format(
                sql.Identifier(name), sql.Literal(password)
            )
        )
    try:
        yield as_user(clean_database_url, name, password)
    finally:
        with psycopg.connect(clean_database_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


READ_ONLY_VIOLATIONS = [
    "INSERT INTO ledger.runs (run_id) VALUES ('intruder')",
    "UPDATE ledger.runs SET status = 'hacked'",
    "DELETE FROM ledger.run_events",
    "DELETE FROM ledger.pool_entries",
    "TRUNCATE ledger.sheet_rows",
    "CREATE TABLE ledger.mine (x int)",
    "CREATE VIEW ledger.mine AS SELECT 1 AS x",
]


def test_reader_role_reads_views_and_tables_and_writes_nothing(
    conn: Conn, reader_url: str, clean_database_url: str
) -> None:
    add_run(conn, "r1", progress={"m": {"completed": 7, "total": 10}}, events=("status",))
    add_entry(conn, "e1", ready_ago="1 minute")
    with psycopg.connect(reader_url, autocommit=True) as reader:
        assert reader.execute("SELECT current_user").fetchone() == (urlsplit(reader_url).username,)
        assert reader.execute("SELECT rows_completed FROM ledger.run_overview").fetchall() == [(7,)]
        assert reader.execute("SELECT node_id FROM ledger.step_progress").fetchall() == [("m",)]
        assert reader.execute("SELECT available FROM ledger.pool_availability").fetchall() == [(1,)]
        assert reader.execute("SELECT count(*) FROM ledger.stalled_runs").fetchone() == (0,)
        assert reader.execute("SELECT seq, type FROM ledger.event_log").fetchall() == [(1, "status")]
        for table in (
            "runs",
            "run_events",
            "pool_entries",
            "run_mappings",
            "sheet_rows",
            "node_observations",
            "idempotency_keys",
        ):
            reader.execute(sql.SQL("SELECT * FROM ledger.{}").format(sql.Identifier(table))).fetchall()
        for statement in READ_ONLY_VIOLATIONS:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                reader.execute(statement)
    # Nothing the reader tried changed anything.
    assert conn.execute("SELECT run_id, status FROM ledger.runs").fetchall() == [
        {"run_id": "r1", "status": "running"}
    ]
    assert conn.execute("SELECT count(*) AS n FROM ledger.run_events").fetchone() == {"n": 1}


def test_reader_role_is_nologin(conn: Conn) -> None:
    row = conn.execute(
        "SELECT rolcanlogin, rolsuper FROM pg_roles WHERE rolname = 'ledger_reader'"
    ).fetchone()
    assert row == {"rolcanlogin": False, "rolsuper": False}
