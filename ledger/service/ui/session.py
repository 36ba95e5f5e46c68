"""The dashboard's session: the cookie that carries a pasted token, and the headers of its pages.

The cookie holds the token itself (the service keeps no session state, so any replica accepts it):
HttpOnly (page scripts never see it), SameSite=Strict (no other site's page sends it) and Secure
when the page was served over HTTPS. It is a browser-session cookie: closing the browser ends it.
"""

from __future__ import annotations

from fastapi import Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from starlette.exceptions import HTTPException

from ledger.service.security import SESSION_COOKIE, require_token

__all__ = [
    "PAGE_HEADERS",
    "authorize",
    "clear_session",
    "same_origin",
    "set_session",
]

# No inline script or style and nothing from another origin: a run id or log line that slipped
# past escaping still could not run.
_CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": _CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    # Not no-referrer: with it a browser sends `Origin: null` on the sign-in form, which we check.
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def _is_https(request: Request) -> bool:
    return request.url.scheme == "https"


def set_session(response: Response, request: Request, token: str) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        token,
        path="/",
        httponly=True,
        samesite="strict",
        secure=_is_https(request),
    )


def clear_session(response: Response, request: Request) -> None:
    response.delete_cookie(
        SESSION_COOKIE, path="/", httponly=True, samesite="strict", secure=_is_https(request)
    )


async def authorize(request: Request, token: str | None = None) -> HTTPException | None:
    """Why the request may not see the page it asks for (None when it may): with the session cookie
    (or a bearer header), or with `token` when one is given (the sign-in form), held to the
    route's access rule like any API request."""
    credentials = None if token is None else HTTPAuthorizationCredentials(scheme="Bearer", credentials=token)
    try:
        await require_token(request, credentials)
    except HTTPException as exc:
        if exc.status_code not in (401, 403):
            raise
        return exc
    return None


def same_origin(request: Request) -> bool:
    """False when the browser says the form came from another origin (a login-CSRF attempt)."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    own = f"{request.url.scheme}://{request.url.netloc}"
    return origin == own
