"""`Idempotency-Key` on every POST and PUT: a retried write is answered, not applied again.

A POST or PUT that carries the header and a bearer token runs inside one shared database
transaction (`Database.shared_transaction`; the SQL is `ledger.idempotency`):

- the request's scope (token fingerprint, method, path, key) is locked first, so a concurrent
  duplicate waits here for the first one to finish;
- the caller is authorized first, exactly as the route will (`security.refusal_answer`): a token
  that is invalid, expired or outside its scope gets its 401 or 403 and never learns whether the
  key was used;
- a stored answer younger than 24 hours is replayed (`Idempotent-Replayed: true`), with its
  protocol headers (`Location`, `Stream-*`, `Producer-*`), when the request is the same (equal
  canonical JSON, or bytes and `Content-Type` for a body that is not JSON; and the same
  `Stream-*` and `Producer-*` headers, which change a write), and nothing is written; a different
  request is refused with 422 naming `Idempotency-Key`;
- otherwise the endpoint runs, its writes joining the transaction, and its answer is stored with
  them when it is a 2xx or a 4xx (a 4xx says the request itself is wrong: the same request gets
  it again). 5xx answers are never stored: the transaction rolls back, writes and all, and a retry
  runs afresh. A 401 or 403 is not stored either (the token was not accepted, or not for this
  request: a caller outside its scope writes nothing, not even an answer), nor an answer marked
  `Cache-Control: no-store` (it holds a secret, e.g. a minted token).

The answer is sent only after the commit: a client never holds an answer the ledger could lose.
Everything else (other methods, no header, no bearer token, before the service has started)
passes through untouched; streaming endpoints are GETs and never buffered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledger import idempotency
from ledger.db import Database
from ledger.service.errors import RETRY_AFTER_S, UNAVAILABLE_ERRORS, unavailable_code, unavailable_message
from ledger.service.metrics import ServiceMetrics
from ledger.service.middleware import read_body, replaying, send_json_error
from ledger.service.security import refusal_answer

__all__ = [
    "IdempotencyMiddleware",
    "key_problem",
]

_log = logging.getLogger("ledger.service.idempotency")

_HEADER: Final = "Idempotency-Key"
_MAX_KEY_BYTES: Final = 1024
_METHODS: Final = frozenset({"POST", "PUT"})
_HEADER_NAME: Final = _HEADER.lower().encode()
# Headers that change what a write does (a stream's content type, closing it, a producer's epoch
# and seq, ...): part of the request's fingerprint. The same prefixes name the answer headers
# that are part of the answer (a stream's next offset, ...), kept and given again with it.
_PROTOCOL_PREFIXES: Final = (b"stream-", b"producer-")
_ANSWER_HEADERS: Final = frozenset({b"location"})


def _request_headers(scope: Scope) -> list[tuple[str, str]]:
    """The request's headers that change what it writes (names in lower case), for its fingerprint:
    its content type and the protocol's."""
    return [
        (name.decode("latin-1"), value.decode("latin-1").strip())
        for name, value in scope["headers"]
        if name == b"content-type" or name.startswith(_PROTOCOL_PREFIXES)
    ]


def _is_json_body(scope: Scope) -> bool:
    """Whether the body is read as JSON (no content type, or a JSON one): fingerprinted by its
    meaning; any other body by its bytes (a stream's payload is bytes, `{"a": 1}` included)."""
    name: bytes
    value: bytes
    for name, value in scope["headers"]:
        if name == b"content-type":
            media = value.partition(b";")[0].strip().lower()
            return media == b"application/json" or (
                media.startswith(b"application/") and media.endswith(b"+json")
            )
    return True


class _Discard(Exception):
    """Roll the shared transaction back: the answer is not to be stored."""


def key_problem(values: list[bytes]) -> str | None:
    """Why the request's Idempotency-Key header values are not one usable key, or None."""
    if len(values) > 1:
        return f"{_HEADER}: send it once"
    key = values[0].strip()
    if not key:
        return f"{_HEADER}: must not be empty"
    if len(key) > _MAX_KEY_BYTES:
        return f"{_HEADER}: must be at most {_MAX_KEY_BYTES} bytes"
    if any(byte < 0x20 or byte == 0x7F for byte in key):
        return f"{_HEADER}: must not contain control characters"
    return None


def _bearer_token(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None


@dataclass(kw_only=True)
class _Captured:
    """The endpoint's answer, held back until the transaction has committed."""

    status: int | None = None
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)
    complete: bool = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            self.headers = list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            self.chunks.append(message.get("body", b""))
            self.complete = not message.get("more_body", False)

    @property
    def storable(self) -> bool:
        return (
            self.complete
            and self.status is not None
            and 200 <= self.status < 500
            and self.status not in (401, 403)
            and not self.no_store
        )

    @property
    def no_store(self) -> bool:
        return any(
            name.lower() == b"cache-control" and b"no-store" in value.lower() for name, value in self.headers
        )

    @property
    def protocol_headers(self) -> tuple[tuple[str, str], ...]:
        return tuple(
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in self.headers
            if name.lower() in _ANSWER_HEADERS or name.lower().startswith(_PROTOCOL_PREFIXES)
        )

    @property
    def content_type(self) -> str:
        for name, value in self.headers:
            if name.lower() == b"content-type":
                return value.decode("latin-1")
        return "application/octet-stream"

    async def forward(self, send: Send) -> None:
        assert self.status is not None
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": b"".join(self.chunks)})


async def _send_stored(send: Send, stored: idempotency.StoredAnswer) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": stored.status_code,
            "headers": [
                (b"content-type", stored.content_type.encode("latin-1", "replace")),
                (b"content-length", str(len(stored.body)).encode()),
                *((name.encode("latin-1"), value.encode("latin-1")) for name, value in stored.headers),
                (b"idempotent-replayed", b"true"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": stored.body})


class IdempotencyMiddleware:
    """Honour `Idempotency-Key` on POST and PUT (see the module docstring).

    `database` finds the service's `Database` for a request (None before the lifespan started).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        database: Callable[[Scope], Database | None],
        metrics: ServiceMetrics | None = None,
    ) -> None:
        self.app = app
        self.database = database
        self.metrics = metrics

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.idempotency.labels(outcome).inc()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _METHODS:
            await self.app(scope, receive, send)
            return
        values = [value for name, value in scope["headers"] if name == _HEADER_NAME]
        if not values:
            await self.app(scope, receive, send)
            return
        problem = key_problem(values)
        if problem is not None:
            await send_json_error(send, 422, problem)
            return
        token = _bearer_token(scope)
        db = self.database(scope)
        if token is None or db is None:
            # No token: the endpoint answers 401, and there is no scope to keep an answer in.
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        if body is None:
            return
        # Authorized before any answer is looked up: a caller the route would refuse gets that
        # refusal, never a stored answer nor a word on whether the key was used.
        refused = await refusal_answer(scope, replaying(body, receive))
        if refused is not None:
            await refused(scope, receive, send)
            return
        key_scope = idempotency.IdempotencyScope(
            token_fingerprint=idempotency.fingerprint_token(token),
            method=scope["method"],
            path=scope["path"],
            key=values[0].strip(),
        )
        await self._serve(scope, receive, send, db, key_scope, body)

    async def _serve(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        db: Database,
        key_scope: idempotency.IdempotencyScope,
        body: bytes,
    ) -> None:
        request_fingerprint = idempotency.fingerprint_body(
            body, _request_headers(scope), as_json=_is_json_body(scope)
        )
        captured = _Captured()
        stored: idempotency.StoredAnswer | None = None
        try:
            async with db.shared_transaction() as conn:
                await idempotency.lock_scope(conn, key_scope)
                stored = await idempotency.find_answer(conn, key_scope)
                if stored is None:
                    await self.app(scope, replaying(body, receive), captured.send)
                    if not captured.storable:
                        raise _Discard
                    await idempotency.store_answer(
                        conn,
                        key_scope,
                        idempotency.StoredAnswer(
                            request_fingerprint=request_fingerprint,
                            status_code=captured.status or 0,
                            content_type=captured.content_type,
                            body=b"".join(captured.chunks),
                            headers=captured.protocol_headers,
                        ),
                    )
        except _Discard:
            self._count("not_stored")
            if captured.status is not None:
                await captured.forward(send)
            return
        except UNAVAILABLE_ERRORS as exc:
            if captured.complete and captured.status is not None and captured.status >= 500:
                # The endpoint's own 503 (its database went away); the rollback failed with it.
                self._count("not_stored")
                await captured.forward(send)
                return
            _log.warning(
                "database unavailable for an idempotent request: %s",
                unavailable_message(exc),
                extra={"method": key_scope.method, "path": key_scope.path},
            )
            self._count("unavailable")
            await send_json_error(
                send,
                503,
                unavailable_message(exc),
                code=unavailable_code(exc),
                headers=[(b"retry-after", str(RETRY_AFTER_S).encode())],
            )
            return
        if stored is None:
            self._count("stored")
            await captured.forward(send)
        elif stored.request_fingerprint != request_fingerprint:
            self._count("mismatch")
            await send_json_error(
                send,
                422,
                f"{_HEADER}: this key was used for a different request body on {key_scope.method} "
                f"{key_scope.path}; a key names one request (send a new key for a new request)",
            )
        else:
            self._count("replayed")
            await _send_stored(send, stored)
