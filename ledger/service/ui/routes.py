"""The dashboard's routes: `/` and `/ui/...` pages, sign-in and sign-out, static files, and the one
JSON read the API lacks (the whole warm pool at a glance).

A page without a valid session cookie redirects to the sign-in page, which leads back to that page
once signed in (`next`: a path of the dashboard only, so a link cannot send a person signing in
to another site). The pages' scripts read the
JSON API (`/v1/runs`, `/v1/runs/{id}`, `/v1/runs/{id}/events/stream`) with the same cookie, which
the service accepts on reads only (`ledger.service.security.session_credentials`).
"""

from __future__ import annotations

from importlib.resources import files
from typing import Annotated, Any
from urllib.parse import parse_qs, quote, urlsplit

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import RedirectResponse, Response

from ledger import validate
from ledger.errors import NotFound
from ledger.runlog.events import EVENT_TYPES, TERMINAL_STATUSES
from ledger.service.security import require_token
from ledger.service.state import Services, services
from ledger.service.ui import data
from ledger.service.ui.pages import nav, page, render
from ledger.service.ui.session import PAGE_HEADERS, authorize, clear_session, same_origin, set_session

__all__ = [
    "router",
]

router = APIRouter(include_in_schema=False)

_Svc = Annotated[Services, Depends(services)]

_SIGN_IN = "/ui/sign-in"
_HOME = "/ui/"
# A pasted token is short; a bigger form is not a sign-in.
_MAX_FORM_BYTES = 16 * 1024
_STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}


def _to_sign_in(back_to: str = _HOME) -> RedirectResponse:
    # 303: the browser follows with a GET, whatever the method of the request was.
    target = _SIGN_IN if back_to == _HOME else f"{_SIGN_IN}?next={quote(back_to, safe='/')}"
    return RedirectResponse(target, status_code=303, headers=PAGE_HEADERS)


def _safe_next(value: str | None) -> str:
    """Where signing in leads: `value` when it is a path of the dashboard on this origin, else the
    runs list. Anything that could name another site (`//host`, a scheme, a backslash, which some
    browsers read as a slash) or another part of the service is refused."""
    if not value or not value.startswith(_HOME) or "\\" in value or any(ord(c) < 0x20 for c in value):
        return _HOME
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or not parts.path.startswith(_HOME):
        return _HOME
    return value


def _page_path(request: Request) -> str:
    # As the browser sent it: a run id's escapes (`%20`, `%2F`) must survive the round trip.
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) else request.url.path
    query = request.url.query
    return path + (f"?{query}" if query else "")


async def _refused(request: Request) -> Response | None:
    """The answer to a page request without a session that may see it: sign in (no or a bad
    token) or a refusal (a token whose scope does not cover the dashboard); None when it may."""
    denied = await authorize(request)
    if denied is None:
        return None
    if denied.status_code == 401:
        return _to_sign_in(_safe_next(_page_path(request)))
    return page(
        render("not_found.html", heading="Not allowed", message=denied.detail),
        title="Not allowed",
        nav=nav(""),
        status_code=denied.status_code,
    )


@router.get("/")
async def root() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/favicon.ico")
async def favicon() -> Response:
    # Browsers ask for it on every page; there is none, and a 404 would litter their consoles.
    return Response(status_code=204)


@router.get("/ui")
async def ui_bare() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui/", response_model=None)
async def runs_page(request: Request) -> Response:
    if (refused := await _refused(request)) is not None:
        return refused
    options = "".join(
        render("option.html", value=status) for status in ("running", "interrupted", *TERMINAL_STATUSES)
    )
    body = render("runs.html", markup={"status_options": options})
    return page(body, title="Runs", script="runs.js", nav=nav("runs"))


@router.get("/ui/runs/{run_id}", response_model=None)
async def run_page(run_id: str, request: Request, svc: _Svc) -> Response:
    if (refused := await _refused(request)) is not None:
        return refused
    try:
        validate.run_id("run_id", run_id)
        await svc.runlog.get_run(run_id)
    except (validate.InvalidInput, NotFound):
        message = f"There is no run {run_id!r}."
        body = render("not_found.html", heading="Not found", message=message)
        return page(body, title="Not found", nav=nav(""), status_code=404)
    return page(
        render("run.html", run_id=run_id),
        title=f"Run {run_id}",
        script="run.js",
        nav=nav("runs"),
        attrs={"run-id": run_id, "event-types": " ".join(EVENT_TYPES)},
    )


@router.get("/ui/pool", response_model=None)
async def pool_page(request: Request) -> Response:
    if (refused := await _refused(request)) is not None:
        return refused
    return page(render("pool.html"), title="Warm pool", script="pool.js", nav=nav("pool"))


def _sign_in_form(error: str, back_to: str, status_code: int = 200) -> Response:
    return page(render("sign_in.html", error=error, next=back_to), title="Sign in", status_code=status_code)


@router.get("/ui/sign-in")
async def sign_in_page(request: Request) -> Response:
    return _sign_in_form("", _safe_next(request.query_params.get("next")))


@router.post("/ui/sign-in")
async def sign_in(request: Request) -> Response:
    if not same_origin(request):
        error = "This form must be sent from this service's own page."
        return _sign_in_form(error, _HOME, 403)
    body = await request.body()
    fields = parse_qs(body[:_MAX_FORM_BYTES].decode("utf-8", "replace"), max_num_fields=8)
    token = (fields.get("token") or [""])[0].strip()
    back_to = _safe_next((fields.get("next") or [""])[0])
    if not token:
        return _sign_in_form("Paste a token.", back_to, 400)
    denied = await authorize(request, token)
    if denied is not None:
        error = f"The service does not let this token in: {denied.detail}"
        return _sign_in_form(error, back_to, denied.status_code)
    response = RedirectResponse(back_to, status_code=303, headers=PAGE_HEADERS)
    set_session(response, request, token)
    return response


@router.post("/ui/sign-out")
async def sign_out(request: Request) -> Response:
    response = _to_sign_in()
    clear_session(response, request)
    return response


@router.get("/ui/static/{name}")
async def static(name: str) -> Response:
    suffix = name[name.rfind(".") :] if "." in name else ""
    resource = files("ledger.service.ui").joinpath("static", name)
    if suffix not in _STATIC_TYPES or "/" in name or name.startswith(".") or not resource.is_file():
        return Response("not found", status_code=404, media_type="text/plain")
    return Response(
        resource.read_bytes(),
        media_type=_STATIC_TYPES[suffix],
        headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"},
    )


@router.get("/ui/api/pools", dependencies=[Depends(require_token)])
async def pools(svc: _Svc) -> dict[str, Any]:
    return await data.pools(svc.db)


# Last in this module, so every page above matches first: a route added below it would be shadowed.
@router.get("/ui/{rest:path}", response_model=None, include_in_schema=False)
async def no_such_page(rest: str, request: Request) -> Response:
    """A page a person mistyped (`/ui/pools`) is a page that says so and names the real ones; an
    unknown `/ui/api/…` is the API's JSON 404 like any other endpoint."""
    if rest.startswith("api/"):
        raise HTTPException(404)
    message = (
        f"There is no page /ui/{rest}. The dashboard's pages: /ui/ (the runs), "
        "/ui/runs/<run id> (a run) and /ui/pool (the warm pool)."
    )
    body = render("not_found.html", heading="Not found", message=message)
    return page(body, title="Not found", nav=nav(""), status_code=404)
