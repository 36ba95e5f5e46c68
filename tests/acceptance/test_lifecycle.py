"""Start without configured tokens (the generated token file) and graceful shutdown (SIGTERM)."""

from __future__ import annotations

import asyncio
import signal
import stat
from pathlib import Path

import httpx

from tests.acceptance import sse
from tests.acceptance.conftest import new_id, start_server, stop_server
from tests.acceptance.test_events_api import metric_value, wait_for_waiters


async def test_token_file_then_graceful_shutdown_releases_waiters(database_url: str, tmp_path: Path) -> None:
    # Generous grace: if waiters were not released, shutdown would sit out the 30 s long-poll.
    server = start_server(database_url, tmp_path, LEDGER_API_TOKENS="", LEDGER_SHUTDOWN_GRACE_S="60")
    try:
        token_path = tmp_path / "data" / "api-token"
        assert f"stored token in {token_path}" in server.log()
        assert stat.S_IMODE(token_path.stat().st_mode) == 0o600
        server.token = token_path.read_text().strip()
        assert token_path.read_text().strip() not in server.log(), "the token itself is never printed"

        run_id = new_id("shutdown")
        async with httpx.AsyncClient(base_url=server.base_url) as anonymous:
            assert (await anonymous.get("/metrics")).status_code == 401
        async with server.async_client(timeout=90) as http:
            assert (await http.post("/v1/runs", json={"run_id": run_id})).status_code == 200
            await http.post(f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": "one"}]})
            poll = asyncio.create_task(
                http.get(f"/v1/runs/{run_id}/events", params={"after": 1, "timeout_ms": 30_000})
            )
            received: list[sse.Message] = []

            async def tail() -> None:
                async with http.stream("GET", f"/v1/runs/{run_id}/events/stream") as response:
                    async for message in sse.messages(response):
                        received.append(message)

            streaming = asyncio.create_task(tail())
            await wait_for_waiters(server, 2)
            server.process.send_signal(signal.SIGTERM)
            answer = await poll
            await streaming
            exit_code = await asyncio.get_running_loop().run_in_executor(None, server.process.wait, 20)
        # The waiting long-poll got a proper (empty) answer, the stream ended cleanly after what it had.
        assert answer.status_code == 200
        assert answer.json()["events"] == []
        assert [m.id for m in received if m.id is not None] == ["1"]
        assert exit_code == 0
        log = server.log()
        assert "service stopped" in log
        assert "timeout graceful shutdown exceeded" not in log
    finally:
        stop_server(server)


async def test_the_service_runs_the_watchdog(database_url: str, tmp_path: Path) -> None:
    server = start_server(
        database_url, tmp_path, LEDGER_WATCHDOG_STALL_S="1", LEDGER_WATCHDOG_INTERVAL_S="0.2"
    )
    try:
        run_id = new_id("stalls")
        async with server.async_client() as http:
            await http.post("/v1/runs", json={"run_id": run_id})
            # Nothing more happens to the run: the long-poll ends with the watchdog's terminal event.
            page = (
                await http.get(f"/v1/runs/{run_id}/events", params={"after": 0, "timeout_ms": 30_000})
            ).json()
            assert [e["type"] for e in page["events"]] == ["terminal"]
            assert page["events"][0]["status"] == "failed"
            assert page["events"][0]["error"] == "run watchdog: no progress; orchestrator presumed dead"
            metrics = (await http.get("/metrics")).text
        assert metric_value(metrics, "ledger_watchdog_failures_total") >= 1
    finally:
        stop_server(server)
