"""The plugin's `ledger_service`: the real service, served from the test process on the session's
own database (a clone of the migrated template, which the service never writes to), with the
settings and tokens `ledger serve` would take from the environment, stopped for good by `stop`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import psycopg
import pytest

from ledger.client import LedgerClient
from ledger.testing import InProcessService, Service, ensure_template, serve_in_process, with_database


def test_the_plugin_serves_from_the_test_process_on_the_sessions_database(
    ledger_service: Service, ledger_client: LedgerClient, database_url: str, pg_admin_url: str
) -> None:
    assert isinstance(ledger_service, InProcessService)
    assert ledger_service.thread.is_alive()
    ledger_client.open_run("plugin-isolated", play_name="isolation")
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT play_name FROM ledger.runs WHERE run_id = 'plugin-isolated'"
        ).fetchone() == ("isolation",)
    # The template the next session clones again holds nothing a test wrote.
    template = with_database(pg_admin_url, ensure_template(pg_admin_url))
    with psycopg.connect(template) as conn:
        assert conn.execute("SELECT count(*) FROM ledger.runs").fetchone() == (0,)


def test_the_plugins_service_takes_its_token_and_refuses_others(ledger_service: Service) -> None:
    with ledger_service.client() as http:
        assert http.get("/v1/runs").status_code == 200
        assert http.get("/v1/runs", headers={"Authorization": "Bearer not-its-token"}).status_code == 401


def test_settings_come_from_the_overrides_without_touching_this_process_environment(
    database_url: str, tmp_path: Path
) -> None:
    before = dict(os.environ)
    service = serve_in_process(
        database_url, tmp_path, LEDGER_API_TOKENS="one,two", LEDGER_MAX_BODY_BYTES="64"
    )
    try:
        assert dict(os.environ) == before
        assert service.token == "one"
        with httpx.Client(base_url=service.url, timeout=30) as http:
            two = {"Authorization": "Bearer two"}
            assert http.get("/v1/runs", headers=two).status_code == 200
            # A body over the overridden limit (64 bytes) is refused as too large.
            answer = http.post("/v1/runs/r-big/events", headers=two, content=b"[" + b" " * 100 + b"]")
            assert answer.status_code == 413, answer.text
    finally:
        service.stop()
    assert not service.thread.is_alive()
    with pytest.raises(httpx.TransportError):
        httpx.get(service.url + "/readyz", timeout=5)


def test_with_an_empty_token_list_the_token_is_the_one_stored_in_its_data_dir(
    database_url: str, tmp_path: Path
) -> None:
    from ledger.auth import read_token_file, token_file

    service = serve_in_process(database_url, tmp_path, LEDGER_API_TOKENS="")
    try:
        assert service.token and service.token == read_token_file(token_file(tmp_path / "data"))
        with service.client() as http:
            assert http.get("/v1/runs").status_code == 200
    finally:
        service.stop()


def test_a_worker_in_a_subprocess_reports_to_the_plugins_service(
    ledger_service: Service, ledger_client: LedgerClient, tmp_path: Path
) -> None:
    # docs/testing.md's example, as written there: the worker gets the service's address and token
    # in the variables every `ledger` command reads.
    env = {**os.environ, "LEDGER_URL": ledger_service.url, "LEDGER_TOKEN": ledger_service.token}
    events = [{"type": "log", "line": "hello"}, {"type": "result", "status": "completed"}]
    subprocess.run(
        [sys.executable, "-m", "ledger.cli", "report", "--run-id", "plugin-worker-1"],
        input="".join(json.dumps(event) + "\n" for event in events),
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    assert ledger_client.get_terminal("plugin-worker-1")["status"] == "completed"
