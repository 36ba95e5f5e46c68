"""Idempotency-Key through the real service: a retried write is answered, not applied again."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from tests.acceptance.conftest import TOKENS, Server, new_id

WAIT_S = 30.0


def open_run(client: httpx.Client) -> str:
    run_id = new_id("idem")
    assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200
    return run_id


def log_lines(client: httpx.Client, run_id: str) -> list[str]:
    page = client.get(f"/v1/runs/{run_id}/events", params={"after": -1}).json()
    return [e["line"] for e in page["events"] if e["type"] == "log"]


def post_events(client: httpx.Client, run_id: str, key: str, *lines: str, **kwargs: Any) -> httpx.Response:
    body = {"events": [{"type": "log", "line": line} for line in lines]}
    return client.post(f"/v1/runs/{run_id}/events", json=body, headers={"Idempotency-Key": key, **kwargs})


def test_a_retried_append_with_the_same_key_appends_once(client: httpx.Client) -> None:
    run_id = open_run(client)
    first = post_events(client, run_id, "append-1", "once")
    assert first.status_code == 200, first.text
    assert "idempotent-replayed" not in first.headers
    again = post_events(client, run_id, "append-1", "once")
    assert again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()  # the stored answer: same seq, same ts
    assert log_lines(client, run_id) == ["once"]
    # Same body in other JSON spelling (key order, spacing) is the same request.
    raw = b'{ "events" : [ { "line": "once", "type": "log" } ] }'
    spelled = client.post(
        f"/v1/runs/{run_id}/events",
        content=raw,
        headers={"Idempotency-Key": "append-1", "Content-Type": "application/json"},
    )
    assert spelled.status_code == 200 and spelled.json() == first.json()
    # A new key is a new request.
    assert post_events(client, run_id, "append-2", "once").status_code == 200
    assert log_lines(client, run_id) == ["once", "once"]


def test_the_same_key_with_another_body_is_422_and_writes_nothing(client: httpx.Client) -> None:
    run_id = open_run(client)
    assert post_events(client, run_id, "k", "first").status_code == 200
    other = post_events(client, run_id, "k", "second")
    assert other.status_code == 422
    assert other.json()["error"].startswith("Idempotency-Key: ")
    assert log_lines(client, run_id) == ["first"]
    # The stored answer still stands for the original body.
    assert post_events(client, run_id, "k", "first").headers["idempotent-replayed"] == "true"


def test_a_key_is_scoped_per_token_and_per_path(server: Server, client: httpx.Client) -> None:
    run_id = open_run(client)
    other_run = open_run(client)
    assert post_events(client, run_id, "shared", "x").status_code == 200
    # Another token with the same key and body: another client's request, applied.
    second = {"Authorization": f"Bearer {TOKENS[1]}"}
    with httpx.Client(base_url=server.base_url, headers=second, timeout=30) as second_token:
        assert post_events(second_token, run_id, "shared", "x").status_code == 200
        assert "idempotent-replayed" not in post_events(second_token, other_run, "mine", "y").headers
        # ... and each token gets its own answer back on a retry.
        assert post_events(second_token, run_id, "shared", "x").headers["idempotent-replayed"] == "true"
    assert post_events(client, run_id, "shared", "x").headers["idempotent-replayed"] == "true"
    # Another path with the same key and body: applied.
    assert post_events(client, other_run, "shared", "x").status_code == 200
    assert post_events(client, other_run, "shared", "x").headers["idempotent-replayed"] == "true"
    assert log_lines(client, run_id) == ["x", "x"]
    assert log_lines(client, other_run) == ["y", "x"]


def test_4xx_answers_are_stored_too(client: httpx.Client) -> None:
    run_id = new_id("idem-later")
    missing = post_events(client, run_id, "early", "too soon")
    assert missing.status_code == 404
    assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200
    # The request itself was answered: its retry gets that answer, not a new attempt.
    retried = post_events(client, run_id, "early", "too soon")
    assert retried.status_code == 404 and retried.headers["idempotent-replayed"] == "true"
    assert retried.json() == missing.json()
    assert log_lines(client, run_id) == []


def test_a_bad_key_is_refused(client: httpx.Client) -> None:
    run_id = open_run(client)
    for key in ("x" * 1025, ""):
        answer = post_events(client, run_id, key, "never")
        assert answer.status_code == 422, key
        assert answer.json()["error"].startswith("Idempotency-Key: ")
    assert log_lines(client, run_id) == []


def test_put_and_status_uploads_honour_the_key(client: httpx.Client) -> None:
    run_id = open_run(client)
    upload = {"run_id": run_id, "upload_seq": 1, "status": "running", "producer_attempt": 1}
    upload |= {"live_logs": ["a", "b"], "live_log_total_count": 2}
    key = {"Idempotency-Key": f"{run_id}:1:1"}
    first = client.post(f"/v1/runs/{run_id}/status", json=upload, headers=key)
    assert first.status_code == 200 and first.json()["duplicate"] is False
    # Without the key the retry is absorbed as a duplicate; with it, it gets the first answer.
    again = client.post(f"/v1/runs/{run_id}/status", json=upload, headers=key)
    assert again.json() == first.json()
    terminal = {"status": "failed", "error": "boom"}
    ended = client.put(f"/v1/runs/{run_id}/terminal", json=terminal, headers={"Idempotency-Key": "end"})
    replayed = client.put(f"/v1/runs/{run_id}/terminal", json=terminal, headers={"Idempotency-Key": "end"})
    assert ended.status_code == 200 and replayed.json() == ended.json()
    assert replayed.headers["idempotent-replayed"] == "true"
    assert client.get(f"/v1/runs/{run_id}").json()["last_seq"] == 3  # two lines and one terminal


@pytest.fixture
def run_lock(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(database_url) as conn:
        yield conn


def wait_for_lock_waiters(database_url: str, count: int) -> None:
    """Until `count` backends of the service wait on a lock (the test holds the run's row)."""
    deadline = time.monotonic() + WAIT_S
    with psycopg.connect(database_url, autocommit=True) as watcher:
        while True:
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE application_name = 'run-ledger' AND wait_event_type = 'Lock'"
            ).fetchone()
            if row is not None and row[0] >= count:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"fewer than {count} requests ever waited on a lock")
            time.sleep(0.02)


def test_concurrent_requests_with_one_key_append_once(
    server: Server, client: httpx.Client, database_url: str, run_lock: psycopg.Connection[Any]
) -> None:
    run_id = open_run(client)
    answers: list[httpx.Response] = []

    def send() -> None:
        with server.client() as own:
            answers.append(post_events(own, run_id, "together", "exactly once"))

    # Hold the run's row: the first request stops at it holding the key; the second must then wait
    # for the first (in one process, for its turn at the run; across replicas, for the key) and not
    # append a second time.
    run_lock.execute("SELECT 1 FROM ledger.runs WHERE run_id = %s FOR UPDATE", (run_id,))
    senders = [threading.Thread(target=send) for _ in range(2)]
    for sender in senders:
        sender.start()
    wait_for_lock_waiters(database_url, 1)
    run_lock.commit()
    for sender in senders:
        sender.join(WAIT_S)
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].json() == answers[1].json()
    assert sorted(a.headers.get("idempotent-replayed", "false") for a in answers) == ["false", "true"]
    assert log_lines(client, run_id) == ["exactly once"]
