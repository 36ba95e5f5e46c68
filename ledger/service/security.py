"""Bearer-token authentication for every endpoint but health (and, by default, the API docs)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from ledger.auth import token_matches

# auto_error=False: a missing header gets our own 401 body, not FastAPI's 403.
_bearer = HTTPBearer(auto_error=False, description="A token from LEDGER_API_TOKENS or the api-token file.")

_CHALLENGE = {"WWW-Authenticate": "Bearer"}

# The dashboard's session cookie holds a token the browser sends by itself (an EventSource cannot
# set a header). It counts on reads only: a write always needs the Authorization header, so a
# page another site tricks the browser into submitting can never change anything.
SESSION_COOKIE = "ledger_session"
_SESSION_METHODS = frozenset({"GET", "HEAD"})


def session_credentials(request: Request) -> HTTPAuthorizationCredentials | None:
    """The session cookie's token as bearer credentials on a GET or HEAD, else None."""
    if request.method not in _SESSION_METHODS:
        return None
    token = request.cookies.get(SESSION_COOKIE, "")
    return HTTPAuthorizationCredentials(scheme="Bearer", credentials=token) if token else None


async def require_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Refuse the request with 401 unless it carries one of the service's tokens."""
    if credentials is None:
        credentials = session_credentials(request)
    if credentials is None:
        raise HTTPException(401, "missing bearer token (Authorization: Bearer <token>)", headers=_CHALLENGE)
    tokens: tuple[str, ...] = request.app.state.tokens
    if not token_matches(credentials.credentials, tokens):
        raise HTTPException(401, "invalid bearer token", headers=_CHALLENGE)
