"""A Postgres restart and outage under the real service: 503 with Retry-After, never 500.

The server is this module's own embedded Postgres (never the shared test server), restarted and
stopped for real; the service is a real `ledger serve` on it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.acceptance.conftest import Server, new_id, start_server, stop_server
from tests.faults.invariants import assert_consistent
from tests.own_postgres import OwnPostgres
from tests.own_postgres import own_postgres as own_server

pytestmark = pytest.mark.own_postgres

# Short, so that a request waiting for a connection while Postgres is down gives up quickly.
POOL_TIMEOUT_S = "1"
RECOVERY_S = 60.0


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    with own_server() as server:
        yield server


@pytest.fixture
def faulty_server(own_postgres: OwnPostgres, tmp_path: Path) -> Iterator[Server]:
    running = start_server(
        own_postgres.url,
        tmp_path / "serve",
        LEDGER_DB_POOL_TIMEOUT_S=POOL_TIMEOUT_S,
        LEDGER_WATCHDOG="0",
    )
    try:
        yield running
    finally:
        stop_server(running)
        # Only after the answers were checked: a 500 would show here as a logged traceback.
        assert "unhandled error" not in running.log()


def requests(client: httpx.Client, run_id: str, key: str) -> list[httpx.Response]:
    """One of each kind of request: reads, writes, an idempotent write, a long-poll, a stream."""
    line = {"events": [{"type": "log", "line": key}]}
    answers = [
        client.get(f"/v1/runs/{run_id}"),
        client.post(f"/v1/runs/{run_id}/events", json=line),
        client.post(f"/v1/runs/{run_id}/events", json=line, headers={"Idempotency-Key": key}),
        client.get(f"/v1/runs/{run_id}/events", params={"after": -1, "timeout_ms": 100}),
        client.get(f"/v1/runs/{run_id}/sheets"),
        client.post("/v1/pools/faults/entries", json={"version": "v1", "ids": ["i1"]}),
    ]
    # A live stream would never end: only its status line (or its whole error answer) is read.
    with client.stream("GET", f"/v1/runs/{run_id}/events/stream", params={"after": "now"}) as stream:
        if stream.status_code != 200:
            stream.read()
        answers.append(stream)
    return answers


def assert_unavailable(answer: httpx.Response) -> None:
    assert answer.status_code == 503, (answer.request.method, answer.request.url, answer.text)
    assert answer.headers["retry-after"] == "1"
    assert answer.json()["error"].startswith("the database is unavailable")


def assert_ok_or_unavailable(answers: list[httpx.Response]) -> None:
    for answer in answers:
        if answer.status_code == 503:
            assert_unavailable(answer)
        else:
            assert 200 <= answer.status_code < 300, (answer.request.url, answer.status_code, answer.text)


def wait_until_served(client: httpx.Client, run_id: str) -> None:
    deadline = time.monotonic() + RECOVERY_S
    while client.get(f"/v1/runs/{run_id}").status_code != 200:
        if time.monotonic() > deadline:
            raise AssertionError("the service never recovered after Postgres came back")
        time.sleep(0.1)


def test_after_a_restart_requests_answer_2xx_or_503_never_500(
    own_postgres: OwnPostgres, faulty_server: Server
) -> None:
    with faulty_server.client() as client:
        run_id = new_id("restart")
        assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200
        assert_ok_or_unavailable(requests(client, run_id, "before"))
        for round_ in range(2):
            own_postgres.restart()
            # The pool's idle connections died with the server: none may be handed out as is.
            for attempt in range(3):
                assert_ok_or_unavailable(requests(client, run_id, f"after-{round_}-{attempt}"))
        wait_until_served(client, run_id)
        assert client.get(f"/v1/runs/{run_id}").json()["run_id"] == run_id
    assert_consistent(own_postgres.url)


def test_while_postgres_is_down_every_request_is_503_and_an_idempotent_retry_applies_later(
    own_postgres: OwnPostgres, faulty_server: Server
) -> None:
    with faulty_server.client() as client:
        run_id = new_id("outage")
        assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200
        own_postgres.stop()
        try:
            for answer in requests(client, run_id, "during"):
                assert_unavailable(answer)
        finally:
            own_postgres.start()
        wait_until_served(client, run_id)
        # The 503 was not stored: the retry with the same key is applied now, exactly once.
        line = {"events": [{"type": "log", "line": "during"}]}
        retried = client.post(f"/v1/runs/{run_id}/events", json=line, headers={"Idempotency-Key": "during"})
        assert retried.status_code == 200, retried.text
        assert "idempotent-replayed" not in retried.headers
        again = client.post(f"/v1/runs/{run_id}/events", json=line, headers={"Idempotency-Key": "during"})
        assert again.headers["idempotent-replayed"] == "true"
        page = client.get(f"/v1/runs/{run_id}/events", params={"after": -1}).json()
        assert [e["line"] for e in page["events"]] == ["during"]
    assert_consistent(own_postgres.url)
