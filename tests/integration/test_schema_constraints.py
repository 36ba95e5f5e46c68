"""The schema's own checks reject impossible rows, whatever code writes them."""

from __future__ import annotations

import psycopg
import pytest


def test_check_constraints_reject_bad_states(clean_database_url: str) -> None:
    with psycopg.connect(clean_database_url) as conn:
        conn.execute("INSERT INTO ledger.runs (run_id) VALUES ('r1')")
        bad = [
            "INSERT INTO ledger.pool_entries VALUES ('default','i1','v1','hot',now(),NULL,now())",
            "INSERT INTO ledger.pool_entries VALUES ('default','i1','v1','ready',now(),NULL,now())",
            "INSERT INTO ledger.pool_entries VALUES ('default','i1','v1','warming',now(),now(),now())",
            "INSERT INTO ledger.run_mappings (run_id,pool,instance_id,state,version,created_at,expires_at)"
            " VALUES ('r1','default','i1','blocked','v1',now(),now())",
            "INSERT INTO ledger.run_events (run_id, seq, type) VALUES ('r1', 0, 'log')",
            "INSERT INTO ledger.run_events (run_id, seq, type) VALUES ('r1', 1, 'bogus')",
            "INSERT INTO ledger.run_events (run_id, seq, type) VALUES ('nope', 1, 'log')",
            "UPDATE ledger.runs SET terminal_status = 'done', completed_at = now()",
            "UPDATE ledger.runs SET terminal_status = 'failed'",
            "INSERT INTO ledger.sheet_rows (run_id, table_namespace, row_key, status)"
            " VALUES ('r1','ns','k','skipped')",
        ]
        for statement in bad:
            with pytest.raises(psycopg.errors.IntegrityError), conn.transaction():
                conn.execute(statement)
        # Good rows go in.
        conn.execute("INSERT INTO ledger.run_events (run_id, seq, type) VALUES ('r1', 1, 'log')")
        conn.execute("UPDATE ledger.runs SET terminal_status = 'failed', completed_at = now()")
        count = conn.execute("SELECT count(*) FROM ledger.run_events").fetchone()
        assert count == (1,)


def test_deleting_a_run_cascades(clean_database_url: str) -> None:
    with psycopg.connect(clean_database_url) as conn:
        conn.execute("INSERT INTO ledger.runs (run_id) VALUES ('r1')")
        conn.execute("INSERT INTO ledger.run_events (run_id, seq, type) VALUES ('r1', 1, 'log')")
        conn.execute(
            "INSERT INTO ledger.sheet_rows (run_id, table_namespace, row_key, status)"
            " VALUES ('r1','ns','k','completed')"
        )
        conn.execute("DELETE FROM ledger.runs")
        assert conn.execute("SELECT count(*) FROM ledger.run_events").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM ledger.sheet_rows").fetchone() == (0,)
