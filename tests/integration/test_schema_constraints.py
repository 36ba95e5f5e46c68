"""The schema's own checks reject impossible rows, whatever code writes them."""

from __future__ import annotations

import psycopg
import pytest

EVENT = "INSERT INTO ledger.run_events (run_id, seq, type, run_created_at)"
CREATED = "(SELECT created_at FROM ledger.runs WHERE run_id = 'r1')"


def test_check_constraints_reject_bad_states(clean_database_url: str) -> None:
    with psycopg.connect(clean_database_url) as conn:
        conn.execute("INSERT INTO ledger.runs (run_id) VALUES ('r1')")
        bad = [
            "INSERT INTO ledger.pool_entries VALUES ('default','i1','v1','hot',now(),NULL,now())",
            "INSERT INTO ledger.pool_entries VALUES ('default','i1','v1','ready',now(),NULL,now())",
            "INSERT INTO ledger.pool_entries VALUES ('default','i1','v1','warming',now(),now(),now())",
            "INSERT INTO ledger.run_mappings (run_id,pool,instance_id,state,version,created_at,expires_at)"
            " VALUES ('r1','default','i1','blocked','v1',now(),now())",
            f"{EVENT} VALUES ('r1', 0, 'log', {CREATED})",
            f"{EVENT} VALUES ('r1', 1, 'bogus', {CREATED})",
            # An event names its run's creation time: a run that does not exist has none.
            f"{EVENT} VALUES ('nope', 1, 'log', (SELECT created_at FROM ledger.runs WHERE run_id = 'nope'))",
            "UPDATE ledger.runs SET terminal_status = 'done', completed_at = now()",
            "UPDATE ledger.runs SET terminal_status = 'failed'",
            "INSERT INTO ledger.sheet_rows (run_id, table_namespace, row_key, status)"
            " VALUES ('r1','ns','k','skipped')",
        ]
        for statement in bad:
            with pytest.raises(psycopg.errors.IntegrityError), conn.transaction():
                conn.execute(statement)
        # Good rows go in.
        conn.execute(f"{EVENT} VALUES ('r1', 1, 'log', {CREATED})")
        conn.execute("UPDATE ledger.runs SET terminal_status = 'failed', completed_at = now()")
        count = conn.execute("SELECT count(*) FROM ledger.run_events").fetchone()
        assert count == (1,)


def test_deleting_a_run_cascades(clean_database_url: str) -> None:
    with psycopg.connect(clean_database_url) as conn:
        conn.execute("INSERT INTO ledger.runs (run_id) VALUES ('r1')")
        conn.execute(f"{EVENT} VALUES ('r1', 1, 'log', {CREATED})")
        conn.execute(
            "INSERT INTO ledger.sheet_rows (run_id, table_namespace, row_key, status)"
            " VALUES ('r1','ns','k','completed')"
        )
        conn.execute("DELETE FROM ledger.runs")
        assert conn.execute("SELECT count(*) FROM ledger.run_events").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM ledger.sheet_rows").fetchone() == (0,)
