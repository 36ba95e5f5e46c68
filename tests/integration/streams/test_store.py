"""StreamStore on real Postgres: gapless positions under concurrent appenders on separate
connections, producer retries landing once, expiry, fork collection, and waits woken by NOTIFY."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from ledger.db import Database
from ledger.errors import StaleProducer, StreamGone, StreamNotFound
from ledger.runlog.listener import Listener
from ledger.streams.rules import START, Producer
from ledger.streams.store import AppendRequest, CreateRequest, StreamStore

WRITERS = 8
APPENDS_EACH = 40


def create(content_type: str = "application/octet-stream", **kwargs: object) -> CreateRequest:
    fields: dict[str, object] = {"ttl_s": None, "expires_at": None, "closed": False, "body": b""}
    fields.update(kwargs)
    return CreateRequest(content_type=content_type, **fields)  # type: ignore[arg-type]


def append(body: bytes, producer: Producer | None = None) -> AppendRequest:
    return AppendRequest(
        content_type="application/octet-stream", body=body, close=False, producer=producer, stream_seq=None
    )


async def stored_rows(url: str, name: str) -> list[tuple[int, int, bytes]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            'SELECT "offset", end_offset, payload FROM ledger.stream_data WHERE name = %s ORDER BY "offset"',
            (name,),
        )
        return [(r[0], r[1], bytes(r[2])) for r in await cur.fetchall()]


@pytest.fixture
async def listener(clean_database_url: str) -> AsyncIterator[Listener]:
    async with Listener(clean_database_url, fallback_poll_s=0.2, keepalive_s=1.0) as listening:
        yield listening


async def test_concurrent_appenders_get_gapless_positions(clean_database_url: str) -> None:
    async with Database(clean_database_url, min_size=WRITERS, max_size=WRITERS) as db:
        store = StreamStore(db)
        await store.create("hot", create())

        async def writer(index: int) -> None:
            for i in range(APPENDS_EACH):
                # Different lengths, so a lost or doubled append shows in the positions.
                await store.append("hot", append(f"w{index}-{i};".encode() * (1 + i % 3)))

        await asyncio.gather(*(writer(w) for w in range(WRITERS)))
        rows = await stored_rows(clean_database_url, "hot")
        assert len(rows) == WRITERS * APPENDS_EACH
        position = 0
        for offset, end, payload in rows:
            assert offset == position
            assert end == offset + len(payload)
            position = end
        assert (await store.head("hot")).tail == position
        # Each writer's appends landed in its own order.
        for w in range(WRITERS):
            mine = [p for _, _, p in rows if p.startswith(f"w{w}-".encode())]
            assert [int(p.split(b";")[0].split(b"-")[1]) for p in mine] == list(range(APPENDS_EACH))


async def test_concurrent_retries_of_one_producer_batch_land_once(clean_database_url: str) -> None:
    async with Database(clean_database_url, min_size=WRITERS, max_size=WRITERS) as db:
        store = StreamStore(db)
        await store.create("retried", create())
        batch = Producer("p", 0, 0)
        results = await asyncio.gather(
            *(store.append("retried", append(b"once", batch)) for _ in range(WRITERS))
        )
        assert sum(not r.duplicate for r in results) == 1
        assert all(r.producer_seq == 0 for r in results)
        assert await stored_rows(clean_database_url, "retried") == [(0, 4, b"once")]


async def test_a_stale_epoch_is_refused_and_writes_nothing(db: Database, clean_database_url: str) -> None:
    store = StreamStore(db)
    await store.create("fenced", create())
    await store.append("fenced", append(b"a", Producer("p", 1, 0)))
    with pytest.raises(StaleProducer) as refused:
        await store.append("fenced", append(b"zombie", Producer("p", 0, 5)))
    assert refused.value.headers["Producer-Epoch"] == "1"
    assert await stored_rows(clean_database_url, "fenced") == [(0, 1, b"a")]


async def test_an_expired_stream_is_gone_and_its_name_free(db: Database) -> None:
    store = StreamStore(db)
    past = datetime.now(UTC) - timedelta(seconds=1)
    await store.create("old", create(expires_at=past))
    with pytest.raises(StreamNotFound):
        await store.head("old")
    created, stream = await store.create("old", create("text/plain"))
    assert created and stream.content_type == "text/plain"


async def test_a_deleted_source_is_kept_for_its_fork_and_collected_with_it(
    db: Database, clean_database_url: str
) -> None:
    store = StreamStore(db)
    await store.create("src", create(body=b"inherited"))
    await store.create("fork", create(forked_from="src"))
    await store.append("fork", append(b"+own"))
    await store.delete("src")
    with pytest.raises(StreamGone):
        await store.read("src", START)
    assert b"".join((await store.read("fork", START)).payloads) == b"inherited+own"
    await store.delete("fork")
    async with await psycopg.AsyncConnection.connect(clean_database_url) as conn:
        cur = await conn.execute("SELECT count(*) FROM ledger.streams")
        assert (await cur.fetchone()) == (0,)
        cur = await conn.execute("SELECT count(*) FROM ledger.stream_data")
        assert (await cur.fetchone()) == (0,)


async def test_a_wait_is_woken_by_an_append_through_the_listener(db: Database, listener: Listener) -> None:
    store = StreamStore(db, listener=listener, poll_interval_s=60)
    await store.create("tail", create(body=b"x"))
    waiting = asyncio.create_task(store.wait_read("tail", 1, 30))
    while listener.waiter_count == 0:  # noqa: ASYNC110 - a counter, not an event
        await asyncio.sleep(0.01)
    notifications = listener.notifications
    await StreamStore(db).append("tail", append(b"y"))
    chunk = await asyncio.wait_for(waiting, 30)
    assert chunk.payloads == [b"y"]
    assert listener.notifications > notifications
