"""A downstream project's integration test: only `pip install run-ledger` and the plugin's fixtures."""

from __future__ import annotations

import psycopg

from ledger.client import LedgerClient
from ledger.testing import Service


def test_a_run_through_the_plugins_service(
    ledger_client: LedgerClient, ledger_service: Service, database_url: str
) -> None:
    ledger_client.open_run("downstream-1", play_name="smoke")
    ledger_client.append_events("downstream-1", [{"type": "log", "line": "hello"}])
    page = ledger_client.list_events("downstream-1")
    assert [(e["seq"], e["type"]) for e in page["events"]] == [(1, "log")]
    assert ledger_service.url.startswith("http://127.0.0.1:")
    # The service wrote to the test database the fixture handed out.
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT payload->>'line' FROM ledger.run_events WHERE run_id = 'downstream-1'"
        ).fetchone()
    assert row == ("hello",)
