"""The run list (`ledger.runlog.overview`, what `GET /v1/runs` and `ledger runs` read): its order,
its cursor pages, and the index that serves both, on real Postgres."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from ledger import validate
from ledger.db import Database
from ledger.errors import InvalidInput
from ledger.runlog import overview

Conn = psycopg.Connection[dict[str, Any]]

T = datetime(2026, 6, 1, 12, 0, 0, 100, tzinfo=UTC)


@pytest.fixture
def conn(clean_database_url: str) -> Iterator[Conn]:
    with psycopg.connect(clean_database_url, row_factory=dict_row, autocommit=True) as c:
        yield c


def add_runs(conn: Conn, *runs: tuple[str, datetime]) -> None:
    for run_id, created_at in runs:
        conn.execute(
            "INSERT INTO ledger.runs (run_id, created_at, updated_at) VALUES (%s, %s, %s)",
            (run_id, created_at, created_at),
        )


async def every_page(db: Database, limit: int) -> list[list[str]]:
    pages: list[list[str]] = []
    before: str | None = None
    while True:
        page = await overview.runs_page(db, limit, before)
        pages.append([run["run_id"] for run in page["runs"]])
        before = page["next_before"]
        if before is None:
            return pages


async def test_the_list_is_newest_first_to_the_microsecond_and_ties_go_by_run_id(
    db: Database, conn: Conn
) -> None:
    add_runs(
        conn,
        ("tie-b", T),
        ("old", T - timedelta(seconds=1)),
        ("tie-c", T),
        # Newer than the ties by 300 µs: the same millisecond, still listed first.
        ("later-same-ms", T + timedelta(microseconds=300)),
        ("tie-a", T),
        ("newest", T + timedelta(minutes=1)),
    )
    runs = await overview.list_runs(db, limit=1000)
    assert [r["run_id"] for r in runs] == ["newest", "later-same-ms", "tie-a", "tie-b", "tie-c", "old"]
    assert runs[1]["created_at"] == runs[2]["created_at"]  # the answer keeps epoch milliseconds
    assert "position_at" not in runs[0]
    assert [r["run_id"] for r in await overview.list_runs(db, limit=2)] == ["newest", "later-same-ms"]


async def test_cursor_pages_cover_the_list_once_in_order_even_across_ties(db: Database, conn: Conn) -> None:
    add_runs(
        conn,
        *((f"tie-{i}", T) for i in range(5)),
        ("newest", T + timedelta(seconds=1)),
        ("older", T - timedelta(seconds=1)),
        ("oldest", T - timedelta(seconds=2)),
    )
    whole = [r["run_id"] for r in await overview.list_runs(db, limit=1000)]
    assert whole == ["newest", "tie-0", "tie-1", "tie-2", "tie-3", "tie-4", "older", "oldest"]
    # Pages end inside the ties (2, 3) and exactly at the end (4: a full last page, then an empty one).
    assert await every_page(db, 2) == [whole[0:2], whole[2:4], whole[4:6], whole[6:8], []]
    assert await every_page(db, 3) == [whole[0:3], whole[3:6], whole[6:8]]
    assert await every_page(db, 1000) == [whole]


async def test_a_cursor_keeps_its_place_when_runs_are_opened_or_deleted(db: Database, conn: Conn) -> None:
    add_runs(conn, *((f"run-{i}", T - timedelta(seconds=i)) for i in range(6)))
    first = await overview.runs_page(db, 2)
    assert [r["run_id"] for r in first["runs"]] == ["run-0", "run-1"]
    add_runs(conn, ("opened-later", T + timedelta(seconds=5)))
    conn.execute("DELETE FROM ledger.runs WHERE run_id = 'run-1'")  # the cursor's own run is gone
    second = await overview.runs_page(db, 2, first["next_before"])
    assert [r["run_id"] for r in second["runs"]] == ["run-2", "run-3"]


@pytest.mark.parametrize(
    "before",
    [
        "",
        "not a cursor",
        "12345",
        ":run-1",
        "1.5:run-1",
        "0x10:run-1",
        " 1:run-1",
        "99999999999999999999:run-1",  # past what a datetime holds
        "-99999999999999999:run-1",
        "1:nul \x00 inside",
    ],
)
async def test_a_malformed_cursor_is_invalid_input_naming_before(db: Database, before: str) -> None:
    with pytest.raises(InvalidInput) as err:
        await overview.runs_page(db, 10, before)
    assert err.value.field == "before"


async def test_a_cursor_round_trips_any_run_id_and_instant(db: Database, conn: Conn) -> None:
    odd = 'run: ü 🚀 "quoted" [x] 1:2'
    add_runs(conn, (odd, T + timedelta(microseconds=1)), ("next", T))
    page = await overview.runs_page(db, 1)
    assert [r["run_id"] for r in page["runs"]] == [odd]
    assert [r["run_id"] for r in (await overview.runs_page(db, 1, page["next_before"]))["runs"]] == ["next"]


@pytest.mark.parametrize("before", [None, overview.cursor_of(T, "run-x")])
def test_every_page_is_read_off_the_newest_first_index_without_a_sort(conn: Conn, before: str | None) -> None:
    # With sorting priced out, a plan still sorts when no index gives the list's order: the bare
    # `ORDER BY created_at` of the answer's millisecond column once did, over every run per page.
    add_runs(conn, *((f"run-{i}", T - timedelta(seconds=i)) for i in range(50)))
    conn.execute("ANALYZE ledger.runs")
    statement, params = overview.listing_statement(10, before)
    with conn.transaction():
        conn.execute("SET LOCAL enable_sort = off")
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = "\n".join(row["QUERY PLAN"] for row in conn.execute("EXPLAIN " + statement, params))
    assert "ix_runs_newest_first" in plan, plan
    assert "Sort" not in plan, plan


def add_run(conn: Conn, run_id: str, created_at: datetime, status: str, play: str | None) -> None:
    # Updated now: a watchdog sharing the database (a session's `ledger serve`) fails a live run
    # idle past its limit, which would change the status the filters are checked on.
    conn.execute(
        "INSERT INTO ledger.runs (run_id, created_at, updated_at, status, play_name) "
        "VALUES (%s, %s, now(), %s, %s)",
        (run_id, created_at, status, play),
    )


async def every_filtered_page(db: Database, limit: int, runs: overview.RunFilter) -> list[str]:
    listed: list[str] = []
    before: str | None = None
    while True:
        page = await overview.runs_page(db, limit, before, runs)
        listed.extend(run["run_id"] for run in page["runs"])
        before = page["next_before"]
        if before is None:
            return listed


async def test_filters_keep_only_the_matching_runs_across_pages(db: Database, conn: Conn) -> None:
    statuses = ("running", "failed", "completed")
    plays = ("etl", "report", None)
    for i in range(18):
        add_run(conn, f"r{i:02d}", T + timedelta(seconds=i), statuses[i % 3], plays[i // 6])
    newest_first = [f"r{i:02d}" for i in reversed(range(18))]

    def expect(status: str | None = None, play: str | None = None, since: int | None = None) -> list[str]:
        return [
            run
            for run in newest_first
            if (status is None or statuses[int(run[1:]) % 3] == status)
            and (play is None or plays[int(run[1:]) // 6] == play)
            and (since is None or int(run[1:]) >= since)
        ]

    since_ms = int((T + timedelta(seconds=9)).timestamp() * 1000)
    cases = [
        (overview.RunFilter(status="failed"), expect(status="failed")),
        (overview.RunFilter(play="report"), expect(play="report")),
        # T carries 100 µs: a run created exactly at the bound's millisecond plus 100 µs is after it.
        (overview.RunFilter(since_ms=since_ms), expect(since=9)),
        (overview.RunFilter(status="running", play="etl"), expect(status="running", play="etl")),
        (overview.RunFilter(status="cancelled"), []),
        (overview.RunFilter(), newest_first),
    ]
    for runs, expected in cases:
        for limit in (1, 2, 5, 50):
            assert await every_filtered_page(db, limit, runs) == expected, (runs, limit)


async def test_since_is_inclusive_to_the_millisecond(db: Database, conn: Conn) -> None:
    at = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)
    add_run(conn, "before", at - timedelta(milliseconds=1), "running", None)
    add_run(conn, "at", at, "running", None)
    add_run(conn, "after", at + timedelta(milliseconds=1), "running", None)
    since = int(at.timestamp() * 1000)
    page = await overview.runs_page(db, 10, None, overview.RunFilter(since_ms=since))
    assert [run["run_id"] for run in page["runs"]] == ["after", "at"]


@pytest.mark.parametrize(
    ("runs", "field"),
    [
        (overview.RunFilter(since_ms=-1), "since"),
        (overview.RunFilter(since_ms=validate.MAX_EPOCH_MS + 1), "since"),
        (overview.RunFilter(status=3), "status"),  # type: ignore[arg-type]
        (overview.RunFilter(play=["x"]), "play"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_filter_names_its_field(runs: overview.RunFilter, field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        overview.listing_statement(10, None, runs)
    assert refused.value.field == field


def test_the_since_bound_takes_its_limits() -> None:
    for since in (0, validate.MAX_EPOCH_MS):
        statement, params = overview.listing_statement(10, None, overview.RunFilter(since_ms=since))
        assert "o.created_at >= %(since)s" in statement and "since" in params
