"""Reading a run's events: long-poll `GET .../events` and the SSE tail `.../events/stream`.

Both wait through the run log, which registers with the process's single listener and holds no
database connection while it waits. Long-polls woken together with the same cursor and limit are
answered by one read and one encoding: the page's JSON is written once, for the first of them, and
the same bytes go to every other (`SharedPage.encoded`). Both give way to `Drain`: at shutdown a
long-poll answers what it has and a stream ends (the client resumes with its cursor or
`Last-Event-ID`).

The stream: `id: <seq>`, `event: <type>`, `data: <the event as JSON>` per event; `Last-Event-ID`
wins over `after`; a comment every keep-alive interval while idle; it ends after the terminal event,
and a finished run with nothing after the cursor answers 204 (which stops an EventSource).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query
from fastapi.responses import Response, StreamingResponse

from ledger import shapes, tracing, validate
from ledger.errors import LedgerFailure
from ledger.runlog.events import DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, MAX_LIST_TIMEOUT_MS
from ledger.service.errors import error_responses
from ledger.service.json_answer import encode
from ledger.service.models import CURSOR_PATTERN, RunId
from ledger.service.security import require_token
from ledger.service.state import Services, services

__all__ = [
    "events_answer",
    "router",
    "stream_answer",
]

_log = logging.getLogger("ledger.service.events")

router = APIRouter(
    prefix="/v1/runs/{run_id}",
    tags=["events"],
    dependencies=[Depends(require_token)],
    responses=error_responses(401, 403, 404, 410, 422, 503),
)

_Svc = Annotated[Services, Depends(services)]
_After = Annotated[
    str,
    Query(
        description="a seq, -1 (from the oldest retained event) or now (only what comes next)",
        json_schema_extra={"pattern": CURSOR_PATTERN},
    ),
]
_TimeoutMs = Annotated[
    int,
    Query(description=f"how long to wait for a new event, in ms (clamped to 0 to {MAX_LIST_TIMEOUT_MS:,})"),
]
_Limit = Annotated[
    int, Query(description="page size", json_schema_extra={"minimum": 1, "maximum": MAX_LIST_LIMIT})
]
# One event of the stream (comments are not events): `data` is the event (`Event`) as JSON.
_SSE_EVENT_SCHEMA = {
    "type": "object",
    "required": ["id", "event", "data"],
    "properties": {
        "id": {"type": "string", "description": "the event's seq"},
        "event": {"type": "string", "description": "the event's type"},
        "data": {"type": "string", "contentMediaType": "application/json"},
    },
}
# Surrounding whitespace is not part of a header value; an empty one leaves the cursor to `after`.
_LAST_EVENT_ID_PATTERN = f"^[ \\t]*({CURSOR_PATTERN[1:-1]})?[ \\t]*$"
_PAGE = DEFAULT_LIST_LIMIT


@router.get(
    "/events",
    summary="Events after a cursor; waits up to timeout_ms (max 30 s) when there are none",
    response_model=shapes.EventPage,
)
async def list_events(
    run_id: RunId, svc: _Svc, after: _After = "-1", timeout_ms: _TimeoutMs = 0, limit: _Limit = _PAGE
) -> Response:
    return await events_answer(svc, run_id, after, timeout_ms, limit)


async def events_answer(svc: Services, run_id: str, after: str, timeout_ms: int, limit: int) -> Response:
    """The long-poll's answer (the route's body, and `read_route`'s): raises what the route raises."""
    with tracing.span("events long-poll wait", run_id=run_id, after=after, timeout_ms=timeout_ms):
        finished, page = await svc.drain.race(svc.runlog.wait_page(run_id, after, timeout_ms, limit))
    if not finished:
        # Shutting down: answer what is there now instead of waiting out the timeout.
        page = await svc.runlog.wait_page(run_id, after, 0, limit)
    assert page is not None
    # The library built the page to its type: encoded as the response model would write it, once.
    return Response(page.encoded(encode), media_type="application/json")


def _sse_event(event: Mapping[str, Any]) -> str:
    """One event in SSE framing; JSON never contains a raw newline, so `data` is one line."""
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"id: {event['seq']}\nevent: {event['type']}\ndata: {data}\n\n"


def _cursor(after: str, last_event_id: str) -> tuple[str, str]:
    """The cursor to start from and the name of where it came from (for error messages)."""
    if last_event_id.strip():
        # Surrounding whitespace is not part of an HTTP header value.
        return last_event_id.strip(), "Last-Event-ID"
    return after, "after"


@router.get(
    "/events/stream",
    summary="Live tail as Server-Sent Events (resume with Last-Event-ID)",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/event-stream": {"schema": _SSE_EVENT_SCHEMA}},
            "description": "`id: <seq>`, `event: <type>`, `data: <the event as JSON>` per event; "
            "comments while idle; ends after the terminal event",
        },
        204: {"description": "the run is finished and nothing is newer than the cursor"},
    },
)
async def stream_events(
    run_id: RunId,
    svc: _Svc,
    after: Annotated[
        str,
        Query(
            description="a seq, -1 or now; Last-Event-ID wins", json_schema_extra={"pattern": CURSOR_PATTERN}
        ),
    ] = "-1",
    last_event_id: Annotated[
        str,
        Header(
            alias="Last-Event-ID",
            description="the last seq this client has (what an EventSource sends on reconnect)",
            json_schema_extra={"pattern": _LAST_EVENT_ID_PATTERN},
        ),
    ] = "",
) -> Response:
    return await stream_answer(svc, run_id, after, last_event_id)


async def stream_answer(svc: Services, run_id: str, after: str, last_event_id: str) -> Response:
    """The tail's answer (the route's body, and `read_route`'s): a refusal is raised before the
    stream starts, as the route raises it."""
    raw, source = _cursor(after, last_event_id)
    cursor = validate.cursor(source, raw)
    # Read before answering: an unknown run or an expired cursor get a proper status.
    first = await svc.runlog.list_events(run_id, "now" if cursor is None else cursor, 0, _PAGE)
    if not first["events"] and first["terminal"] is not None:
        return Response(status_code=204)
    start = first["latest_seq"] if cursor is None else cursor
    return StreamingResponse(
        _tail(svc, run_id, start, first),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _tail(svc: Services, run_id: str, cursor: int, first: shapes.EventPage) -> AsyncIterator[str]:
    keepalive_ms = max(1, int(svc.settings.sse_keepalive_s * 1000))
    # Sent at once so the client sees the stream open even before the first event.
    yield ": stream open\n\n"
    page, frames = first, "".join(_sse_event(event) for event in first["events"])
    try:
        while True:
            events = page["events"]
            if events:
                # A page's events as one chunk; a terminal event is always the last of its page.
                yield frames
                cursor = events[-1]["seq"]
                if events[-1]["type"] == "terminal":
                    return
            elif page["terminal"] is not None:
                return
            # Pages behind this one come back at once: the wait reads before it waits, and that
            # read is shared by every tail of the run at the same cursor, where a read of each
            # tail's own would be one per tail after every wake-up.
            with tracing.span("events stream wait", run_id=run_id, after=cursor):
                finished, waited = await svc.drain.race(
                    svc.runlog.wait_page(run_id, cursor, keepalive_ms, _PAGE)
                )
            if not finished:
                return
            assert waited is not None
            # Shared with every tail of the run woken by the same read: framed once for them all.
            page, frames = waited.page, waited.frames(_sse_event)
            if not page["events"] and page["terminal"] is None:
                yield ": keep-alive\n\n"
    except LedgerFailure as exc:
        # The status line is gone; end the stream and let the reconnect get the proper answer.
        _log.warning("event stream ended early: %s", exc, extra={"after": cursor})
