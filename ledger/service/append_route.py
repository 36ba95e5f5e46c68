"""`POST /v1/runs/{run_id}/events` served without FastAPI's per-request machinery.

Appending one event is the service's hottest request: a reporter sends one per progress tick. On
it, FastAPI's routing and dependency solving cost more CPU than the rest of the service's request
path together. This middleware, the innermost (every other middleware - run path check, body
limit, run write gate, Idempotency-Key, metrics and the access line - still applies), serves the
request with the same parts the route uses:

- the body (UTF-8, checked by the body limit middleware) is parsed as FastAPI parses it
  (`json.loads`) and checked by the route's own model, `AppendEvents` (the library then checks
  every value, as for the route);
- the caller is authorized by `require_token` against the route's `ACCESS` entry;
- the append is `routes_runs.append_answer`, the route's own body;
- a failure becomes the answer the app's own exception handler for it gives (`handled_answer`).

Whatever is not plainly a valid append - another content type, a body that is not JSON or that the
model refuses - goes on to the FastAPI route unchanged (its body replayed), so every refusal keeps
the exact status and message the route gives, and the route stays what the OpenAPI document
describes.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ledger.service import routes_runs
from ledger.service.errors import handled_answer
from ledger.service.middleware import checked_run_id, read_body, replaying
from ledger.service.models import AppendEvents
from ledger.service.security import bearer_credentials, require_token
from ledger.service.state import Services

__all__ = [
    "AppendRoute",
]

_PATH: Final = "/v1/runs/{run_id}/events"
# `{run_id}` matches one path segment, as the router's path parameter does.
_PATH_PATTERN: Final = re.compile(r"^/v1/runs/([^/]+)/events$")


def _append_route() -> APIRoute:
    """The FastAPI route this serves (its `ACCESS` entry and metrics label are the route's)."""
    for route in routes_runs.router.routes:
        if isinstance(route, APIRoute) and route.path == _PATH and "POST" in (route.methods or ()):
            return route
    raise LookupError(f"no POST {_PATH} route")


def _is_json(scope: Scope) -> bool:
    """Whether FastAPI reads the body as JSON: no Content-Type (the app is not strict about it), or
    `application/json` (with parameters); anything rarer is left to the route itself."""
    name: bytes
    value: bytes
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value.partition(b";")[0].strip().lower() == b"application/json"
    return True


def _events(body: bytes) -> list[dict[str, Any]] | None:
    """The events of a body the route's model accepts, else None (the route answers it)."""
    try:
        # Decoded as UTF-8, never guessed (the body check refused anything else before here).
        return AppendEvents.model_validate(json.loads(body.decode("utf-8"))).events
    except (ValueError, ValidationError, RecursionError):  # JSONDecodeError, UnicodeDecodeError too
        return None


class AppendRoute:
    """Serve valid appends directly (see the module docstring); everything else passes through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.route = _append_route()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = (
            _PATH_PATTERN.match(scope["path"])
            if scope["type"] == "http" and scope["method"] == "POST"
            else None
        )
        svc = getattr(scope["app"].state, "services", None) if match is not None else None
        if match is None or not isinstance(svc, Services) or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        if body is None:
            return
        events = _events(body) if body else None
        if events is None:
            await self.app(scope, replaying(body, receive), send)
            return
        run_id = match.group(1)
        scope["route"] = self.route
        scope["path_params"] = {"run_id": run_id}
        request = Request(scope, replaying(body, receive))
        try:
            await require_token(request, await bearer_credentials(request))
            response: Response = await routes_runs.append_answer(svc, checked_run_id(scope, run_id), events)
        except Exception as exc:
            response = await handled_answer(request, exc)
        await response(scope, receive, send)
