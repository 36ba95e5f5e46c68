"""Streams on Postgres: create, append, read, close, delete, forks and idempotent producers.

Writes follow the run log's discipline: every write to a stream takes its row's lock first
(`SELECT … FOR UPDATE`), so positions are gapless and producer checks and the append they guard
commit together (a retried batch can never land twice). An append NOTIFYs on the run log's channel
under the key `/stream/<name>` (a run id never holds `/`), so the process's one LISTEN connection
wakes a stream's long-polls and SSE readers like a run's; readers always re-read.

Forks read their source below the fork position and their own rows from there on; a source
deleted while forks still read through it is kept (`deleted_at`) and collected with its last fork.
A stream whose TTL or expiry passed is gone: reads say 404 and the next write removes it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from psycopg.types.json import Jsonb

from ledger.db import Conn, Database, Row
from ledger.errors import StaleProducer, StreamConflict, StreamGone, StreamNotFound
from ledger.runlog.listener import CHANNEL, Listener
from ledger.streams.rules import (
    NOW,
    START,
    Producer,
    bad_request,
    format_offset,
    is_json,
    json_messages,
    media_type,
)

__all__ = [
    "AppendRequest",
    "Chunk",
    "CreateRequest",
    "Stream",
    "StreamStore",
]

# A read answers at most this many bytes (at least one whole append); the client reads on.
_MAX_READ_BYTES: Final = 1024 * 1024
_MAX_READ_ROWS: Final = 10_000
_DEFAULT_POLL_INTERVAL_S: Final = 1.0

_EXPIRED = """(s.expires_at IS NOT NULL AND s.expires_at <= now())
    OR (s.ttl_s IS NOT NULL AND s.touched_at + make_interval(secs => s.ttl_s) <= now())"""

_SELECT_SQL: Final = f"""
SELECT s.*, ({_EXPIRED}) AS expired,
       CASE WHEN s.ttl_s IS NOT NULL THEN s.touched_at + make_interval(secs => s.ttl_s)
            ELSE s.expires_at END AS expires,
       EXISTS (SELECT 1 FROM ledger.streams f WHERE f.forked_from = s.name) AS has_forks
FROM ledger.streams s WHERE s.name = %(name)s
"""
_LOCK_SQL: Final = _SELECT_SQL + " FOR UPDATE OF s"

_INSERT_SQL: Final = """
INSERT INTO ledger.streams
    (name, content_type, ttl_s, expires_at, forked_from, fork_offset, fork_sub_offset, tail)
VALUES (%(name)s, %(content_type)s, %(ttl_s)s, %(expires_at)s, %(forked_from)s, %(fork_offset)s,
        %(fork_sub_offset)s, %(tail)s)
ON CONFLICT (name) DO NOTHING
"""

_INSERT_DATA_SQL: Final = """
INSERT INTO ledger.stream_data (name, "offset", end_offset, payload)
SELECT %(name)s, o, e, p
FROM unnest(%(offsets)s::bigint[], %(ends)s::bigint[], %(payloads)s::bytea[]) AS t(o, e, p)
"""

_UPDATE_SQL: Final = """
UPDATE ledger.streams
SET tail = %(tail)s, closed = %(closed)s, closed_by = %(closed_by)s, producers = %(producers)s,
    last_stream_seq = %(last_stream_seq)s, touched_at = now()
WHERE name = %(name)s
"""

_NOTIFY_SQL: Final = "SELECT pg_notify(%(channel)s, %(payload)s)"

_TOUCH_SQL: Final = "UPDATE ledger.streams SET touched_at = now() WHERE name = %(name)s AND ttl_s IS NOT NULL"

# The rows covering positions from `pos` on, across a fork chain given as parallel arrays of
# segments (stream, from, to): per segment the row straddling the start (found by one backward
# index probe) and the rows after it; cut at `max_bytes` (always at least one row).
_READ_SQL: Final = """
WITH picked AS (
    SELECT d."offset", d.end_offset, d.payload, seg.lo, seg.hi
    FROM unnest(%(names)s::text[], %(los)s::bigint[], %(his)s::bigint[]) AS seg(name, lo, hi)
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT x."offset", x.end_offset, x.payload FROM ledger.stream_data x
            WHERE x.name = seg.name AND x."offset" < greatest(seg.lo, %(pos)s)
            ORDER BY x."offset" DESC LIMIT 1
        ) before WHERE before.end_offset > greatest(seg.lo, %(pos)s) AND before."offset" < seg.hi
        UNION ALL
        (SELECT x."offset", x.end_offset, x.payload FROM ledger.stream_data x
         WHERE x.name = seg.name AND x."offset" >= greatest(seg.lo, %(pos)s) AND x."offset" < seg.hi
         ORDER BY x."offset" LIMIT %(rows)s)
    ) d
), sized AS (
    SELECT *, sum(octet_length(payload)) OVER (ORDER BY "offset") - octet_length(payload) AS before
    FROM picked
)
SELECT "offset", end_offset, payload, lo, hi FROM sized
WHERE before < %(max_bytes)s OR "offset" = (SELECT min("offset") FROM picked)
ORDER BY "offset" LIMIT %(rows)s
"""


def _waiter_key(name: str) -> str:
    """The listener key of a stream's wake-ups; never a run id (run ids hold no `/`)."""
    return f"/stream/{name}"


@dataclass(frozen=True, kw_only=True)
class Stream:
    """A stream's metadata as stored."""

    name: str
    content_type: str
    ttl_s: int | None
    expires_at: datetime | None
    expires: datetime | None
    closed: bool
    closed_by: dict[str, Any] | None
    tail: int
    last_stream_seq: str | None
    producers: dict[str, dict[str, int]]
    forked_from: str | None
    fork_offset: int | None
    fork_sub_offset: int
    deleted: bool
    expired: bool
    has_forks: bool

    @property
    def json(self) -> bool:
        return is_json(self.content_type)

    @property
    def start(self) -> int:
        """The first position of this stream's own rows (a fork's begin at its fork position)."""
        return self.fork_offset or 0


def _stream(row: Row) -> Stream:
    return Stream(
        name=row["name"],
        content_type=row["content_type"],
        ttl_s=row["ttl_s"],
        expires_at=row["expires_at"],
        expires=row["expires"],
        closed=row["closed"],
        closed_by=row["closed_by"],
        tail=row["tail"],
        last_stream_seq=row["last_stream_seq"],
        producers=row["producers"],
        forked_from=row["forked_from"],
        fork_offset=row["fork_offset"],
        fork_sub_offset=row["fork_sub_offset"],
        deleted=row["deleted_at"] is not None,
        expired=row["expired"],
        has_forks=row["has_forks"],
    )


@dataclass(frozen=True, kw_only=True)
class CreateRequest:
    content_type: str | None
    ttl_s: int | None
    expires_at: datetime | None
    closed: bool
    body: bytes
    forked_from: str | None = None
    fork_offset: int | None = None
    fork_sub_offset: int = 0


@dataclass(frozen=True, kw_only=True)
class AppendRequest:
    content_type: str | None
    body: bytes
    close: bool
    producer: Producer | None
    stream_seq: str | None


@dataclass(frozen=True, kw_only=True)
class _AppendResult:
    """What an append did: `duplicate` (an idempotent producer's retry, nothing written)."""

    stream: Stream
    tail: int
    closed: bool
    duplicate: bool
    producer_epoch: int | None = None
    producer_seq: int | None = None


@dataclass(frozen=True, kw_only=True)
class Chunk:
    """A read: the stream, the payloads from the requested position, and where the next read starts."""

    stream: Stream
    start: int
    payloads: list[bytes]
    next: int

    @property
    def up_to_date(self) -> bool:
        return self.next >= self.stream.tail

    @property
    def at_closed_end(self) -> bool:
        return self.stream.closed and self.up_to_date


def _gone(name: str) -> StreamGone:
    return StreamGone(f"stream {name!r} was deleted (its forks still read it)")


def _not_found(name: str) -> StreamNotFound:
    return StreamNotFound(f"no stream {name!r}")


class StreamStore:
    """Durable Streams on one database; with a `listener`, waits are woken by NOTIFY."""

    def __init__(
        self,
        db: Database,
        *,
        listener: Listener | None = None,
        poll_interval_s: float = _DEFAULT_POLL_INTERVAL_S,
    ) -> None:
        self.db = db
        self.listener = listener
        self.poll_interval_s = poll_interval_s

    # -- metadata ---------------------------------------------------------------------------

    async def _get(self, conn: Conn, name: str, *, lock: bool = False) -> Stream | None:
        cur = await conn.execute(_LOCK_SQL if lock else _SELECT_SQL, {"name": name})
        row = await cur.fetchone()
        return _stream(row) if row is not None else None

    async def _live(self, conn: Conn, name: str, *, lock: bool = False) -> Stream:
        """The stream, or 404 (absent or expired) / 410 (deleted, kept for its forks)."""
        stream = await self._get(conn, name, lock=lock)
        if stream is None or stream.expired:
            if stream is not None and lock:
                await self._remove(conn, stream)
            raise _not_found(name)
        if stream.deleted:
            raise _gone(name)
        return stream

    async def head(self, name: str) -> Stream:
        async with self.db.connection() as conn:
            return await self._live(conn, name)

    # -- create, delete -----------------------------------------------------------------------

    async def create(self, name: str, request: CreateRequest) -> tuple[bool, Stream]:
        """Create the stream (True) or confirm an existing one with the same configuration (False)."""
        async with self.db.transaction() as conn:
            existing = await self._get(conn, name, lock=True)
            if existing is not None and existing.expired:
                await self._remove(conn, existing)
                existing = await self._get(conn, name, lock=True)
            if existing is not None:
                if existing.deleted:
                    raise StreamConflict(f"stream {name!r} was deleted and its name is still in use by forks")
                self._check_same_config(existing, request)
                return False, existing
            source = await self._fork_source(conn, request) if request.forked_from is not None else None
            content_type = request.content_type
            ttl_s, expires_at = request.ttl_s, request.expires_at
            fork_offset: int | None = None
            prefix: list[tuple[int, int, bytes]] = []
            if source is not None:
                if content_type is None:
                    content_type = source.content_type
                elif media_type(content_type) != media_type(source.content_type):
                    raise StreamConflict("Content-Type: differs from the fork source's")
                if ttl_s is None and expires_at is None:
                    ttl_s, expires_at = source.ttl_s, source.expires_at
                fork_offset = source.tail if request.fork_offset is None else request.fork_offset
                if fork_offset > source.tail:
                    raise bad_request("Stream-Fork-Offset: beyond the source's tail")
                if request.fork_sub_offset:
                    prefix = await self._sub_offset_prefix(conn, source, fork_offset, request.fork_sub_offset)
            content_type = content_type or "application/octet-stream"
            tail = fork_offset or 0
            cur = await conn.execute(
                _INSERT_SQL,
                {
                    "name": name,
                    "content_type": content_type,
                    "ttl_s": ttl_s,
                    "expires_at": expires_at,
                    "forked_from": source.name if source is not None else None,
                    "fork_offset": fork_offset,
                    "fork_sub_offset": request.fork_sub_offset,
                    "tail": tail,
                },
            )
            if cur.rowcount == 0:
                # A concurrent create won the race: compare with what it stored.
                raced = await self._live(conn, name, lock=True)
                self._check_same_config(raced, request)
                return False, raced
            if prefix:
                tail = await self._insert(conn, name, prefix)
            if request.body:
                payloads = (
                    json_messages(request.body, allow_empty=True) if is_json(content_type) else [request.body]
                )
                if payloads:
                    tail = await self._insert(conn, name, _rows(tail, payloads, is_json(content_type)))
            if tail != (fork_offset or 0) or request.closed:
                await conn.execute(
                    _UPDATE_SQL,
                    {
                        "name": name,
                        "tail": tail,
                        "closed": request.closed,
                        "closed_by": None,
                        "producers": Jsonb({}),
                        "last_stream_seq": None,
                    },
                )
            created = await self._get(conn, name)
            assert created is not None
            return True, created

    def _check_same_config(self, existing: Stream, request: CreateRequest) -> None:
        wanted_type = request.content_type or "application/octet-stream"
        if request.forked_from is not None:
            if existing.forked_from != request.forked_from:
                raise StreamConflict("the stream exists with another fork source")
            if request.fork_offset is not None and existing.fork_offset != request.fork_offset:
                raise StreamConflict("the stream exists with another Stream-Fork-Offset")
            if existing.fork_sub_offset != request.fork_sub_offset:
                raise StreamConflict("the stream exists with another Stream-Fork-Sub-Offset")
            if request.content_type is None:
                wanted_type = existing.content_type
        if media_type(existing.content_type) != media_type(wanted_type):
            raise StreamConflict("the stream exists with another Content-Type")
        if request.forked_from is not None and request.ttl_s is None and request.expires_at is None:
            return
        if existing.ttl_s != request.ttl_s or existing.expires_at != request.expires_at:
            raise StreamConflict("the stream exists with another Stream-TTL or Stream-Expires-At")

    async def _fork_source(self, conn: Conn, request: CreateRequest) -> Stream:
        assert request.forked_from is not None
        # Locked: its tail and rows must not move while the fork takes its position.
        source = await self._get(conn, request.forked_from, lock=True)
        if source is None or source.expired:
            raise StreamNotFound(f"Stream-Forked-From: no stream {request.forked_from!r}")
        if source.deleted:
            raise StreamConflict(f"Stream-Forked-From: stream {request.forked_from!r} was deleted")
        return source

    async def _sub_offset_prefix(
        self, conn: Conn, source: Stream, position: int, count: int
    ) -> list[tuple[int, int, bytes]]:
        """The first `count` units of the append at `position` (bytes, or JSON messages), copied
        into the fork: a fork inside an append owns its part of it."""
        rows = await self._rows(conn, source, position, _MAX_READ_BYTES)
        if not rows:
            raise bad_request("Stream-Fork-Sub-Offset: nothing is stored at Stream-Fork-Offset")
        if source.json:
            taken = rows[:count]
            if len(taken) < count or taken[-1][1] != position + count:
                raise bad_request("Stream-Fork-Sub-Offset: past the messages at Stream-Fork-Offset")
            return taken
        first_offset, first_end, payload = rows[0]
        if first_offset != position or position + count > first_end:
            raise bad_request("Stream-Fork-Sub-Offset: past the append at Stream-Fork-Offset")
        return [(position, position + count, payload[:count])]

    async def delete(self, name: str) -> None:
        async with self.db.transaction() as conn:
            stream = await self._live(conn, name, lock=True)
            await self._remove(conn, stream)
            await self._notify(conn, name, stream.tail)

    async def _remove(self, conn: Conn, stream: Stream) -> None:
        """Delete the stream, or keep it as deleted while forks read through it; then collect
        deleted sources up the chain that no fork needs any more."""
        if stream.has_forks:
            await conn.execute(
                "UPDATE ledger.streams SET deleted_at = now() WHERE name = %(name)s AND deleted_at IS NULL",
                {"name": stream.name},
            )
            return
        await conn.execute("DELETE FROM ledger.streams WHERE name = %(name)s", {"name": stream.name})
        parent = stream.forked_from
        while parent is not None:
            source = await self._get(conn, parent, lock=True)
            if source is None or not source.deleted or source.has_forks:
                return
            await conn.execute("DELETE FROM ledger.streams WHERE name = %(name)s", {"name": source.name})
            parent = source.forked_from

    # -- append -------------------------------------------------------------------------------

    async def append(self, name: str, request: AppendRequest) -> _AppendResult:
        async with self.db.transaction() as conn:
            stream = await self._live(conn, name, lock=True)
            producers = dict(stream.producers)
            producer = request.producer
            if producer is not None:
                state = producers.get(producer.id)
                if state is not None and producer.epoch < state["epoch"]:
                    raise StaleProducer(
                        f"Producer-Epoch: {producer.epoch} is stale (the producer is at {state['epoch']})",
                        {"Producer-Epoch": str(state["epoch"])},
                    )
                if state is None or producer.epoch > state["epoch"]:
                    if producer.seq != 0:
                        raise bad_request("Producer-Seq: a new producer epoch starts at 0")
                elif producer.seq <= state["seq"]:
                    return _AppendResult(
                        stream=stream,
                        tail=stream.tail,
                        closed=stream.closed,
                        duplicate=True,
                        producer_epoch=state["epoch"],
                        producer_seq=state["seq"],
                    )
                elif producer.seq > state["seq"] + 1:
                    raise StreamConflict(
                        f"Producer-Seq: expected {state['seq'] + 1}, got {producer.seq}",
                        {
                            "Producer-Expected-Seq": str(state["seq"] + 1),
                            "Producer-Received-Seq": str(producer.seq),
                        },
                    )
            if stream.closed:
                if not request.body and producer is None:
                    return _AppendResult(stream=stream, tail=stream.tail, closed=True, duplicate=True)
                raise StreamConflict(
                    f"stream {name!r} is closed",
                    {"Stream-Closed": "true", "Stream-Next-Offset": format_offset(stream.tail)},
                )
            payloads: list[bytes] = []
            if request.body:
                if request.content_type is None:
                    raise bad_request("Content-Type: required on an append")
                if media_type(request.content_type) != media_type(stream.content_type):
                    raise StreamConflict("Content-Type: differs from the stream's")
                payloads = json_messages(request.body, allow_empty=False) if stream.json else [request.body]
            last_stream_seq = stream.last_stream_seq
            if request.stream_seq is not None:
                if last_stream_seq is not None and request.stream_seq.encode() <= last_stream_seq.encode():
                    raise StreamConflict("Stream-Seq: not greater than the last one")
                last_stream_seq = request.stream_seq
            tail = stream.tail
            if payloads:
                tail = await self._insert(conn, name, _rows(tail, payloads, stream.json))
            if producer is not None:
                producers[producer.id] = {"epoch": producer.epoch, "seq": producer.seq}
            closed_by = producer.as_json() if request.close and producer is not None else None
            await conn.execute(
                _UPDATE_SQL,
                {
                    "name": name,
                    "tail": tail,
                    "closed": request.close,
                    "closed_by": Jsonb(closed_by) if closed_by is not None else None,
                    "producers": Jsonb(producers),
                    "last_stream_seq": last_stream_seq,
                },
            )
            await self._notify(conn, name, tail)
            return _AppendResult(
                stream=stream,
                tail=tail,
                closed=request.close,
                duplicate=False,
                producer_epoch=producer.epoch if producer is not None else None,
                producer_seq=producer.seq if producer is not None else None,
            )

    async def _insert(self, conn: Conn, name: str, rows: list[tuple[int, int, bytes]]) -> int:
        await conn.execute(
            _INSERT_DATA_SQL,
            {
                "name": name,
                "offsets": [r[0] for r in rows],
                "ends": [r[1] for r in rows],
                "payloads": [r[2] for r in rows],
            },
        )
        return rows[-1][1]

    async def _notify(self, conn: Conn, name: str, tail: int) -> None:
        payload = json.dumps({"run_id": _waiter_key(name), "seq": tail})
        await conn.execute(_NOTIFY_SQL, {"channel": CHANNEL, "payload": payload})

    # -- read ---------------------------------------------------------------------------------

    async def _chain(self, conn: Conn, stream: Stream) -> list[tuple[str, int, int]]:
        """The segments a read of `stream` covers: (stream, from, to) for it and each source."""
        segments: list[tuple[str, int, int]] = []
        current: Stream | None = stream
        upper = 2**62
        while current is not None:
            segments.append((current.name, current.start, upper))
            if current.forked_from is None:
                break
            upper = current.start
            current = await self._get(conn, current.forked_from)
        return segments

    async def _rows(
        self, conn: Conn, stream: Stream, position: int, max_bytes: int
    ) -> list[tuple[int, int, bytes]]:
        segments = await self._chain(conn, stream)
        cur = await conn.execute(
            _READ_SQL,
            {
                "names": [s[0] for s in segments],
                "los": [s[1] for s in segments],
                "his": [s[2] for s in segments],
                "pos": position,
                "rows": _MAX_READ_ROWS,
                "max_bytes": max_bytes,
            },
        )
        out: list[tuple[int, int, bytes]] = []
        for row in await cur.fetchall():
            offset, end, payload = row["offset"], row["end_offset"], bytes(row["payload"])
            lo, hi = max(row["lo"], position), row["hi"]
            if offset < lo or end > hi:
                # A row cut by the read's start or a fork position: only its part in range.
                start, stop = max(offset, lo), min(end, hi)
                payload = payload[start - offset : stop - offset]
                offset, end = start, stop
            out.append((offset, end, payload))
        return out

    async def read(self, name: str, offset: int | str, *, touch: bool = True) -> Chunk:
        """The payloads from `offset` (a position, `-1` or `now`) up to the read limit."""
        async with self.db.connection() as conn:
            stream = await self._live(conn, name)
            if touch and stream.ttl_s is not None:
                await conn.execute(_TOUCH_SQL, {"name": name})
            if offset == NOW:
                return Chunk(stream=stream, start=stream.tail, payloads=[], next=stream.tail)
            position = 0 if offset == START else int(offset)
            if position > stream.tail:
                raise bad_request("offset: beyond the stream's tail")
            if position == stream.tail:
                return Chunk(stream=stream, start=position, payloads=[], next=position)
            rows = await self._rows(conn, stream, position, _MAX_READ_BYTES)
        if not rows:
            return Chunk(stream=stream, start=position, payloads=[], next=stream.tail)
        return Chunk(stream=stream, start=position, payloads=[r[2] for r in rows], next=rows[-1][1])

    async def wait_read(self, name: str, offset: int | str, timeout_s: float) -> Chunk:
        """Like `read`, but waits up to `timeout_s` for data past `offset` (or the stream's close)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        waiter = self.listener.register(_waiter_key(name)) if self.listener is not None else None
        try:
            chunk = await self.read(name, offset)
            position = chunk.start
            while not chunk.payloads and not chunk.stream.closed:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                if waiter is not None:
                    await waiter.wait(remaining)
                else:
                    await asyncio.sleep(min(self.poll_interval_s, remaining))
                chunk = await self.read(name, position)
            return chunk
        finally:
            if waiter is not None:
                waiter.close()


def _rows(start: int, payloads: list[bytes], json_mode: bool) -> list[tuple[int, int, bytes]]:
    """Rows for `payloads` from position `start`: a JSON message is one position, a byte one byte."""
    rows: list[tuple[int, int, bytes]] = []
    position = start
    for payload in payloads:
        end = position + (1 if json_mode else len(payload))
        rows.append((position, end, payload))
        position = end
    return rows
