"""The Durable Streams routes' contract, for the OpenAPI document.

The handlers (`ledger.service.routes_streams`) read the name, headers and body from the request
(bytes, as the protocol has them), so what each operation takes and answers is stated here, status
by status: `CREATE_DOC`, `APPEND_DOC`, `DELETE_DOC`, `HEAD_DOC` and `READ_DOC` are the keyword
arguments of each route's decorator.
"""

from __future__ import annotations

from typing import Any, Final

from ledger.service.errors import error_responses
from ledger.streams import rules

__all__ = [
    "APPEND_DOC",
    "CREATE_DOC",
    "DELETE_DOC",
    "HEAD_DOC",
    "READ_DOC",
]


def _header_parameter(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "in": "header",
        "required": False,
        "schema": schema or {"type": "string"},
        "description": description,
    }


def _headers(**described: str) -> dict[str, Any]:
    """Response headers, `Stream_Next_Offset` written for `Stream-Next-Offset`."""
    return {
        name.replace("_", "-"): {"schema": {"type": "string"}, "description": text}
        for name, text in described.items()
    }


_DECIMAL: Final[dict[str, Any]] = {"type": "string", "pattern": "^(0|[1-9][0-9]*)$"}
_OFFSET: Final[dict[str, Any]] = {"type": "string", "pattern": "^[0-9]{16}_[0-9]{16}$"}
_BOOLEAN: Final[dict[str, Any]] = {"type": "string", "enum": ["true", "false"]}
_NAME: Final[dict[str, Any]] = {
    "name": "name",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1},
    "description": f"The stream's name: UTF-8, 1 to {rules.MAX_NAME_BYTES} bytes, no control "
    "characters, `/` allowed. `runs/{run_id}` is a run's event log as a read-only JSON stream.",
}
_CONTENT_TYPE: Final = _header_parameter(
    "Content-Type",
    "The stream's content type; `application/json` is JSON mode (each message one JSON value).",
)
_CLOSED: Final = _header_parameter(
    "Stream-Closed", "`true` closes the stream (nothing is appended after).", _BOOLEAN
)
_CREATE_PARAMETERS: Final = [
    _NAME,
    _CONTENT_TYPE,
    _header_parameter("Stream-TTL", "Seconds the stream lives (not with Stream-Expires-At).", _DECIMAL),
    _header_parameter("Stream-Expires-At", "When the stream expires, RFC 3339 (not with Stream-TTL)."),
    _CLOSED,
    _header_parameter(
        "Stream-Forked-From", "The stream this one forks (its path or URL under `/v1/stream/`)."
    ),
    _header_parameter(
        "Stream-Fork-Offset", "Where the fork leaves its source (default: the source's tail).", _OFFSET
    ),
    _header_parameter(
        "Stream-Fork-Sub-Offset", "Messages of the append at Stream-Fork-Offset the fork keeps.", _DECIMAL
    ),
]
_APPEND_PARAMETERS: Final = [
    _NAME,
    _CONTENT_TYPE,
    _CLOSED,
    _header_parameter(
        "Producer-Id", "An idempotent producer (with Producer-Epoch and Producer-Seq, or none)."
    ),
    _header_parameter("Producer-Epoch", "The producer's epoch: a newer one fences the older off.", _DECIMAL),
    _header_parameter(
        "Producer-Seq", "The producer's sequence number in its epoch (a new epoch starts at 0).", _DECIMAL
    ),
    _header_parameter("Stream-Seq", "The writer's own sequence: must grow (as bytes) from append to append."),
]
_READ_PARAMETERS: Final = [
    _NAME,
    {
        "name": "offset",
        "in": "query",
        "required": False,
        "schema": {"type": "string"},
        "description": "Where to read from: an offset this server issued, `-1` (the start) or `now` "
        "(the tail); required with `live`.",
    },
    {
        "name": "live",
        "in": "query",
        "required": False,
        "schema": {"type": "string", "enum": ["long-poll", "sse"]},
        "description": "Wait for data: `long-poll` (204 when none came in time) or `sse` (an event stream).",
    },
    {
        "name": "cursor",
        "in": "query",
        "required": False,
        "schema": {"type": "string"},
        "description": "The previous answer's `Stream-Cursor`.",
    },
    _header_parameter("If-None-Match", "The ETag of an earlier catch-up read: 304 while it is unchanged."),
]
_BODY: Final[dict[str, Any]] = {
    "required": False,
    "description": "The bytes to store (JSON mode: one JSON value, or an array of messages).",
    "content": {
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        "application/json": {"schema": {}},
        "text/plain": {"schema": {"type": "string"}},
    },
}
_NEXT: Final = "The offset after the stream's data: where the next read starts."
_STREAM_NOTES: Final[dict[int, str]] = {
    400: "A name, header, query parameter or body the protocol does not take (`code`: "
    "`bad_request`); `error` names which.",
    403: "The token's scope does not cover the request (`code`: `forbidden`); on an append, also a "
    "stale `Producer-Epoch` (its `Producer-Epoch` header is the stream's: that producer must stop).",
    404: "No such stream (or fork source, or run).",
    405: "`runs/{run_id}` is a run's event log: read-only (`Allow: GET, HEAD`).",
    409: "Contradicts the stream: it exists with another configuration, it is closed "
    "(`Stream-Closed`, `Stream-Next-Offset`), a `Producer-Seq` skipped ahead "
    "(`Producer-Expected-Seq`, `Producer-Received-Seq`), a `Stream-Seq` did not grow, or the "
    "Content-Type differs.",
    410: "The stream was deleted while forks still read it; for `runs/{run_id}`, the offset is older "
    "than the retained events.",
    422: "The Idempotency-Key was used for another request. Nothing was written.",
}
_ERROR_HEADERS: Final[dict[int, dict[str, Any]]] = {
    403: _headers(Producer_Epoch="On a stale producer: the epoch the stream holds."),
    405: _headers(Allow="The methods a run's event log takes: `GET, HEAD`."),
    409: _headers(
        Stream_Closed="`true`: the stream is closed.",
        Stream_Next_Offset="The closed stream's tail.",
        Producer_Expected_Seq="The `Producer-Seq` the stream expected.",
        Producer_Received_Seq="The `Producer-Seq` it got.",
    ),
}


def _responses(success: dict[int | str, dict[str, Any]], *errors: int) -> dict[int | str, dict[str, Any]]:
    documented = dict(success)
    for status, entry in error_responses(*errors, notes=_STREAM_NOTES).items():
        if status in _ERROR_HEADERS:
            entry = {**entry, "headers": _ERROR_HEADERS[status]}
        documented[status] = entry
    return documented


_WRITTEN: Final = _headers(Stream_Next_Offset=_NEXT, Stream_Closed="`true` when the stream is closed.")
_BODY_ERRORS: Final = (400, 413, 422)
CREATE_DOC: Final[dict[str, Any]] = {
    "responses": _responses(
        {
            200: {"description": "It exists with the same configuration.", "headers": _WRITTEN},
            201: {
                "description": "Created.",
                "headers": {**_WRITTEN, **_headers(Location="The stream's URL.")},
            },
        },
        *_BODY_ERRORS,
        401,
        403,
        404,
        405,
        409,
        503,
    ),
    "openapi_extra": {"parameters": _CREATE_PARAMETERS, "requestBody": _BODY},
}
_APPENDED: Final = {
    **_WRITTEN,
    **_headers(
        Producer_Epoch="The producer's epoch, echoed.", Producer_Seq="The producer's last applied seq."
    ),
}
APPEND_DOC: Final[dict[str, Any]] = {
    "responses": _responses(
        {
            200: {"description": "A producer's new batch, appended.", "headers": _APPENDED},
            204: {"description": "Appended (or closed; or a producer's duplicate).", "headers": _APPENDED},
        },
        *_BODY_ERRORS,
        401,
        403,
        404,
        405,
        409,
        410,
        503,
    ),
    "openapi_extra": {"parameters": _APPEND_PARAMETERS, "requestBody": _BODY},
}
DELETE_DOC: Final[dict[str, Any]] = {
    "responses": _responses({204: {"description": "Deleted."}}, 400, 401, 403, 404, 405, 410, 503),
    "openapi_extra": {"parameters": [_NAME]},
}
HEAD_DOC: Final[dict[str, Any]] = {
    "responses": _responses(
        {
            200: {
                "description": "The stream's metadata (no body).",
                "headers": {
                    **_WRITTEN,
                    **_headers(
                        Stream_TTL="Its TTL in seconds, when it has one.",
                        Stream_Expires_At="When it expires, when it has a time.",
                        Cache_Control="`no-store`.",
                    ),
                },
            }
        },
        400,
        401,
        403,
        404,
        410,
        503,
    ),
    "openapi_extra": {"parameters": [_NAME]},
}
_READ: Final = {
    **_headers(
        Stream_Next_Offset=_NEXT,
        Stream_Up_To_Date="`true` when the answer reaches the stream's tail.",
        Stream_Closed="`true` when it reaches the closed stream's end.",
        Stream_Cursor="With `live`: the cursor to send with the next read.",
        ETag="A catch-up read's validator (for If-None-Match).",
        Cache_Control="Whether the answer may be cached.",
    ),
}
READ_DOC: Final[dict[str, Any]] = {
    "responses": _responses(
        {
            200: {
                "description": "The data from the offset on: the stream's bytes in its content type "
                "(JSON mode: an array of its messages), or with `live=sse` an event stream of `data` "
                "and `control` events.",
                "headers": _READ,
                "content": {
                    "application/json": {"schema": {"type": "array", "items": {}}},
                    "text/event-stream": {"schema": {"type": "string"}},
                    "*/*": {"schema": {}},
                },
            },
            204: {"description": "A long-poll that no data reached in time.", "headers": _READ},
            304: {
                "description": "Unchanged since the If-None-Match ETag.",
                "headers": _headers(ETag="The same ETag.", Stream_Next_Offset=_NEXT),
            },
        },
        400,
        401,
        403,
        404,
        410,
        503,
    ),
    "openapi_extra": {"parameters": _READ_PARAMETERS},
}
