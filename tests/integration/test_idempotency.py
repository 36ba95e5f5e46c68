"""Idempotency-Key on real Postgres: the shared transaction, what is (not) stored, expiry, sweeping.

The service runs in process (httpx's ASGI transport, with its lifespan), so a test can make an
endpoint fail the way a lost database connection makes it fail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from fastapi import FastAPI

from ledger import idempotency
from ledger.clock import ManualClock
from ledger.db import Database
from ledger.errors import InvalidInput
from ledger.runlog.store import RunLog
from ledger.runlog.watchdog import Watchdog
from tests.integration.in_process import TOKEN, services


async def count(db: Database, sql: str, *params: object) -> int:
    async with db.connection() as conn:
        cur = await conn.execute(sql, params)
        row = await cur.fetchone()
    assert row is not None
    return int(next(iter(row.values())))


async def log_lines(db: Database, run_id: str) -> list[str]:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT payload->>'line' AS line FROM ledger.run_events WHERE run_id = %s ORDER BY seq", (run_id,)
        )
        return [row["line"] for row in await cur.fetchall()]


# -- the shared transaction ------------------------------------------------------------------------


async def test_transactions_inside_a_shared_one_commit_or_roll_back_with_it(db: Database) -> None:
    runlog = RunLog(db)
    await runlog.open_run("r1")
    with pytest.raises(RuntimeError, match="abandon"):
        async with db.shared_transaction():
            await runlog.append("r1", [{"type": "log", "line": "joined"}])
            raise RuntimeError("abandon")
    assert await log_lines(db, "r1") == []  # the append committed only into the shared transaction
    async with db.shared_transaction():
        await runlog.append("r1", [{"type": "log", "line": "kept"}])
        # A failing block inside rolls back to its savepoint; the shared transaction goes on.
        with pytest.raises(InvalidInput) as refused:
            async with db.transaction() as conn:
                await conn.execute("INSERT INTO ledger.runs (run_id) VALUES ('never')")
                await conn.execute("SELECT 1 / 0")
        # The store's boundary translated the driver's error, once.
        assert isinstance(refused.value.__cause__, psycopg.errors.DivisionByZero)
        assert await runlog.get_run("r1") is not None
    assert await log_lines(db, "r1") == ["kept"]
    assert await count(db, "SELECT count(*) FROM ledger.runs WHERE run_id = 'never'") == 0


async def test_a_shared_transaction_is_one_database_s(db: Database, clean_database_url: str) -> None:
    async with Database(clean_database_url, min_size=1, max_size=2) as other:
        async with db.shared_transaction() as shared, other.transaction() as conn:
            assert conn is not shared
        async with db.shared_transaction():
            with pytest.raises(RuntimeError, match="already open"):
                async with db.shared_transaction():
                    pass


# -- the service, in process ----------------------------------------------------------------------


@pytest.fixture
def service_tokens() -> list[str]:
    """The service accepts another token besides the client's: a key stores the requester's."""
    return [TOKEN, "other-token"]


async def append(
    client: httpx.AsyncClient, run_id: str, line: str, key: str, **headers: str
) -> httpx.Response:
    return await client.post(
        f"/v1/runs/{run_id}/events",
        json={"events": [{"type": "log", "line": line}]},
        headers={"Idempotency-Key": key, **headers},
    )


class LostConnection:
    """Stands in for `RunLog.append`: optionally appends for real, then loses the connection the
    way a store does, the driver's error raised inside one of the database's blocks."""

    def __init__(self, db: Database, real: Any, *, write_first: bool) -> None:
        self.db = db
        self.real = real
        self.write_first = write_first
        self.calls = 0

    async def __call__(self, run_id: str, events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        self.calls += 1
        if self.write_first:
            await self.real(run_id, events)
        async with self.db.connection():
            raise psycopg.OperationalError("server closed the connection unexpectedly")


@pytest.mark.parametrize("write_first", [False, True])
async def test_a_503_is_never_stored_and_leaves_nothing_written(
    app: FastAPI, client: httpx.AsyncClient, write_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = services(app)
    await svc.runlog.open_run("r1")
    failing = LostConnection(svc.db, svc.runlog.append, write_first=write_first)
    monkeypatch.setattr(svc.runlog, "append", failing)
    refused = await append(client, "r1", "hello", "k1")
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"].startswith("the database is unavailable")
    # What the endpoint wrote before it failed went with the transaction the answer would have
    # joined: a client that retries gets one line, not two.
    assert await log_lines(svc.db, "r1") == []
    assert await count(svc.db, "SELECT count(*) FROM ledger.idempotency_keys") == 0
    monkeypatch.undo()
    retried = await append(client, "r1", "hello", "k1")
    assert retried.status_code == 200 and "idempotent-replayed" not in retried.headers
    assert await log_lines(svc.db, "r1") == ["hello"]
    assert failing.calls == 1


async def test_a_request_without_an_accepted_token_stores_nothing(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    svc = services(app)
    await svc.runlog.open_run("r1")
    wrong = await append(client, "r1", "x", "k", Authorization="Bearer wrong")
    assert wrong.status_code == 401
    missing = await client.post(
        "/v1/runs/r1/events",
        json={"events": [{"type": "log", "line": "x"}]},
        headers={"Idempotency-Key": "k", "Authorization": ""},
    )
    assert missing.status_code == 401
    assert await count(svc.db, "SELECT count(*) FROM ledger.idempotency_keys") == 0
    # The token is kept as a fingerprint only.
    assert (await append(client, "r1", "x", "k")).status_code == 200
    async with svc.db.connection() as conn:
        cur = await conn.execute("SELECT * FROM ledger.idempotency_keys")
        [row] = await cur.fetchall()
    assert TOKEN not in repr(row)
    assert row["token_fingerprint"] == idempotency.fingerprint_token(TOKEN)
    assert (row["method"], row["path"], row["idempotency_key"], row["status_code"]) == (
        "POST",
        "/v1/runs/r1/events",
        "k",
        200,
    )


async def test_an_expired_key_is_a_new_request(app: FastAPI, client: httpx.AsyncClient) -> None:
    svc = services(app)
    await svc.runlog.open_run("r1")
    assert (await append(client, "r1", "day one", "daily")).status_code == 200
    async with svc.db.transaction() as conn:
        await conn.execute("UPDATE ledger.idempotency_keys SET created_at = now() - interval '25 hours'")
    again = await append(client, "r1", "day one", "daily")
    assert again.status_code == 200 and "idempotent-replayed" not in again.headers
    assert await log_lines(svc.db, "r1") == ["day one", "day one"]
    # The expired row was replaced, not added to.
    assert await count(svc.db, "SELECT count(*) FROM ledger.idempotency_keys") == 1


# -- sweeping -----------------------------------------------------------------------------------------


async def store(db: Database, key: str, age: timedelta) -> None:
    scope = idempotency.IdempotencyScope(
        token_fingerprint=idempotency.fingerprint_token(TOKEN),
        method="POST",
        path="/v1/runs",
        key=key.encode(),
    )
    answer = idempotency.StoredAnswer(
        request_fingerprint=idempotency.fingerprint_body(b"{}"),
        status_code=200,
        content_type="application/json",
        body=b"{}",
    )
    async with db.transaction() as conn:
        await idempotency.store_answer(conn, scope, answer)
        await conn.execute(
            "UPDATE ledger.idempotency_keys SET created_at = now() - %s WHERE scope_digest = %s",
            (age, scope.digest),
        )


async def test_the_watchdog_sweeps_expired_keys_in_batches(db: Database, clean_database_url: str) -> None:
    for index in range(7):
        await store(db, f"old-{index}", timedelta(hours=24, minutes=index + 1))
    await store(db, "fresh", timedelta(hours=23))
    watchdog = Watchdog(db, sweep_batch_size=3)
    # A row another transaction holds is skipped, not waited for.
    async with await psycopg.AsyncConnection.connect(clean_database_url) as holder:
        await holder.execute(
            "SELECT 1 FROM ledger.idempotency_keys WHERE idempotency_key = 'old-0' FOR UPDATE"
        )
        swept = await watchdog.sweep()
        assert swept.idempotency_keys == 6
    async with db.connection() as conn:
        cur = await conn.execute("SELECT idempotency_key FROM ledger.idempotency_keys ORDER BY 1")
        assert [row["idempotency_key"] for row in await cur.fetchall()] == ["fresh", "old-0"]
    assert (await watchdog.sweep()).idempotency_keys == 1
    assert watchdog.swept_total.idempotency_keys == 7


async def test_sweeping_follows_the_watchdog_clock(db: Database) -> None:
    await store(db, "k", timedelta(0))
    clock = ManualClock(datetime.now(UTC))
    watchdog = Watchdog(db, clock=clock)
    clock.advance(23 * 3_600_000)
    assert (await watchdog.sweep()).idempotency_keys == 0
    clock.advance(2 * 3_600_000)
    assert (await watchdog.sweep()).idempotency_keys == 1
