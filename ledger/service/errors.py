"""How failures become HTTP answers: always `{"error": "<what is wrong>", "code": "<which kind>"}`,
never a stack trace. `code` is machine-readable: by status (`CODE_BY_STATUS`) unless the failure
names a more precise one; docs/errors.md lists them all.

| raised                                   | status | why                                        |
|------------------------------------------|--------|--------------------------------------------|
| body not UTF-8 (`invalid_encoding`),     | 400    | the request could not be read at all        |
| malformed JSON, non-JSON body            |        |                                            |
| `InvalidInput`, request validation       | 422    | readable, but a field is wrong ("field: …") |
| `NotFound`, unknown route                | 404    |                                            |
| a method the route does not take         | 405    |                                            |
| `Conflict`                               | 409    | contradicts stored state; `code` says how   |
| `CursorExpired`                          | 410    | answer also carries `first_seq`             |
| `PayloadTooLarge`, body over the limit   | 413    |                                            |
| `OverflowError` (a number out of range)  | 422    | backstop for input the library let through  |
| `LedgerUnavailable`: connection lost,    | 503    | with `Retry-After`: a fault of the database,|
| pool timeout, lock or statement timeout  |        | not of the request; retrying may succeed    |
| `SchemaMissing`                          | 503    | `schema_missing`, with `Retry-After`: the   |
|                                          |        | database is not migrated (yet)             |
| anything else                            | 500    | a bug: logged with its traceback            |

Only the ledger's own errors are mapped: the stores translate the driver's where they meet it
(`ledger.db.driver_errors`: a constraint the stored rows hold is a `Conflict`, a value the
database refuses an `InvalidInput`, a lost connection `DatabaseUnavailable`), so a psycopg class
that reaches this edge is a bug, answered 500 like any other.

A 409 carries a machine-readable `code` where a client must act on it: `stale_attempt` (the
producer attempt was superseded: stop), `terminal` (the run already ended; the answer also holds
the stored `terminal` state, so the client can say who ended it and how) and `instance_mapped`
(the instance serves another live run).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from ledger import shapes, tracing
from ledger.errors import (
    BadStreamRequest,
    Conflict,
    CursorExpired,
    InstanceMapped,
    InvalidInput,
    LedgerError,
    LedgerUnavailable,
    NotFound,
    PayloadTooLarge,
    ReadOnlyStream,
    RunTerminal,
    SchemaMissing,
    StaleAttempt,
    StaleProducer,
    StreamGone,
    Unauthorized,
)
from ledger.service.json_answer import JsonAnswer

__all__ = [
    "CODE_BY_STATUS",
    "ERROR_DESCRIPTIONS",
    "RETRY_AFTER_S",
    "UNAVAILABLE_ERRORS",
    "describe_validation_error",
    "error_body",
    "error_responses",
    "handled_answer",
    "install_error_handlers",
    "status_for",
    "unavailable_code",
    "unavailable_message",
]

_log = logging.getLogger("ledger.service")

# What each error status means, for the OpenAPI document (`error_responses`).
ERROR_DESCRIPTIONS: Final[dict[int, str]] = {
    400: "The body could not be read: not UTF-8 (`code`: `invalid_encoding`), malformed JSON, or not "
    "JSON at all (`code`: `bad_request`).",
    401: "No bearer token, or not one the service accepts (`code`: `unauthorized` or `token_expired`).",
    403: "The token is valid, but its scope does not cover this request; `error` says which token "
    "would (`code`: `forbidden`).",
    404: "No such run (`code`: `not_found`).",
    409: "Contradicts the stored state: `code` is `stale_attempt` (with the current "
    "`producer_attempt`: stop), `terminal` (with the stored `terminal` state), `instance_mapped` "
    "or `conflict`.",
    410: "The cursor is older than the oldest retained event (`code`: `cursor_expired`, with `first_seq`).",
    413: "The body is larger than the service's limit (LEDGER_MAX_BODY_BYTES): `code` `too_large`, "
    "with the limit in `max_body_bytes` (also in `GET /v1/limits`).",
    422: "A value is out of bounds (`error` names the field; `code`: `invalid`), the body nests too "
    "deep (`code`: `too_deep`), or the Idempotency-Key was used for another request. Nothing was "
    "written.",
    503: "The database is unavailable (connection lost, pool exhausted, lock or statement timeout), "
    "the run is busy, or the database has no ledger schema yet (`code`: `unavailable`, `busy` or "
    "`schema_missing`): retry after `Retry-After` seconds. "
    "Nothing was written.",
}

# The status of each refusal (the first class that matches): the library's errors carry none.
_STATUS_BY_ERROR: tuple[tuple[type[LedgerError], int], ...] = (
    (BadStreamRequest, 400),
    (StaleProducer, 403),
    (ReadOnlyStream, 405),
    (StreamGone, 410),
    (Unauthorized, 401),
    (InvalidInput, 422),
    (NotFound, 404),
    (Conflict, 409),
    (CursorExpired, 410),
    (PayloadTooLarge, 413),
)


# The `code` of an error answer with this status, where the failure names none more precise (a
# 409's `stale_attempt`, a 401's `token_expired`...). Every answer the service writes has one.
CODE_BY_STATUS: Final[dict[int, str]] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    410: "gone",
    413: "too_large",
    422: "invalid",
    431: "headers_too_large",
    500: "internal",
    503: "unavailable",
}


def error_body(status: int, message: str, code: str | None = None, **extra: Any) -> dict[str, Any]:
    """An error answer's body: `error`, `code` (the status' own unless given), then `extra`."""
    code = code or CODE_BY_STATUS.get(status, "error")
    # What a person looking at the trace needs: why the request was refused.
    tracing.annotate(error=message, error_code=code)
    return {"error": message, "code": code, **extra}


# Seconds a client should wait before retrying after a 503.
RETRY_AFTER_S = 1


def error_responses(
    *statuses: int, notes: Mapping[int, str] | None = None
) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route or router for the error statuses it can answer, each with the
    error body's schema; `notes` replace a status' usual description where a route says more."""
    notes = notes or {}
    documented: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {
            "model": shapes.ErrorBody,
            "description": notes[status] if status in notes else ERROR_DESCRIPTIONS[status],
        }
        if status == 503:
            entry["headers"] = {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}}
        documented[status] = entry
    return documented


def _error_response(status: int, message: str, code: str | None = None, **extra: Any) -> JsonAnswer:
    return JsonAnswer(error_body(status, message, code, **extra), status_code=status)


# The errors answered 503 with `Retry-After`: not served now, and the same request may succeed
# later (once the database is back, or migrated).
UNAVAILABLE_ERRORS: Final = (LedgerUnavailable, SchemaMissing)


def unavailable_code(exc: BaseException) -> str:
    """The `code` of the 503 answer to one of `UNAVAILABLE_ERRORS`."""
    return "schema_missing" if isinstance(exc, SchemaMissing) else "unavailable"


def _unavailable_response(exc: BaseException) -> JsonAnswer:
    """The 503 answer to one of `UNAVAILABLE_ERRORS`."""
    response = _error_response(503, unavailable_message(exc), unavailable_code(exc))
    response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


def unavailable_message(exc: BaseException) -> str:
    first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"the database is unavailable, retry later ({first_line})"


def _conflict_details(exc: Conflict) -> dict[str, Any]:
    """The machine-readable part of a 409 answer: `code`, and what the client needs to act on it."""
    if isinstance(exc, StaleAttempt):
        return {"code": "stale_attempt", "producer_attempt": exc.current}
    if isinstance(exc, RunTerminal):
        return {"code": "terminal", "terminal": exc.terminal}
    if isinstance(exc, InstanceMapped):
        return {"code": "instance_mapped"}
    return {}


def status_for(exc: LedgerError) -> int:
    for cls, status in _STATUS_BY_ERROR:
        if isinstance(exc, cls):
            return status
    return 400


def _field_name(loc: Sequence[Any]) -> str:
    # ("body", "events", 0, "type") -> "events[0].type"; ("query", "after") -> "after".
    parts = list(loc[1:]) if loc and loc[0] in ("body", "query", "path", "header") else list(loc)
    name = ""
    for part in parts:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or (str(loc[0]) if loc else "request")


def describe_validation_error(errors: Sequence[Any]) -> tuple[int, str]:
    """The status and message for FastAPI/pydantic validation errors (the first error is named)."""
    first: Mapping[str, Any] = errors[0] if errors else {"loc": ("body",), "msg": "invalid"}
    loc = tuple(first.get("loc", ()))
    if first.get("type") == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "malformed")
        return 400, f"body: invalid JSON ({detail})"
    if loc == ("body",) and isinstance(first.get("input"), bytes | bytearray):
        return 400, "body: not JSON (send a JSON object with Content-Type: application/json)"
    message = str(first.get("msg", "invalid"))
    message = message.removeprefix("Value error, ")
    problem = message[:1].lower() + message[1:]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return 422, f"{_field_name(loc)}: {problem}{more}"


async def _ledger_error(request: Request, exc: Exception) -> JsonAnswer:
    assert isinstance(exc, LedgerError)
    if isinstance(exc, CursorExpired):
        return _error_response(410, exc.message, "cursor_expired", first_seq=exc.first_seq)
    if isinstance(exc, Conflict):
        return _error_response(409, exc.message, **_conflict_details(exc))
    return _error_response(status_for(exc), exc.message)


async def _validation_error(request: Request, exc: Exception) -> JsonAnswer:
    assert isinstance(exc, RequestValidationError)
    status, message = describe_validation_error(exc.errors())
    return _error_response(status, message)


async def _http_error(request: Request, exc: Exception) -> JsonAnswer:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404 and exc.detail == "Not Found":
        message = f"no such endpoint: {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    response = _error_response(exc.status_code, message)
    for name, value in (exc.headers or {}).items():
        response.headers[name] = value
    return response


async def _unavailable(request: Request, exc: Exception) -> JsonAnswer:
    _log.warning(
        "database unavailable: %s",
        unavailable_message(exc),
        extra={"method": request.method, "path": request.url.path, "error_type": type(exc).__name__},
    )
    return _unavailable_response(exc)


async def _overflow(request: Request, exc: Exception) -> JsonAnswer:
    # Backstop: a number too large for a time or an integer column that the library did not refuse.
    _log.warning(
        "number out of range reached the library",
        exc_info=exc,
        extra={"method": request.method, "path": request.url.path},
    )
    return _error_response(422, f"invalid input: a number is out of range ({exc})")


async def _unexpected(request: Request, exc: Exception) -> JsonAnswer:
    _log.error("unhandled error serving %s %s", request.method, request.url.path, exc_info=exc)
    return _error_response(500, "internal error (logged on the server)")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(LedgerError, _ledger_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    for fault in UNAVAILABLE_ERRORS:
        app.add_exception_handler(fault, _unavailable)
    app.add_exception_handler(OverflowError, _overflow)
    app.add_exception_handler(Exception, _unexpected)


async def handled_answer(request: Request, exc: Exception) -> Response:
    """The answer the app's exception handler for `exc` gives, looked up as Starlette looks it up,
    for a route served outside FastAPI's routing (`append_route`, `read_route`), whose failures
    Starlette's exception middleware never sees; an exception with no handler of its own (a bug) is
    raised on to the server error handler."""
    app = request.app
    assert isinstance(app, FastAPI)
    handlers = app.exception_handlers
    handler = handlers.get(exc.status_code) if isinstance(exc, HTTPException) else None
    for cls in type(exc).__mro__:
        if handler is not None or cls is Exception:
            break
        handler = handlers.get(cls)
    if handler is None:
        raise exc
    answer = handler(request, exc)
    if inspect.isawaitable(answer):
        answer = await answer
    assert isinstance(answer, Response)
    return answer
