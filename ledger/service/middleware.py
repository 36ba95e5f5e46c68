"""ASGI middleware: run ids in paths, request body limit, and per-request context (run id,
metrics, access log). Idempotency-Key handling is in `ledger.service.idempotent`.

All are plain ASGI (not Starlette's BaseHTTPMiddleware), so streaming responses (SSE) pass through
untouched and a client disconnect still reaches the endpoint.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import unquote, unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledger.errors import InvalidInput
from ledger.runlog.events import RunId, validate_run_id
from ledger.service.errors import error_body
from ledger.service.json_answer import encode
from ledger.service.jsontext import BodyRefusal
from ledger.service.logs import AccessLog, current_run_id
from ledger.service.metrics import ServiceMetrics

__all__ = [
    "CHECKED_RUN_ID",
    "BodyLimitMiddleware",
    "RequestContextMiddleware",
    "RunPathMiddleware",
    "checked_run_id",
    "path_run_id",
    "path_run_id_problem",
    "read_body",
    "replaying",
    "send_json_error",
]

_access = AccessLog("ledger.service.access")

_RUN_PATH = re.compile(r"^/v1/runs/([^/]+)")
_RAW_RUN_PATH = re.compile(rb"^/v1/runs/([^/?#]+)")


async def send_json_error(
    send: Send,
    status: int,
    message: str,
    *,
    headers: Sequence[tuple[bytes, bytes]] = (),
    code: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> None:
    body = encode(error_body(status, message, code, **(extra or {})))
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def read_body(receive: Receive) -> bytes | None:
    """The whole request body (bounded by the body limit middleware), or None when the client
    went away first."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the app the body a middleware already read, then the rest of the
    connection's messages (a disconnect) from `receive`."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


# Where `RunPathMiddleware` leaves the run id it checked, for the route (`checked_run_id`).
CHECKED_RUN_ID: Final = "ledger.run_id"


def path_run_id(scope: Scope) -> RunId | None:
    """The run id of a `/v1/runs/{run_id}...` path, checked (None when the path names none); raises
    `InvalidInput` when it is not one. Read from the raw path: a `%2F` there decodes to a `/` that
    would route the request to another endpoint (`/v1/runs/x%2Fevents` to `x`'s events), so it
    must be refused before routing."""
    raw = scope.get("raw_path")
    if not isinstance(raw, bytes):
        raw = scope["path"].encode("utf-8", "surrogateescape")
    match = _RAW_RUN_PATH.match(raw)
    if match is None:
        return None
    try:
        run_id = unquote_to_bytes(match.group(1)).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("run_id", "must be valid UTF-8 once percent-decoded") from None
    return validate_run_id(run_id)


def path_run_id_problem(scope: Scope) -> str | None:
    """Why the run id in a `/v1/runs/{run_id}...` path is not one (None if it is, or if there is
    none)."""
    try:
        path_run_id(scope)
    except InvalidInput as exc:
        return exc.message
    return None


def checked_run_id(scope: Scope, run_id: str) -> RunId:
    """The route's `run_id` as the typed value the stores trust: the one `RunPathMiddleware`
    checked at the edge (checked here only for a request that did not pass it)."""
    checked = scope.get(CHECKED_RUN_ID)
    if type(checked) is RunId and checked == run_id:
        return checked
    return validate_run_id(run_id)


class RunPathMiddleware:
    """Refuse a path whose run id segment is not a valid run id with 422, before routing; a valid
    one is left in the scope (`CHECKED_RUN_ID`), checked once for the whole request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                run_id = path_run_id(scope)
            except InvalidInput as exc:
                await send_json_error(send, 422, exc.message)
                return
            if run_id is not None:
                scope[CHECKED_RUN_ID] = run_id
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """Refuse a request body over `max_bytes` with 413, before anything parses it.

    A declared `Content-Length` over the limit is refused without reading; otherwise the body is
    read (and counted, for chunked uploads that declare nothing) up to the limit, then replayed to
    the app. Later `receive()` calls go to the server, so disconnects are still seen. `check` may
    refuse a complete body (with its status, code and message) before the app sees it, except
    under `unchecked_paths` (path prefixes whose bodies are opaque bytes, not JSON the service
    parses).
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        check: Callable[[bytes], BodyRefusal | None] | None = None,
        unchecked_paths: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.check = check
        self.unchecked_paths = unchecked_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = f"request body is larger than the limit of {self.max_bytes} bytes"
        # A client that keeps its bodies under the limit learns it from the refusal too.
        advertised = {"max_body_bytes": self.max_bytes}
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await send_json_error(send, 400, "content-length: not a number")
                    return
                if declared > self.max_bytes:
                    await send_json_error(send, 413, too_large, extra=advertised)
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                # The client went away before sending its body: nothing to serve.
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await send_json_error(send, 413, too_large, extra=advertised)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        checked = self.check is not None and not scope["path"].startswith(self.unchecked_paths)
        problem = self.check(body) if checked and self.check is not None else None
        if problem is not None:
            await send_json_error(send, problem.status, problem.message, code=problem.code)
            return
        await self.app(scope, replaying(body, receive), send)


def _route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    # Unmatched paths share one label: arbitrary URLs must not create metric series.
    return path if isinstance(path, str) else "unmatched"


class RequestContextMiddleware:
    """Set the run id for logs, count and time the request by route template, log one access line."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        match = _RUN_PATH.match(scope["path"])
        token = current_run_id.set(unquote(match.group(1)) if match else None)
        status = 500
        started = time.perf_counter()

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            elapsed = time.perf_counter() - started
            route = _route_template(scope)
            method = scope["method"]
            self.metrics.observe_request(method, route, status, elapsed)
            _access.write(method, scope["path"], status, route, elapsed)
            current_run_id.reset(token)
