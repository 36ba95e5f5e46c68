"""Answers into errors: the one reader of the service's `{"error": ...}` answers.

Every failure `ledger.client` raises is one of `ledger.errors`' classes, under the one root
`LedgerFailure`, translated here exactly once (from an answer, or from an httpx transport error):

    status               raised                          carries
    400, 422             InvalidInput                    the field, parsed from the message
    401, 403             Unauthorized                    the status and the answer's `code`
    404                  NotFound
    409                  StaleAttempt / RunTerminal / Conflict, by the answer's `code`
    410                  CursorExpired                   the first seq still held
    413                  PayloadTooLarge                 the limit the answer names
    408 429 502 503 504  LedgerUnavailable               the `Retry-After` seconds, the status
    no connection        LedgerUnavailable               the httpx error as its `__cause__`
    any other (a 500)    LedgerError                     the service's bug: not the caller's to fix

Each carries a note naming the HTTP status and the request. Nothing above this module reads an
HTTP status or catches an httpx error.
"""

from __future__ import annotations

import email.utils
import time
from typing import Any, Final, TypeVar

import httpx

from ledger.client._operations import Call
from ledger.clock import to_s
from ledger.errors import (
    Conflict,
    CursorExpired,
    InvalidInput,
    LedgerError,
    LedgerUnavailable,
    NotFound,
    PayloadTooLarge,
    RunTerminal,
    StaleAttempt,
    Unauthorized,
)
from ledger.validate import is_int

__all__ = ["error_for", "handled", "parse_answer", "parse_retry_after", "unreachable"]

_T = TypeVar("_T")

# Statuses that mean "not now" rather than "not this request": a proxy's or the service's outage,
# the service timing out the request's body (408) or shedding load (429).
_UNAVAILABLE_STATUS: Final = frozenset({408, 429, 502, 503, 504})
# Statuses that say the service did not handle the request at all: safe to send again even when
# sending it twice could create something twice.
_UNHANDLED_STATUS: Final = frozenset({408, 429})


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or an HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, to_s(when) - (time.time() if now is None else now))


def _error_text(response: httpx.Response) -> tuple[str, dict[str, Any]]:
    """The answer's `error` text and its whole body (`shapes.ErrorBody`), else its first line."""
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"]:
        return body["error"], body
    lines = response.text.strip().splitlines()
    return (lines[0][:200] if lines else response.reason_phrase or "no answer"), {}


def _int_or(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def error_for(response: httpx.Response, call: Call[Any]) -> Exception:
    """The library's exception for an error answer (the service writes `{"error": ..., ...}`)."""
    status = response.status_code
    message, body = _error_text(response)
    error: Exception
    if status in (400, 422):
        field, sep, problem = message.partition(": ")
        error = InvalidInput(field, problem) if sep else InvalidInput("request", message)
    elif status in (401, 403):
        code = body.get("code")
        error = Unauthorized(message, status=status, code=code if isinstance(code, str) else None)
    elif status == 404:
        error = NotFound(message)
    elif status == 409 and body.get("code") == "stale_attempt":
        error = StaleAttempt(call.run_id, None, _int_or(body.get("producer_attempt"), 0), message)
    elif status == 409 and body.get("code") == "terminal":
        terminal = body.get("terminal")
        error = RunTerminal(message, call.run_id, terminal if isinstance(terminal, dict) else {})
    elif status == 409:
        error = Conflict(message)
    elif status == 410:
        error = CursorExpired(call.run_id, None, _int_or(body.get("first_seq"), 0), message)
    elif status == 413:
        limit = body.get("max_body_bytes")
        error = PayloadTooLarge(message, limit if is_int(limit) and limit > 0 else None)
    elif status in _UNAVAILABLE_STATUS:
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        error = LedgerUnavailable(message, retry_after, status=status)
    else:
        # A 500 is the service's bug; nothing the caller can fix by changing the request.
        error = LedgerError(message)
    error.add_note(f"HTTP {status} from {call.method} {response.request.url.path}")
    return error


def unreachable(base_url: str, exc: httpx.TransportError) -> LedgerUnavailable:
    return LedgerUnavailable(f"cannot reach the ledger service at {base_url} ({type(exc).__name__}: {exc})")


def parse_answer(call: Call[_T], response: httpx.Response) -> _T:
    """The parsed answer, or the library's exception for an error status."""
    if response.is_error and response.status_code not in call.answers:
        raise error_for(response, call)
    return call.parse(response)


def handled(error: BaseException) -> bool:
    """False when the service surely did not handle the request that failed with `error`: the
    connection was never made, or it answered 408/429 before doing anything."""
    if isinstance(error, LedgerUnavailable) and error.status in _UNHANDLED_STATUS:
        return False
    return not isinstance(error.__cause__, httpx.ConnectError | httpx.ConnectTimeout)
