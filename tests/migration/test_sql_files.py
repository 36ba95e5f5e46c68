"""The database migrated to head holds exactly what `ledger/sql/` defines.

The files of the head release are loaded into a scratch `ledger` schema (the migrated one moved
aside, its tables copied empty, all inside a transaction that is rolled back) and every function,
view and trigger is compared as the catalog renders it (`pg_get_functiondef`, `pg_get_viewdef`,
`pg_get_triggerdef`), so formatting does not count and meaning does: nothing missing, nothing extra,
nothing different. The pool's windows are read by Python from the same file the database runs.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql as psql

from ledger import migrate, sql
from ledger.pool.rules import PoolSettings
from tests import postgres

Definitions = dict[str, str]

# Every function (by signature), view and trigger of the schema `ledger`, as the catalog renders it.
DEFINITIONS = """
SELECT 'function ' || p.oid::regprocedure::text, pg_get_functiondef(p.oid)
FROM pg_proc p WHERE p.pronamespace = 'ledger'::regnamespace
UNION ALL
SELECT 'view ' || c.oid::regclass::text, pg_get_viewdef(c.oid)
FROM pg_class c WHERE c.relnamespace = 'ledger'::regnamespace AND c.relkind IN ('v', 'm')
UNION ALL
SELECT 'trigger ' || t.tgname || ' on ' || c.oid::regclass::text, pg_get_triggerdef(t.oid)
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE c.relnamespace = 'ledger'::regnamespace AND NOT t.tgisinternal
"""

TABLES = """
SELECT c.relname FROM pg_class c
WHERE c.relnamespace = 'ledger'::regnamespace AND c.relkind IN ('r', 'p') ORDER BY 1
"""

Reader = Callable[[str], str]


@pytest.fixture(scope="module")
def head_url(pg_admin_url: str, worker_id: str) -> Iterator[str]:
    name = f"ledger_sql_{worker_id}"
    url = postgres.create_empty_database(pg_admin_url, name)
    migrate.upgrade(url)
    yield url
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        postgres.drop_database(conn, name)


def _definitions(conn: psycopg.Connection[tuple[str, str]]) -> Definitions:
    return dict(conn.execute(DEFINITIONS).fetchall())


def compare(url: str, reader: Reader = sql.read, *, extra: str | None = None) -> dict[str, list[str]]:
    """What differs between the database at head (after `extra`, a statement run first) and the
    head release's files as `reader` gives them; nothing is kept."""
    with psycopg.connect(url) as conn, conn.transaction(force_rollback=True):
        if extra is not None:
            conn.execute(extra)
        at_head = _definitions(conn)
        tables = [row[0] for row in conn.execute(TABLES).fetchall()]
        conn.execute("ALTER SCHEMA ledger RENAME TO ledger_at_head")
        conn.execute("CREATE SCHEMA ledger")
        for table in tables:
            conn.execute(
                psql.SQL("CREATE TABLE ledger.{0} (LIKE ledger_at_head.{0} INCLUDING ALL)").format(
                    psql.Identifier(table)
                )
            )
        sql.load(conn.execute, sql.HEAD, reader=reader)
        from_files = _definitions(conn)
    return {
        "only_at_head": sorted(at_head.keys() - from_files.keys()),
        "only_in_files": sorted(from_files.keys() - at_head.keys()),
        "different": sorted(k for k in at_head.keys() & from_files.keys() if at_head[k] != from_files[k]),
    }


NOTHING: dict[str, list[str]] = {"only_at_head": [], "only_in_files": [], "different": []}


def test_the_database_at_head_holds_exactly_what_the_files_define(head_url: str) -> None:
    assert compare(head_url) == NOTHING


def test_the_comparison_sees_every_kind_of_object(head_url: str) -> None:
    with psycopg.connect(head_url) as conn:
        kinds = {name.split()[0] for name in _definitions(conn)}
    assert kinds == {"function", "view", "trigger"}


def _edited(tmp_path: Path, name: str, old: str, new: str) -> Reader:
    """A reader of a copy of the files in which `name` has `old` replaced by `new`."""
    for file in sql.RELEASES[sql.HEAD]:
        shutil.copy(Path(sql.__file__).parent / file, tmp_path / file)
    text = (tmp_path / name).read_text()
    assert old in text
    (tmp_path / name).write_text(text.replace(old, new, 1))
    return lambda file: (tmp_path / file).read_text()


@pytest.mark.parametrize(
    ("name", "old", "new", "changed"),
    [
        ("stalled_runs_2.sql", "interval '5 minutes'", "interval '6 minutes'", "view ledger.stalled_runs"),
        ("pool_windows_2.sql", "420000::bigint", "420001::bigint", "function ledger.pool_windows()"),
        (
            "append_events_v2.sql",
            "e.type <> 'terminal'",
            "e.type <> 'log'",
            "function ledger.append_events_v2(text,jsonb,text,bigint,timestamp with time zone,text,boolean)",
        ),
        (
            "append_events_v3.sql",
            "r.terminal_status IS NULL",
            "r.terminal_status IS NOT NULL",
            "function ledger.append_events_v3(text,jsonb,text,bigint,timestamp with time zone,text,boolean,"
            "jsonb)",
        ),
        (
            "pool_tallies.sql",
            "AFTER TRUNCATE ON ledger.pool_entries",
            "BEFORE TRUNCATE ON ledger.pool_entries",
            "trigger pool_tally_truncate on ledger.pool_entries",
        ),
    ],
)
def test_an_edited_file_is_a_difference(
    head_url: str, tmp_path: Path, name: str, old: str, new: str, changed: str
) -> None:
    assert compare(head_url, _edited(tmp_path, name, old, new)) == {**NOTHING, "different": [changed]}


def test_formatting_alone_is_no_difference(head_url: str, tmp_path: Path) -> None:
    reader = _edited(tmp_path, "stalled_runs_2.sql", "SELECT\n    r.run_id,", "SELECT r.run_id,")
    assert compare(head_url, reader) == NOTHING


def test_an_object_no_file_defines_is_found(head_url: str) -> None:
    stray = "CREATE FUNCTION ledger.stray() RETURNS int LANGUAGE sql AS 'SELECT 1'"
    assert compare(head_url, extra=stray) == {**NOTHING, "only_at_head": ["function ledger.stray()"]}


def test_an_object_missing_at_head_is_found(head_url: str) -> None:
    dropped = "DROP VIEW ledger.pool_availability"
    assert compare(head_url, extra=dropped) == {**NOTHING, "only_in_files": ["view ledger.pool_availability"]}


def test_python_reads_the_windows_the_database_runs(head_url: str) -> None:
    with psycopg.connect(head_url) as conn:
        cur = conn.execute("SELECT * FROM ledger.pool_windows()")
        row = cur.fetchone()
        columns = [c.name for c in cur.description or ()]
    assert row is not None
    defaults = PoolSettings()
    assert {name: getattr(defaults, name) for name in columns} == dict(zip(columns, row, strict=True))
    assert sorted(columns) == sorted(vars(defaults))


@pytest.fixture
def empty_url(pg_admin_url: str, worker_id: str) -> Iterator[str]:
    name = f"ledger_sql13_{worker_id}"
    yield postgres.create_empty_database(pg_admin_url, name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        postgres.drop_database(conn, name)


def _definitions_at(url: str) -> Definitions:
    with psycopg.connect(url) as conn:
        return _definitions(conn)


def test_0013_replaces_the_claim_and_the_collect_and_its_downgrade_restores_0012(empty_url: str) -> None:
    migrate.upgrade(empty_url, "0012")
    at_0012 = _definitions_at(empty_url)
    migrate.upgrade(empty_url, "0013")
    at_0013 = _definitions_at(empty_url)
    assert sorted(at_0012.keys() - at_0013.keys()) == [
        "function ledger.pool_claim(text,text,text,text,timestamp with time zone,bigint,bigint,bigint,"
        "boolean)",
        "function ledger.pool_collect(text,text,timestamp with time zone,bigint)",
    ]
    assert sorted(at_0013.keys() - at_0012.keys()) == [
        "function ledger.pool_claim_v2(text,text,text,text,boolean,timestamp with time zone,bigint,bigint,"
        "bigint)",
        "function ledger.pool_collect_v2(text,text,timestamp with time zone,bigint)",
        "function ledger.pool_windows()",
        "view ledger.pool_entry_conditions",
    ]
    # What both hold is unchanged but for the view that now counts by condition.
    changed = sorted(k for k in at_0012.keys() & at_0013.keys() if at_0012[k] != at_0013[k])
    assert changed == ["view ledger.pool_availability"]
    with psycopg.connect(empty_url) as conn:
        row = conn.execute(
            "SELECT has_table_privilege('ledger_reader', 'ledger.pool_entry_conditions', 'SELECT')"
        ).fetchone()
    assert row == (True,)
    migrate.downgrade(empty_url, "0012")
    assert _definitions_at(empty_url) == at_0012


APPEND_SIGNATURE = "(text,jsonb,text,bigint,timestamp with time zone,text,boolean)"


def _append(url: str, function: str, run_id: str, events: int, cap: int) -> None:
    batch = [["log", {"line": str(i)}] for i in range(events)]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"SELECT * FROM ledger.{function}(%s, %s::jsonb, NULL, %s, NULL, 'ledger_test', false)",
            (run_id, psycopg.types.json.Jsonb(batch), cap),
        )


def _stored(url: str, run_id: str) -> list[int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT seq FROM ledger.run_events WHERE run_id = %s ORDER BY seq", (run_id,))
        return [row[0] for row in rows.fetchall()]


def test_0016_replaces_the_append_and_its_downgrade_deletes_what_was_trimmed(empty_url: str) -> None:
    migrate.upgrade(empty_url, "0015")
    at_0015 = _definitions_at(empty_url)
    migrate.upgrade(empty_url, "0016")
    at_0016 = _definitions_at(empty_url)
    assert sorted(at_0015.keys() - at_0016.keys()) == [f"function ledger.append_events{APPEND_SIGNATURE}"]
    assert sorted(at_0016.keys() - at_0015.keys()) == [
        f"function ledger.append_events_v2{APPEND_SIGNATURE}",
        "view ledger.event_log",
    ]
    assert sorted(k for k in at_0015.keys() & at_0016.keys() if at_0015[k] != at_0016[k]) == []
    with psycopg.connect(empty_url) as conn:
        row = conn.execute(
            "SELECT has_table_privilege('ledger_reader', 'ledger.event_log', 'SELECT')"
        ).fetchone()
    assert row == (True,)
    with psycopg.connect(empty_url, autocommit=True) as conn:
        conn.execute("INSERT INTO ledger.runs (run_id) VALUES ('r1'), ('r2')")
    _append(empty_url, "append_events_v2", "r1", 12, 10)  # trimmed through 2, nothing deleted yet
    _append(empty_url, "append_events_v2", "r2", 5, 10)
    assert _stored(empty_url, "r1") == list(range(1, 13))
    migrate.downgrade(empty_url, "0015")
    assert _definitions_at(empty_url) == at_0015
    # The release before reads every stored row from a cursor of -1: what it would have deleted is.
    assert _stored(empty_url, "r1") == list(range(3, 13))
    assert _stored(empty_url, "r2") == [1, 2, 3, 4, 5]
    _append(empty_url, "append_events", "r1", 1, 10)
    assert _stored(empty_url, "r1") == list(range(4, 14))


APPEND_V3_SIGNATURE = "(text,jsonb,text,bigint,timestamp with time zone,text,boolean,jsonb)"


def test_0017_adds_the_append_that_locks_with_its_update_beside_the_one_before(empty_url: str) -> None:
    migrate.upgrade(empty_url, "0016")
    at_0016 = _definitions_at(empty_url)
    migrate.upgrade(empty_url, "0017")
    at_0017 = _definitions_at(empty_url)
    # The release before still calls `append_events_v2` while a deploy rolls: it stays as it was.
    added = sorted(at_0017.keys() - at_0016.keys())
    assert added == [f"function ledger.append_events_v3{APPEND_V3_SIGNATURE}"]
    assert sorted(at_0016.keys() - at_0017.keys()) == []
    assert sorted(k for k in at_0016.keys() & at_0017.keys() if at_0016[k] != at_0017[k]) == []
    with psycopg.connect(empty_url, autocommit=True) as conn:
        conn.execute("INSERT INTO ledger.runs (run_id) VALUES ('r1')")
    # Both appends write one log: each continues the other's seqs and trims from the same watermark.
    _append(empty_url, "append_events_v2", "r1", 3, 4)
    _append_v3(empty_url, "r1", 3, 4)
    _append(empty_url, "append_events_v2", "r1", 1, 4)
    with psycopg.connect(empty_url) as conn:
        row = conn.execute("SELECT last_seq, events_trimmed_through FROM ledger.runs").fetchone()
    assert row == (7, 3)
    assert _stored(empty_url, "r1") == list(range(1, 8))
    migrate.downgrade(empty_url, "0016")
    assert _definitions_at(empty_url) == at_0016


def _append_v3(url: str, run_id: str, events: int, cap: int) -> None:
    batch = [["log", {"line": str(i)}] for i in range(events)]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "SELECT * FROM ledger.append_events_v3(%s, %s::jsonb, NULL, %s, NULL, 'ledger_test', false,"
            " NULL)",
            (run_id, psycopg.types.json.Jsonb(batch), cap),
        )
