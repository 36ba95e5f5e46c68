"""`GET /v1/runs/{run_id}/events` (the long-poll) and `.../events/stream` (the SSE tail) served
without FastAPI's per-request machinery.

One append can wake a thousand watchers of a run, and each of them then costs the server one
request's life: FastAPI's routing, dependency solving and exception layers cost more of it than
the shared read and encoding that answer them all. This middleware, the innermost beside
`AppendRoute` (every middleware above - run path check, metrics and the access line - still
applies), serves those requests with the same parts the routes use:

- the query (and `Last-Event-ID`) is read as FastAPI reads it, but only when it is plainly what the
  route declares: the route's own parameters, each at most once, integers as plain decimal digits;
- the caller is authorized by `require_token` against the route's `ACCESS` entry;
- the answer is the route's own body, `routes_events.events_answer` or `stream_answer`;
- a failure becomes the answer the app's own exception handler for it gives (`handled_answer`).

Anything else - a parameter the route does not declare, one given twice, an integer in another
spelling FastAPI also reads (`+5`, `1_000`, ` 5`) or not an integer at all - goes on to the
FastAPI route unchanged, so every refusal of a malformed query keeps the exact status and message
the route gives, and the routes stay what the OpenAPI document describes.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from typing import Any, Final
from urllib.parse import parse_qsl

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ledger.runlog.events import RunId
from ledger.service import routes_events
from ledger.service.errors import handled_answer
from ledger.service.middleware import checked_run_id
from ledger.service.security import bearer_credentials, require_token
from ledger.service.state import Services

__all__ = [
    "EventReadRoute",
]

_POLL_PATH: Final = "/v1/runs/{run_id}/events"
_STREAM_PATH: Final = "/v1/runs/{run_id}/events/stream"
# `{run_id}` matches one path segment, as the router's path parameter does.
_PATH_PATTERN: Final = re.compile(r"^/v1/runs/([^/]+)/events(/stream)?$")
# An integer as plain digits reads the same to `int` as to FastAPI; 18 digits stay within 64 bits.
_INTEGER: Final = re.compile(r"-?[0-9]{1,18}")
_POLL_PARAMETERS: Final = frozenset({"after", "timeout_ms", "limit"})
_STREAM_PARAMETERS: Final = frozenset({"after"})
_LAST_EVENT_ID: Final = b"last-event-id"

# A route's body with the request's parameters bound: given the services and the checked run id.
_Answer = Callable[[Services, RunId], Awaitable[Response]]


def _route(path: str) -> APIRoute:
    """The FastAPI route this serves (its `ACCESS` entry and metrics label are the route's)."""
    for route in routes_events.router.routes:
        if isinstance(route, APIRoute) and route.path == path and "GET" in (route.methods or ()):
            return route
    raise LookupError(f"no GET {path} route")


def _defaults(route: APIRoute) -> dict[str, Any]:
    """The defaults the route's handler declares for its parameters (one place for them)."""
    parameters = inspect.signature(route.endpoint).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def _query(scope: Scope, known: frozenset[str]) -> dict[str, str] | None:
    """The query's parameters, when each is one of `known` and given at most once (else None)."""
    # Decoded as Starlette decodes it for the route.
    pairs = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
    params = dict(pairs)
    if len(params) != len(pairs) or not known.issuperset(params):
        return None
    return params


def _integer(params: dict[str, str], name: str, default: int) -> int | None:
    """A parameter's integer (its default when absent), or None when not plain digits."""
    value = params.get(name)
    if value is None:
        return default
    return int(value) if _INTEGER.fullmatch(value) else None


def _poll_answer(scope: Scope, defaults: dict[str, Any]) -> _Answer | None:
    """The long-poll route's body for the query's `after`, `timeout_ms` and `limit`, or None."""
    params = _query(scope, _POLL_PARAMETERS)
    if params is None:
        return None
    timeout_ms = _integer(params, "timeout_ms", defaults["timeout_ms"])
    limit = _integer(params, "limit", defaults["limit"])
    if timeout_ms is None or limit is None:
        return None
    after = params.get("after", defaults["after"])
    return lambda svc, run_id: routes_events.events_answer(svc, run_id, after, timeout_ms, limit)


def _stream_answer(scope: Scope, defaults: dict[str, Any]) -> _Answer | None:
    """The stream route's body for the query's `after` and the `Last-Event-ID` header, or None."""
    params = _query(scope, _STREAM_PARAMETERS)
    if params is None:
        return None
    found = [value for name, value in scope["headers"] if name == _LAST_EVENT_ID]
    if len(found) > 1:
        return None
    # Decoded as Starlette decodes a header.
    last_event_id = found[0].decode("latin-1") if found else defaults["last_event_id"]
    after = params.get("after", defaults["after"])
    return lambda svc, run_id: routes_events.stream_answer(svc, run_id, after, last_event_id)


class EventReadRoute:
    """Serve plain event reads directly (see the module docstring); everything else passes through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.poll_route = _route(_POLL_PATH)
        self.stream_route = _route(_STREAM_PATH)
        self.poll_defaults = _defaults(self.poll_route)
        self.stream_defaults = _defaults(self.stream_route)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = (
            _PATH_PATTERN.match(scope["path"])
            if scope["type"] == "http" and scope["method"] == "GET"
            else None
        )
        svc = getattr(scope["app"].state, "services", None) if match is not None else None
        if match is None or not isinstance(svc, Services):
            await self.app(scope, receive, send)
            return
        stream = match.group(2) is not None
        answer = (
            _stream_answer(scope, self.stream_defaults) if stream else _poll_answer(scope, self.poll_defaults)
        )
        if answer is None:
            await self.app(scope, receive, send)
            return
        run_id = match.group(1)
        route = self.stream_route if stream else self.poll_route
        scope["route"] = route
        scope["endpoint"] = route.endpoint
        scope["path_params"] = {"run_id": run_id}
        request = Request(scope, receive)
        try:
            await require_token(request, await bearer_credentials(request))
            response = await answer(svc, checked_run_id(scope, run_id))
        except Exception as exc:
            response = await handled_answer(request, exc)
        await response(scope, receive, send)
