"""The Durable Streams protocol's pure rules: offsets, header values, content types, JSON mode.

Positions are integers: bytes of a byte stream, messages of a JSON stream. On the wire a position
is an opaque token that sorts as the position does (two zero-padded fields, the first always 0 on
this server), so `-1` and `now` can never be mistaken for one.
"""

from __future__ import annotations

import base64
import json
import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

from ledger.clock import to_s
from ledger.errors import BadStreamRequest

__all__ = [
    "MAX_NAME_BYTES",
    "NOW",
    "START",
    "Producer",
    "bad_request",
    "cursor_for",
    "format_offset",
    "is_json",
    "is_textual",
    "json_array",
    "json_messages",
    "media_type",
    "parse_bool_header",
    "parse_decimal",
    "parse_expires_at",
    "parse_offset",
    "parse_producer",
    "sse_control",
    "sse_data",
]

START: Final = "-1"
NOW: Final = "now"
_OFFSET_ZERO: Final = "0000000000000000_0000000000000000"
_MAX_SAFE_INTEGER: Final = 2**53 - 1
# The cursor's jitter comes from a generator of our own: serving a read never moves the process's
# shared `random` state.
_JITTER: Final = random.Random()
MAX_NAME_BYTES: Final = 1024
_DEFAULT_CONTENT_TYPE: Final = "application/octet-stream"

# Cursors count fixed intervals from a fixed epoch, so every server (and CDN) agrees on them.
_CURSOR_EPOCH_S: Final = to_s(datetime(2024, 10, 9, tzinfo=UTC))
_CURSOR_INTERVAL_S: Final = 20

_OFFSET = re.compile(r"^(\d{16})_(\d{16})$")
_DECIMAL = re.compile(r"^(0|[1-9][0-9]*)$")


def bad_request(message: str) -> BadStreamRequest:
    return BadStreamRequest(message)


def format_offset(position: int) -> str:
    return f"{0:016d}_{position:016d}"


_Start = Literal["-1"]
_Now = Literal["now"]


def parse_offset(raw: str, name: str = "offset") -> int | _Start | _Now:
    """A position, `-1` (the start) or `now` (the tail); 400 for anything else."""
    if raw == START:
        return START
    if raw == NOW:
        return NOW
    match = _OFFSET.fullmatch(raw)  # not `match`: its `$` also matches before a trailing newline
    if match is None:
        raise bad_request(f"{name}: not an offset this server issued ({raw[:80]!r})")
    return int(match.group(2))


def parse_decimal(name: str, raw: str, *, maximum: int = _MAX_SAFE_INTEGER) -> int:
    """A non-negative decimal integer without sign, leading zeros, fraction or exponent."""
    value = raw.strip()
    if _DECIMAL.match(value) is None or int(value) > maximum:
        raise bad_request(f"{name}: must be a non-negative integer up to {maximum} ({raw[:40]!r})")
    return int(value)


def parse_expires_at(raw: str) -> datetime:
    """An RFC 3339 timestamp with a time zone."""
    value = raw.strip()
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        parsed = None
    if parsed is None or "T" not in value.upper() or parsed.tzinfo is None:
        raise bad_request(f"Stream-Expires-At: not an RFC 3339 timestamp ({raw[:60]!r})")
    return parsed


def media_type(content_type: str) -> str:
    """The media type without parameters, lower case: what two content types are compared by."""
    return content_type.split(";", 1)[0].strip().lower()


def is_json(content_type: str) -> bool:
    return media_type(content_type) == "application/json"


def is_textual(content_type: str) -> bool:
    """Whether SSE carries the stream's bytes as text (else as base64)."""
    kind = media_type(content_type)
    return kind.startswith("text/") or kind == "application/json"


def parse_bool_header(name: str, raw: str | None) -> bool:
    if raw is None:
        return False
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise bad_request(f"{name}: must be true or false")
    return value == "true"


@dataclass(frozen=True)
class Producer:
    """An idempotent producer's headers: who, which session, which batch."""

    id: str
    epoch: int
    seq: int

    def as_json(self) -> dict[str, int | str]:
        return {"id": self.id, "epoch": self.epoch, "seq": self.seq}


def parse_producer(pid: str | None, epoch: str | None, seq: str | None) -> Producer | None:
    """The three producer headers, all or none."""
    given = [v is not None for v in (pid, epoch, seq)]
    if not any(given):
        return None
    if not all(given):
        raise bad_request("Producer-Id, Producer-Epoch and Producer-Seq: send all three or none")
    assert pid is not None and epoch is not None and seq is not None
    if not pid.strip():
        raise bad_request("Producer-Id: must not be empty")
    return Producer(pid, parse_decimal("Producer-Epoch", epoch), parse_decimal("Producer-Seq", seq))


def _not_json(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def json_messages(body: bytes, *, allow_empty: bool) -> list[bytes]:
    """The messages of a JSON-mode body: an array is flattened one level, any other value is one
    message. Each is stored re-serialized compactly (so it holds no raw newline).

    Only strict JSON is taken (400 otherwise): UTF-8, no NaN or Infinity (nor a number too large
    for a double, which reads as one), no lone surrogate escape. Every later read hands the stored
    messages to a JSON parser as they are, and none of those would parse there."""
    try:
        value = json.loads(body.decode("utf-8"), parse_constant=_not_json)
    except UnicodeDecodeError as exc:
        raise bad_request(
            f"body: not UTF-8 JSON (byte 0x{body[exc.start]:02x} at offset {exc.start})"
        ) from None
    except ValueError as exc:
        raise bad_request(f"body: invalid JSON ({exc})") from None
    except RecursionError:
        raise bad_request("body: JSON nested too deep") from None
    items = value if isinstance(value, list) else [value]
    if not items and not allow_empty:
        raise bad_request("body: an empty JSON array appends nothing")
    try:
        return [
            json.dumps(item, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
            for item in items
        ]
    except ValueError as exc:  # Infinity from a huge number; a lone surrogate (UnicodeEncodeError)
        raise bad_request(f"body: not strict JSON ({_strict_problem(exc)})") from None
    except RecursionError:
        raise bad_request("body: JSON nested too deep") from None


def _strict_problem(exc: ValueError) -> str:
    if isinstance(exc, UnicodeEncodeError):
        return "a string holds a lone surrogate escape"
    return "a number is out of range for a double"


def json_array(messages: list[bytes]) -> bytes:
    return b"[" + b",".join(messages) + b"]"


def cursor_for(now_s: float, client_cursor: str | None) -> str:
    """The `Stream-Cursor` of a live answer: the current interval, and always past the client's
    own cursor (with jitter), so a CDN never serves one cached answer in a loop."""
    current = int((now_s - _CURSOR_EPOCH_S) // _CURSOR_INTERVAL_S)
    if client_cursor is not None and client_cursor.isdigit() and int(client_cursor) >= current:
        return str(int(client_cursor) + _JITTER.randint(1, 180))
    return str(current)


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def sse_data(payload: bytes, textual: bool) -> str:
    """One SSE `data` event: every line of the payload on its own `data:` line, so no payload can
    end the event early or forge another one; a binary payload as base64."""
    text = payload.decode("utf-8", "replace") if textual else base64.b64encode(payload).decode()
    lines = _LINE_BREAK.split(text)
    return "event: data\n" + "".join(f"data:{line}\n" for line in lines) + "\n"


def sse_control(fields: dict[str, object]) -> str:
    return "event: control\ndata:" + json.dumps(fields, separators=(",", ":")) + "\n\n"
