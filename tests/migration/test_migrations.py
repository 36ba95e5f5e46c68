"""Migrations: one head, upgrade from empty, downgrade leaves no trace, no drift from ledger.schema."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from ledger import migrate
from ledger.config import sqlalchemy_url
from ledger.schema import SCHEMA, metadata
from tests import postgres


@pytest.fixture
def empty_url(pg_admin_url: str, worker_id: str) -> Iterator[str]:
    name = f"ledger_mig_{worker_id}_{os.getpid()}"
    yield postgres.create_empty_database(pg_admin_url, name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        postgres.drop_database(conn, name)


def ledger_objects(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            """
            SELECT c.relkind::text || ':' || c.relname FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s
            ORDER BY 1
            """,
            (SCHEMA,),
        ).fetchall()
    return [r[0] for r in rows]


def test_single_head() -> None:
    heads = ScriptDirectory.from_config(migrate.alembic_config("")).get_heads()
    assert len(heads) == 1, heads


def test_upgrade_from_empty_builds_every_table(empty_url: str) -> None:
    assert migrate.current(empty_url) is None
    migrate.upgrade(empty_url)
    assert migrate.current(empty_url) == migrate.head()
    objects = ledger_objects(empty_url)
    for table in metadata.tables.values():
        # The event log is a partitioned table (relkind p), the others plain ones.
        kind = "p" if table.name == "run_events" else "r"
        assert f"{kind}:{table.name}" in objects
    assert "i:ix_pool_entries_ready_newest" in objects


def test_upgrade_twice_changes_nothing(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    before = ledger_objects(empty_url)
    migrate.upgrade(empty_url)
    assert ledger_objects(empty_url) == before


def test_downgrade_to_base_leaves_nothing(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    migrate.downgrade(empty_url, "base")
    assert ledger_objects(empty_url) == []
    with psycopg.connect(empty_url) as conn:
        schema = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (SCHEMA,)).fetchone()
    assert schema is None
    # And back up again: the round trip is repeatable.
    migrate.upgrade(empty_url)
    assert migrate.current(empty_url) == migrate.head()


def test_every_step_downgrades_and_upgrades(empty_url: str) -> None:
    script = ScriptDirectory.from_config(migrate.alembic_config(""))
    revisions = [r.revision for r in reversed(list(script.walk_revisions()))]
    for rev in revisions:
        migrate.upgrade(empty_url, rev)
        migrate.downgrade(empty_url, "-1")
        migrate.upgrade(empty_url, rev)
    assert migrate.current(empty_url) == migrate.head()


def test_models_and_migrations_do_not_drift(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    engine = create_engine(sqlalchemy_url(empty_url))
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(
                conn,
                opts={
                    "include_schemas": True,
                    "include_name": lambda name, type_, _parents: type_ != "schema" or name == SCHEMA,
                    "compare_type": True,
                    "version_table": migrate.VERSION_TABLE,
                },
            )
            diff = compare_metadata(ctx, metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_cli_upgrade_is_idempotent(empty_url: str) -> None:
    env = {**os.environ, "LEDGER_DATABASE_URL": empty_url}
    cmd = [sys.executable, "-m", "ledger.cli", "db", "upgrade"]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, timeout=60)
    assert "upgraded empty database ->" in first.stdout
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, timeout=60)
    assert "nothing to do" in second.stdout
    current = subprocess.run(
        [sys.executable, "-m", "ledger.cli", "db", "current"], env=env, capture_output=True, text=True
    )
    assert "up to date" in current.stdout


def reader_may_select(url: str, relation: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT has_table_privilege('ledger_reader', %s, 'SELECT')", (relation,)
        ).fetchone()
    assert row is not None
    return bool(row[0])


def test_0003_keeps_the_reader_on_the_views_it_redefines(empty_url: str) -> None:
    migrate.upgrade(empty_url, "0002")
    assert reader_may_select(empty_url, "ledger.stalled_runs")
    migrate.upgrade(empty_url, "0003")
    assert reader_may_select(empty_url, "ledger.stalled_runs")
    assert reader_may_select(empty_url, "ledger.idempotency_keys")
    with psycopg.connect(empty_url) as conn:
        columns = [
            row[0] for row in conn.execute("SELECT * FROM ledger.stalled_runs LIMIT 0").description or ()
        ]
    assert columns[-1] == "last_heartbeat_at"
    migrate.downgrade(empty_url, "0002")
    # The view is recreated as 0002 had it, and readable again.
    assert reader_may_select(empty_url, "ledger.stalled_runs")
    with psycopg.connect(empty_url) as conn:
        columns = [
            row[0] for row in conn.execute("SELECT * FROM ledger.stalled_runs LIMIT 0").description or ()
        ]
    assert columns == ["run_id", "status", "play_name", "updated_at", "idle", "last_seq"]
