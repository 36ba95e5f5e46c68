"""Durable Streams at `/v1/stream/{name}`: the open protocol for resumable streams over HTTP.

PUT creates (or confirms), POST appends or closes, GET reads (catch-up, `live=long-poll`,
`live=sse`), HEAD answers metadata, DELETE deletes. Names may hold `/`. `runs/{run_id}` is every
run's event log as a read-only JSON stream (positions are seqs; the terminal event closes it).

Payloads are bytes and stored as they came (JSON mode re-serializes each message compactly); no
text repair. Protocol refusals (`ledger.errors.StreamRefused`) carry the protocol's headers, and
their status comes from the service's one table (`ledger.service.errors.status_for`); database
faults go to the app's handlers (503 with Retry-After) like everywhere else. What each operation
takes and answers, for the OpenAPI document, is stated in `ledger.service.stream_docs`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import zlib
from collections.abc import AsyncIterator, Coroutine
from typing import Annotated, Any, Final
from urllib.parse import quote, unquote_to_bytes

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledger.errors import CursorExpired, LedgerFailure, NotFound, ReadOnlyStream, StreamRefused
from ledger.service import stream_docs
from ledger.service.errors import error_body, status_for
from ledger.service.security import require_token
from ledger.service.state import Services, services
from ledger.streams import rules
from ledger.streams.rules import NOW, START, bad_request, format_offset
from ledger.streams.runs import RUNS_PREFIX, RunStreams
from ledger.streams.store import AppendRequest, Chunk, CreateRequest, Stream, StreamStore
from ledger.validate import DOT_SEGMENTS

__all__ = [
    "PREFIX",
    "StreamHeadersMiddleware",
    "router",
]

PREFIX: Final = "/v1/stream/"

router = APIRouter(prefix="/v1/stream", tags=["streams"], dependencies=[Depends(require_token)])
_Svc = Annotated[Services, Depends(services)]

_EXPOSED: Final = (
    "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, Stream-TTL, "
    "Stream-Expires-At, Stream-SSE-Data-Encoding, ETag, Location, Producer-Epoch, Producer-Seq, "
    "Producer-Expected-Seq, Producer-Received-Seq"
)
_ALLOWED_HEADERS: Final = (
    "Authorization, Content-Type, If-None-Match, Stream-TTL, Stream-Expires-At, Stream-Seq, "
    "Stream-Closed, Stream-Forked-From, Stream-Fork-Offset, Stream-Fork-Sub-Offset, Producer-Id, "
    "Producer-Epoch, Producer-Seq"
)
# On every answer under the prefix, errors included: no MIME sniffing, readable cross-origin.
_SECURITY_HEADERS: Final = (
    (b"x-content-type-options", b"nosniff"),
    (b"cross-origin-resource-policy", b"cross-origin"),
    (b"access-control-allow-origin", b"*"),
    (b"access-control-expose-headers", _EXPOSED.encode()),
)
_CACHEABLE: Final = "private, max-age=60, stale-while-revalidate=300"
# How much of a refused upload is read before answering; past it the connection is just closed.
_MAX_DRAIN_BYTES: Final = 64 * 1024 * 1024
_DRAIN_TIMEOUT_S: Final = 30.0


class StreamHeadersMiddleware:
    """Security and CORS headers on every answer under `/v1/stream/`, and CORS preflights
    (OPTIONS, which carry no token) answered here."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS":
            await send(
                {
                    "type": "http.response.start",
                    "status": 204,
                    "headers": [
                        *_SECURITY_HEADERS,
                        (b"access-control-allow-methods", b"GET, HEAD, PUT, POST, DELETE, OPTIONS"),
                        (b"access-control-allow-headers", _ALLOWED_HEADERS.encode()),
                        (b"access-control-max-age", b"600"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return

        has_body = any(
            name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0")
            for name, value in scope["headers"]
        )
        body_read = not has_body

        async def receive_noting_the_end() -> Message:
            nonlocal body_read
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_read = True
            return message

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                if not body_read:
                    await _drain(receive_noting_the_end)
                message = {**message, "headers": [*message.get("headers", []), *_SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive_noting_the_end, send_with_headers)


async def _drain(receive: Receive) -> None:
    """Read (and drop) what is left of a request body before answering it, up to a bound.

    An answer given early (413 for a declared length over the limit) would otherwise reach a client
    still uploading as a reset connection: fetch sends the whole body before it reads the answer.
    """
    left = _MAX_DRAIN_BYTES
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_DRAIN_TIMEOUT_S):
            while left > 0:
                message = await receive()
                if message["type"] != "http.request" or not message.get("more_body", False):
                    return
                left -= len(message.get("body", b""))


# -- answers ---------------------------------------------------------------------------------


def _refused(exc: StreamRefused | CursorExpired | NotFound) -> Response:
    status = status_for(exc)
    body = json.dumps(error_body(status, exc.message)).encode()
    headers = exc.headers if isinstance(exc, StreamRefused) else {}
    return Response(body, status, headers={**headers, "content-type": "application/json"})


async def _answer(work: Coroutine[Any, Any, Response]) -> Response:
    """Run an endpoint's work; a protocol refusal (or an expired cursor, a run that does not
    exist) becomes its 4xx with the protocol's headers."""
    try:
        return await work
    except (StreamRefused, CursorExpired, NotFound) as exc:
        return _refused(exc)


def _meta_headers(stream: Stream) -> dict[str, str]:
    headers = {"content-type": stream.content_type, "Stream-Next-Offset": format_offset(stream.tail)}
    if stream.closed:
        headers["Stream-Closed"] = "true"
    return headers


def _header(request: Request, name: str) -> str | None:
    values = request.headers.getlist(name)
    if len(values) > 1:
        raise bad_request(f"{name}: send it once")
    return values[0] if values else None


def _store(svc: Services) -> StreamStore:
    return StreamStore(svc.db, listener=svc.listener)


def _run_id(name: str) -> str | None:
    return name[len(RUNS_PREFIX) :] if name.startswith(RUNS_PREFIX) else None


def _read_only(name: str) -> ReadOnlyStream:
    return ReadOnlyStream(f"stream {name!r} is a run's event log: read-only", {"Allow": "GET, HEAD"})


def _fork_source(raw: str) -> str:
    """The source's name from `Stream-Forked-From` (its path or URL under `/v1/stream/`,
    percent-encoded as in a request path or a `Location`)."""
    value = raw.strip()
    at = value.find(PREFIX)
    if at >= 0:
        value = value[at + len(PREFIX) :]
    value = value.split("?", 1)[0]
    if not value:
        raise bad_request("Stream-Forked-From: names no stream")
    try:
        return unquote_to_bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise bad_request("Stream-Forked-From: must be UTF-8 once percent-decoded") from None


def _stream_name(request: Request, name: str) -> str:
    """The stream's name, checked: its bytes as percent-decoded from the raw path (`name`, the
    router's copy, has bytes that are not UTF-8 silently replaced), which must be UTF-8."""
    raw = request.scope.get("raw_path")
    if isinstance(raw, bytes):
        # Servers differ on whether the raw path holds the root path (behind a proxy's prefix).
        root = str(request.scope.get("root_path", "")).encode("utf-8", "surrogateescape")
        if root and raw.startswith(root + PREFIX.encode()):
            raw = raw[len(root) :]
        if raw.startswith(PREFIX.encode()):
            try:
                name = unquote_to_bytes(raw[len(PREFIX) :]).decode("utf-8")
            except UnicodeDecodeError:
                raise bad_request("stream name: must be UTF-8 once percent-decoded") from None
    return _check_name(name)


def _location(request: Request, name: str) -> str:
    """The stream's URL, percent-encoded: a header carries bytes of one byte per character, and a
    name may hold any character (`?` and `#` included). A segment of the name that is ``.`` or
    ``..`` is encoded too (``%2E``): a client removes such segments from a URL, and the URL would
    name another stream."""
    path = "/".join(
        "%2E" * len(segment) if segment in DOT_SEGMENTS else quote(segment, safe="")
        for segment in name.split("/")
    )
    return f"{str(request.base_url).rstrip('/')}{PREFIX}{path}"


def _check_name(name: str) -> str:
    if not name or len(name.encode()) > rules.MAX_NAME_BYTES:
        raise bad_request(f"stream name: 1 to {rules.MAX_NAME_BYTES} bytes")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise bad_request("stream name: must not contain control characters")
    return name


# -- create, append, delete, head ------------------------------------------------------------


@router.put(
    "/{name:path}",
    summary="Create a stream (200 if it exists with the same configuration)",
    response_class=Response,
    **stream_docs.CREATE_DOC,
)
async def create_stream(request: Request, svc: _Svc) -> Response:
    return await _answer(_create(request.path_params["name"], request, svc))


async def _create(name: str, request: Request, svc: _Svc) -> Response:
    name = _stream_name(request, name)
    if _run_id(name) is not None:
        raise _read_only(name)
    ttl_raw, expires_raw = _header(request, "Stream-TTL"), _header(request, "Stream-Expires-At")
    if ttl_raw is not None and expires_raw is not None:
        raise bad_request("Stream-TTL and Stream-Expires-At: send one, not both")
    forked_raw = _header(request, "Stream-Forked-From")
    offset_raw = _header(request, "Stream-Fork-Offset")
    sub_raw = _header(request, "Stream-Fork-Sub-Offset")
    if forked_raw is None and (offset_raw is not None or sub_raw is not None):
        raise bad_request("Stream-Fork-Offset, Stream-Fork-Sub-Offset: only with Stream-Forked-From")
    fork_offset: int | None = None
    if offset_raw is not None:
        parsed = rules.parse_offset(offset_raw.strip(), "Stream-Fork-Offset")
        if not isinstance(parsed, int):
            raise bad_request("Stream-Fork-Offset: must be an offset, not -1 or now")
        fork_offset = parsed
    sub_offset = rules.parse_decimal("Stream-Fork-Sub-Offset", sub_raw) if sub_raw is not None else 0
    if sub_offset and fork_offset is None:
        raise bad_request("Stream-Fork-Sub-Offset: needs Stream-Fork-Offset")
    create = CreateRequest(
        content_type=_header(request, "content-type"),
        ttl_s=rules.parse_decimal("Stream-TTL", ttl_raw) if ttl_raw is not None else None,
        expires_at=rules.parse_expires_at(expires_raw) if expires_raw is not None else None,
        closed=rules.parse_bool_header("Stream-Closed", _header(request, "Stream-Closed")),
        body=await request.body(),
        forked_from=_fork_source(forked_raw) if forked_raw is not None else None,
        fork_offset=fork_offset,
        fork_sub_offset=sub_offset,
    )
    created, stream = await _store(svc).create(name, create)
    headers = _meta_headers(stream)
    if created:
        headers["Location"] = _location(request, name)
    return Response(status_code=201 if created else 200, headers=headers)


@router.post(
    "/{name:path}",
    summary="Append to a stream; Stream-Closed: true closes it",
    response_class=Response,
    **stream_docs.APPEND_DOC,
)
async def append_stream(request: Request, svc: _Svc) -> Response:
    return await _answer(_append(request.path_params["name"], request, svc))


async def _append(name: str, request: Request, svc: _Svc) -> Response:
    name = _stream_name(request, name)
    if _run_id(name) is not None:
        raise _read_only(name)
    body = await request.body()
    close = rules.parse_bool_header("Stream-Closed", _header(request, "Stream-Closed"))
    producer = rules.parse_producer(
        _header(request, "Producer-Id"), _header(request, "Producer-Epoch"), _header(request, "Producer-Seq")
    )
    if not body and not close:
        raise bad_request("body: an append needs bytes (or Stream-Closed: true to close)")
    result = await _store(svc).append(
        name,
        AppendRequest(
            content_type=_header(request, "content-type"),
            body=body,
            close=close,
            producer=producer,
            stream_seq=_header(request, "Stream-Seq"),
        ),
    )
    headers = {"Stream-Next-Offset": format_offset(result.tail)}
    if result.closed:
        headers["Stream-Closed"] = "true"
    if result.producer_epoch is not None:
        headers["Producer-Epoch"] = str(result.producer_epoch)
        headers["Producer-Seq"] = str(result.producer_seq)
    # A producer's new batch is 200 (204 for a duplicate, or a close that appends nothing).
    status = 200 if producer is not None and not result.duplicate and body else 204
    return Response(status_code=status, headers=headers)


@router.delete(
    "/{name:path}",
    status_code=204,
    summary="Delete a stream",
    response_class=Response,
    **stream_docs.DELETE_DOC,
)
async def delete_stream(request: Request, svc: _Svc) -> Response:
    return await _answer(_delete(request.path_params["name"], request, svc))


async def _delete(name: str, request: Request, svc: _Svc) -> Response:
    name = _stream_name(request, name)
    if _run_id(name) is not None:
        raise _read_only(name)
    await _store(svc).delete(name)
    return Response(status_code=204)


@router.head(
    "/{name:path}",
    summary="A stream's metadata: content type, tail offset, TTL, closed",
    response_class=Response,
    **stream_docs.HEAD_DOC,
)
async def head_stream(request: Request, svc: _Svc) -> Response:
    return await _answer(_head(request.path_params["name"], request, svc))


async def _head(name: str, request: Request, svc: _Svc) -> Response:
    name = _stream_name(request, name)
    run_id = _run_id(name)
    stream = await (RunStreams(svc.runlog).head(run_id) if run_id is not None else _store(svc).head(name))
    headers = {**_meta_headers(stream), "Cache-Control": "no-store"}
    if stream.ttl_s is not None:
        headers["Stream-TTL"] = str(stream.ttl_s)
    if stream.expires is not None:
        headers["Stream-Expires-At"] = stream.expires.isoformat().replace("+00:00", "Z")
    return Response(status_code=200, headers=headers)


# -- read ------------------------------------------------------------------------------------


@router.get(
    "/{name:path}",
    summary="Read from an offset: catch-up, live=long-poll (204 on timeout) or live=sse",
    response_class=Response,
    **stream_docs.READ_DOC,
)
async def read_stream(request: Request, svc: _Svc) -> Response:
    return await _answer(_read(request.path_params["name"], request, svc))


class _Reader:
    """Reads of one stream: a stored stream or a run's events."""

    def __init__(self, svc: Services, name: str) -> None:
        self.name = name
        self.run_id = _run_id(name)
        self.store = _store(svc)
        self.runs = RunStreams(svc.runlog)

    async def read(self, offset: int | str) -> Chunk:
        if self.run_id is not None:
            return await self.runs.read(self.run_id, offset, 0)
        return await self.store.read(self.name, offset)

    async def wait(self, offset: int | str, timeout_s: float) -> Chunk:
        if self.run_id is not None:
            return await self.runs.read(self.run_id, offset, timeout_s)
        return await self.store.wait_read(self.name, offset, timeout_s)


def _body(chunk: Chunk) -> bytes:
    return rules.json_array(chunk.payloads) if chunk.stream.json else b"".join(chunk.payloads)


def _chunk_headers(chunk: Chunk) -> dict[str, str]:
    headers = {"content-type": chunk.stream.content_type, "Stream-Next-Offset": format_offset(chunk.next)}
    if chunk.up_to_date:
        headers["Stream-Up-To-Date"] = "true"
    if chunk.at_closed_end:
        headers["Stream-Closed"] = "true"
    return headers


async def _read(name: str, request: Request, svc: _Svc) -> Response:
    name = _stream_name(request, name)
    offsets = request.query_params.getlist("offset")
    if len(offsets) > 1:
        raise bad_request("offset: send it once")
    live = request.query_params.get("live")
    if live not in (None, "long-poll", "sse"):
        raise bad_request("live: must be long-poll or sse")
    if live is not None and not offsets:
        raise bad_request(f"offset: required with live={live}")
    offset: int | str = START
    if offsets:
        if not offsets[0]:
            raise bad_request("offset: must not be empty")
        offset = rules.parse_offset(offsets[0])
    reader = _Reader(svc, name)
    cursor = request.query_params.get("cursor")
    if live == "sse":
        return await _sse(reader, svc, offset, cursor)
    if live == "long-poll":
        chunk = await reader.read(offset)
        if not chunk.payloads and not chunk.stream.closed:
            start = chunk.next if offset == NOW else offset
            finished, waited = await svc.drain.race(reader.wait(start, svc.settings.stream_long_poll_s))
            chunk = waited if finished and waited is not None else await reader.read(start)
        headers = {**_chunk_headers(chunk), "Stream-Cursor": rules.cursor_for(time.time(), cursor)}
        if not chunk.payloads:
            headers["Stream-Up-To-Date"] = "true"
            headers.pop("content-type")
            return Response(status_code=204, headers=headers)
        return Response(_body(chunk), 200, headers={**headers, "Cache-Control": _CACHEABLE})
    chunk = await reader.read(offset)
    body = _body(chunk)
    headers = _chunk_headers(chunk)
    if offset == NOW:
        headers["Cache-Control"] = "no-store"
        return Response(body, 200, headers=headers)
    etag = f'"{chunk.start}-{chunk.next}-{zlib.crc32(body):08x}{"-c" if chunk.at_closed_end else ""}"'
    headers["ETag"] = etag
    headers["Cache-Control"] = "no-store" if chunk.up_to_date else _CACHEABLE
    if etag in [v.strip() for v in request.headers.get("if-none-match", "").split(",")]:
        return Response(
            status_code=304, headers={"ETag": etag, "Stream-Next-Offset": headers["Stream-Next-Offset"]}
        )
    return Response(body, 200, headers=headers)


async def _sse(reader: _Reader, svc: Services, offset: int | str, cursor: str | None) -> Response:
    first = await reader.read(offset)
    textual = rules.is_textual(first.stream.content_type)
    headers = {
        "content-type": "text/event-stream",
        "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",
    }
    if not textual:
        headers["Stream-SSE-Data-Encoding"] = "base64"
    return StreamingResponse(_sse_events(reader, svc, first, textual, cursor), headers=headers)


async def _sse_events(
    reader: _Reader, svc: Services, chunk: Chunk, textual: bool, cursor: str | None
) -> AsyncIterator[str]:
    """Data events, each with its control event in the same write (a reader that stops at the
    end of an event must never see one without the other); a control event also when the reader
    reaches the tail, a comment while idle, and the end after the closed stream's last control."""
    deadline = time.monotonic() + svc.settings.stream_sse_max_s
    keepalive_s = svc.settings.sse_keepalive_s
    announced = False  # the current tail was already announced with upToDate
    try:
        while True:
            if chunk.payloads or not announced or chunk.at_closed_end:
                data = rules.sse_data(_body(chunk), textual) if chunk.payloads else ""
                control: dict[str, object] = {"streamNextOffset": format_offset(chunk.next)}
                if chunk.at_closed_end:
                    control["streamClosed"] = True
                    yield data + rules.sse_control(control)
                    return
                cursor = rules.cursor_for(time.time(), cursor)
                control["streamCursor"] = cursor
                if chunk.up_to_date:
                    control["upToDate"] = True
                yield data + rules.sse_control(control)
                announced = chunk.up_to_date
            if not chunk.up_to_date:
                chunk = await reader.read(chunk.next)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            finished, waited = await svc.drain.race(reader.wait(chunk.next, min(keepalive_s, remaining)))
            if not finished or waited is None:
                return
            if not waited.payloads and not waited.stream.closed:
                yield ": keep-alive\n\n"
            chunk = waited
    except LedgerFailure:
        # The status line is gone; end the stream: the reconnect gets the proper answer.
        return
