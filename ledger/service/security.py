"""Who may do what: every endpoint but the probes, the limits (`GET /v1/limits`: no data) and, by
default, the API docs is authorized here.

One dependency, `require_token`, sits on every protected router. It

1. resolves the caller's credential (`_resolve_credential`: the one place a request's credential is
   read: the bearer header, else on GET and HEAD the dashboard's session cookie; an admin API
   token, else a minted token verified with the keyring, no database read; one verified lately is
   remembered, its expiry still checked on every use: `ledger.service.verified_tokens`), and
2. decides the request against the route's entry in `ACCESS` (`ledger.tokens.refusal`): admin may
   everything, `read` every GET, `run` only its own run's open, append, uploads, reads and mapping.

A missing, unknown or expired credential is 401; a valid one outside its scope is 403
`{"error": ..., "code": "forbidden"}`, raised before the endpoint runs, so nothing is written.
A route missing from `ACCESS` is refused to everyone but admin (and a test fails for it).

A middleware that must not act for a caller the route would refuse (the Idempotency-Key store)
runs the same decision before routing: `refusal_answer` matches the path against `ACCESS`.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any, Final

from fastapi import Depends, FastAPI, Request
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException
from starlette.routing import compile_path
from starlette.types import Receive, Scope

from ledger import tokens
from ledger.auth import token_matches
from ledger.service.errors import error_body
from ledger.service.json_answer import JsonAnswer
from ledger.service.verified_tokens import VerifiedTokens
from ledger.tokens import (
    ADMIN_ONLY,
    OPEN_RUN,
    READ_ANY,
    READ_RUN,
    UPLOAD_RUN,
    WRITE_RUN,
    Grant,
    Keyring,
    Need,
)

__all__ = [
    "ACCESS",
    "SESSION_COOKIE",
    "api_access",
    "bearer_credentials",
    "install_security",
    "keyring_of",
    "refusal_answer",
    "require_token",
    "session_credentials",
]

# auto_error=False: a missing header gets our own 401 body, not FastAPI's 403.
_bearer = HTTPBearer(
    auto_error=False,
    description="An admin token (LEDGER_API_TOKENS or the api-token file), or a read or run token "
    "minted with POST /v1/tokens.",
)

_CHALLENGE: Final = {"WWW-Authenticate": "Bearer"}

# The dashboard's session cookie holds a token the browser sends by itself (an EventSource cannot
# set a header). It counts on reads only: a write always needs the Authorization header, so a
# page another site tricks the browser into submitting can never change anything.
SESSION_COOKIE: Final = "ledger_session"
_SESSION_METHODS: Final = frozenset({"GET", "HEAD"})

# (method, route path) -> what the caller needs; a HEAD without an entry of its own is its GET.
ACCESS: Final[dict[tuple[str, str], Need]] = {
    # runs
    ("POST", "/v1/runs"): OPEN_RUN,
    ("GET", "/v1/runs"): READ_ANY,
    ("GET", "/v1/runs/{run_id}"): READ_RUN,
    ("GET", "/v1/runs/{run_id}/logs"): READ_RUN,
    ("POST", "/v1/runs/{run_id}/events"): WRITE_RUN,
    ("GET", "/v1/runs/{run_id}/events"): READ_RUN,
    ("GET", "/v1/runs/{run_id}/events/stream"): READ_RUN,
    # Ending a run is the reporter's final upload, fenced by attempt; setting it outright is not.
    ("PUT", "/v1/runs/{run_id}/terminal"): ADMIN_ONLY,
    ("GET", "/v1/runs/{run_id}/terminal"): READ_RUN,
    # A cancel only ends a live run (its reason kept); the run's own worker may give up on it.
    ("POST", "/v1/runs/{run_id}/cancel"): WRITE_RUN,
    ("PUT", "/v1/runs/{run_id}/mapping"): WRITE_RUN,
    ("POST", "/v1/runs/{run_id}/mapping/block"): WRITE_RUN,
    ("GET", "/v1/runs/{run_id}/mapping"): READ_RUN,
    # ingestion
    ("POST", "/v1/runs/{run_id}/status"): UPLOAD_RUN,
    ("POST", "/v1/runs/{run_id}/sheets"): WRITE_RUN,
    ("GET", "/v1/runs/{run_id}/sheets"): READ_RUN,
    ("POST", "/v1/runs/{run_id}/observations"): WRITE_RUN,
    ("GET", "/v1/runs/{run_id}/observations"): READ_RUN,
    # warm pool: the coordinator's (admin); readers may look
    ("POST", "/v1/pools/{pool}/entries"): ADMIN_ONLY,
    ("GET", "/v1/pools/{pool}/entries"): READ_ANY,
    ("DELETE", "/v1/pools/{pool}/entries"): ADMIN_ONLY,
    ("POST", "/v1/pools/{pool}/claim"): ADMIN_ONLY,
    ("GET", "/v1/pools/{pool}/counts"): READ_ANY,
    ("POST", "/v1/pools/{pool}/promote"): ADMIN_ONLY,
    ("POST", "/v1/pools/{pool}/ready"): ADMIN_ONLY,
    ("POST", "/v1/pools/{pool}/delete"): ADMIN_ONLY,
    # operations and tokens
    ("GET", "/metrics"): READ_ANY,
    ("GET", "/openapi.json"): READ_ANY,
    ("POST", "/v1/tokens"): ADMIN_ONLY,
    # durable streams: writing them is the operator's; reading (a run's log too) a reader's
    ("PUT", "/v1/stream/{name:path}"): ADMIN_ONLY,
    ("POST", "/v1/stream/{name:path}"): ADMIN_ONLY,
    ("DELETE", "/v1/stream/{name:path}"): ADMIN_ONLY,
    ("HEAD", "/v1/stream/{name:path}"): READ_ANY,
    ("GET", "/v1/stream/{name:path}"): READ_ANY,
    # the dashboard: read-only pages (their session check asks for the page's own entry)
    ("GET", "/ui/"): READ_ANY,
    ("GET", "/ui/runs/{run_id}"): READ_ANY,
    ("GET", "/ui/pool"): READ_ANY,
    ("POST", "/ui/sign-in"): READ_ANY,
    ("GET", "/ui/api/pools"): READ_ANY,
}


class _AccessDenied(HTTPException):
    """401 (no acceptable credential) or 403 (a credential outside its scope); `code` says which."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(status, message, headers=_CHALLENGE if status == 401 else None)
        self.message = message
        self.code = code


async def _access_denied(request: Request, exc: Exception) -> JsonAnswer:
    assert isinstance(exc, _AccessDenied)
    return JsonAnswer(
        error_body(exc.status_code, exc.message, exc.code), status_code=exc.status_code, headers=exc.headers
    )


def install_security(app: FastAPI, admin_tokens: tuple[str, ...], keyring: Keyring) -> None:
    """Give `app` the credentials it accepts and its 401/403 answers."""
    app.state.tokens = admin_tokens
    app.state.token_keys = keyring
    app.state.verified_tokens = VerifiedTokens(keyring)
    app.add_exception_handler(_AccessDenied, _access_denied)


def keyring_of(request: Request) -> Keyring:
    found = request.app.state.token_keys
    assert isinstance(found, Keyring)
    return found


def _verified_tokens_of(request: Request) -> VerifiedTokens:
    found = request.app.state.verified_tokens
    assert isinstance(found, VerifiedTokens)
    return found


async def _resolve_credential(
    request: Request, credentials: HTTPAuthorizationCredentials | None = None
) -> Grant:
    """The caller's grant, from `credentials` (default: the request's bearer header, else on a
    GET or HEAD the dashboard's session cookie); `_AccessDenied` 401 when none is acceptable.

    The one place a credential is read: any other kind is resolved here, into the token it stands
    for, and is then held to `ACCESS` like any token.
    """
    if credentials is None:
        credentials = await _bearer(request) or session_credentials(request)
    if credentials is None:
        raise _AccessDenied(401, "missing bearer token (Authorization: Bearer <token>)", "unauthorized")
    presented = credentials.credentials
    # Every admin token is compared (constant time) before a minted token is looked at.
    if token_matches(presented, request.app.state.tokens):
        return tokens.ADMIN
    if tokens.looks_minted(presented):
        try:
            return _verified_tokens_of(request).verify(presented, now_s=time.time())
        except tokens.TokenExpired as exc:
            raise _AccessDenied(401, str(exc), "token_expired") from None
        except tokens.TokenError as exc:
            raise _AccessDenied(401, f"invalid bearer token: {exc}", "unauthorized") from None
    raise _AccessDenied(401, "invalid bearer token", "unauthorized")


async def bearer_credentials(request: Request) -> HTTPAuthorizationCredentials | None:
    """The request's `Authorization: Bearer` credentials, or None (the `require_token` dependency
    gets them so, for a caller that invokes it directly)."""
    return await _bearer(request)


def session_credentials(request: Request) -> HTTPAuthorizationCredentials | None:
    """The session cookie's token as bearer credentials on a GET or HEAD, else None."""
    if request.method not in _SESSION_METHODS:
        return None
    token = request.cookies.get(SESSION_COOKIE, "")
    return HTTPAuthorizationCredentials(scheme="Bearer", credentials=token) if token else None


def _route_need(request: Request) -> Need:
    """The `ACCESS` entry of the request's route; admin-only when the route has none."""
    route = request.scope.get("route")
    path = route.path if isinstance(route, APIRoute) else request.url.path
    need = ACCESS.get((request.method, path))
    if need is None and request.method == "HEAD":
        need = ACCESS.get(("GET", path))  # a GET route answers HEAD too
    return ADMIN_ONLY if need is None else need


async def _body_field(request: Request, name: str) -> Any:
    """A top-level field of the JSON body, or None (an unreadable body is the endpoint's to
    refuse; the body stays cached on the request for it)."""
    try:
        body = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError):
        return None
    return body.get(name) if isinstance(body, dict) else None


async def require_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Grant:
    """Authorize the request with `credentials` (see the module docstring): the caller's grant,
    else `_AccessDenied` (an `HTTPException`) 401 or 403."""
    return await _authorize(request, credentials, _route_need(request))


async def _authorize(request: Request, credentials: HTTPAuthorizationCredentials | None, need: Need) -> Grant:
    """The caller's grant when it may make the request needing `need`, else `_AccessDenied`."""
    grant = await _resolve_credential(request, credentials)
    if grant.scope is tokens.Scope.ADMIN:
        return grant
    run_id: object = None
    attempt: object = None
    if need.run == "path":
        # Any scope: a refusal names the run whose token would do.
        run_id = request.path_params.get("run_id")
    if grant.scope is tokens.Scope.RUN:
        if need.run == "body":
            run_id = await _body_field(request, "run_id")
        if need.attempt:
            attempt = await _body_field(request, "producer_attempt")
    problem = tokens.refusal(grant, need, run_id=run_id, attempt=attempt)
    if problem is not None:
        raise _AccessDenied(403, problem, "forbidden")
    return grant


# Every API write lives under /v1/; the dashboard's forms check their caller themselves.
_API_PREFIX: Final = "/v1/"
_ACCESS_PATTERNS: Final = tuple(
    (method, path, compile_path(path)) for method, path in ACCESS if path.startswith(_API_PREFIX)
)


def api_access(method: str, path: str) -> tuple[Need, dict[str, Any]] | None:
    """The `ACCESS` entry of an API request's route and its path parameters, matched as the router
    matches it, or None (no API route has that method and path)."""
    for entry_method, template, (pattern, _, convertors) in _ACCESS_PATTERNS:
        if entry_method != method:
            continue
        match = pattern.match(path)
        if match is not None:
            params = {key: convertors[key].convert(value) for key, value in match.groupdict().items()}
            return ACCESS[(entry_method, template)], params
    return None


async def refusal_answer(scope: Scope, receive: Receive) -> JsonAnswer | None:
    """Authorize an API request before the app routes it, as its route's `require_token` will:
    the 401 or 403 answer when refused, else None (also for a path no API route serves).

    For a middleware that must not act for a caller the route would refuse: an answer stored
    under an Idempotency-Key is given only to a request that may make it (an expired token, or a
    run token outside its run, must not learn whether a key exists). `receive` yields the body.
    """
    access = api_access(scope["method"], scope["path"])
    if access is None:
        return None
    need, params = access
    request = Request({**scope, "path_params": params}, receive)
    try:
        await _authorize(request, await bearer_credentials(request), need)
    except _AccessDenied as exc:
        return await _access_denied(request, exc)
    return None
