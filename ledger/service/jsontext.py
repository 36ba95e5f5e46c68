"""Checks on a raw request body, before anything parses it for the endpoint: bytes first, then
structure.

**Encoding.** JSON exchanged between systems is UTF-8 (RFC 8259), and so is every body the service
reads (`encoding_problem`): strict UTF-8 (no encoded surrogates, no overlong forms), no byte order
mark and no NUL byte, else 400 naming what the bytes look like. Python's `json.loads(bytes)`
would guess UTF-16 or UTF-32 from the NUL bytes and read the body as that, behind the back of the
depth count below (`{"pad":"Ģ"...` in UTF-16-LE holds the byte pair `22 01`: a quote to a byte
counter). A NUL byte never occurs in JSON text (control characters are escaped inside strings and
are not whitespace outside them), so refusing it costs valid JSON nothing and leaves every parser
downstream reading exactly the UTF-8 text that was checked.

**Nesting.** JSON deeper than `MAX_JSON_DEPTH` levels is refused whole (422) before anything is
written. Python's parser would recurse once per level - a body nested 100,000 deep must get an
answer, not exhaust the stack - and a stored value that deep would break every later read of the
run. The count runs on the checked UTF-8 bytes, which is what the decoder reads: no byte of a
multi-byte UTF-8 sequence is ASCII, so brackets and quotes are found exactly where the decoded
text has them.

Everything about values (NUL escapes, lone surrogate escapes, ranges) is the library's: free text
(log lines, messages, errors) is repaired there and structured values are refused naming their
field, which a check on the raw body could not tell apart.

How the depth is counted: the brackets outside strings, without parsing and without a Python-level
loop over the body (strings are cut out by splitting at their quotes, every other byte by
`bytes.translate`, and the running depth is summed by `itertools.accumulate`); that is exact for
valid JSON. Only a body the count finds too deep is parsed, to tell deep JSON (422) from broken
JSON (the endpoint's 400).
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass
from itertools import accumulate
from typing import Final

from ledger.validate import MAX_JSON_DEPTH, json_depth

__all__ = [
    "BodyRefusal",
    "body_problem",
    "bracket_depth",
    "encoding_problem",
    "too_deep",
]

_NOT_BRACKET: Final = bytes(byte for byte in range(256) if byte not in b"[]{}")
_SIGNS: Final = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # as signed bytes: +1, -1
# Longest first: the UTF-32-LE mark begins with the UTF-16-LE one.
_BYTE_ORDER_MARKS: Final = (
    (codecs.BOM_UTF32_LE, "UTF-32-LE"),
    (codecs.BOM_UTF32_BE, "UTF-32-BE"),
    (codecs.BOM_UTF8, "UTF-8 with a byte order mark"),
    (codecs.BOM_UTF16_LE, "UTF-16-LE"),
    (codecs.BOM_UTF16_BE, "UTF-16-BE"),
)

_ENCODING_CODE: Final = "invalid_encoding"
_DEPTH_CODE: Final = "too_deep"


@dataclass(frozen=True)
class BodyRefusal:
    """Why a body is refused before the app sees it: the status, the answer's `code` and message."""

    status: int
    code: str
    message: str


def encoding_problem(body: bytes) -> str | None:
    """A message when `body` is not UTF-8 text as JSON can be (see the module docstring), else
    None. An empty body is fine (the endpoint says whether it needs one)."""
    if body.isascii():  # the usual body, answered without decoding
        return None if b"\x00" not in body else _not_utf8(_guess(body) or _nul_at(body))
    for mark, name in _BYTE_ORDER_MARKS:
        if body.startswith(mark):
            return _not_utf8(f"it is {name}")
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        guessed = _guess(body)
        return _not_utf8(guessed or f"byte 0x{body[exc.start]:02x} at offset {exc.start}: {exc.reason}")
    return None if b"\x00" not in body else _not_utf8(_guess(body) or _nul_at(body))


def _guess(body: bytes) -> str | None:
    """What a body without a byte order mark looks like by its NUL bytes (as `json` would guess),
    or None when it does not look like UTF-16 or UTF-32."""
    head = body[:4]
    if len(head) < 2:
        return None
    if head[0] == 0:
        return "it looks like UTF-32-BE" if head[1] == 0 else "it looks like UTF-16-BE"
    if head[1] == 0:
        return "it looks like UTF-32-LE" if head[2:4] == b"\x00\x00" else "it looks like UTF-16-LE"
    return None


def _nul_at(body: bytes) -> str:
    return f"a NUL byte at offset {body.index(0)} (JSON text never holds one)"


def _not_utf8(why: str) -> str:
    return f"body: must be UTF-8 JSON; {why}"


def bracket_depth(body: bytes) -> int:
    """How deep the brackets outside strings nest (the JSON depth of a valid JSON body)."""
    if b"\\" in body:
        # Escapes pair left to right: drop escaped backslashes first, then escaped quotes, and
        # every quote left delimits a string.
        body = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(body.split(b'"')[::2])
    # +1 per opening bracket, -1 per closing one, summed in C: the deepest running sum.
    return max(accumulate(memoryview(outside.translate(_SIGNS, _NOT_BRACKET)).cast("b")), default=0)


def too_deep(body: bytes) -> str | None:
    """A message when a UTF-8 body (`encoding_problem` found none) nests deeper than
    `MAX_JSON_DEPTH` levels, else None (also for a body that is not JSON: the JSON parser reports
    that)."""
    # Each level opens a bracket: with few of them there is nothing to count (the common case).
    if body.count(b"[") + body.count(b"{") <= MAX_JSON_DEPTH or bracket_depth(body) <= MAX_JSON_DEPTH:
        return None
    try:
        value = json.loads(body.decode("utf-8"))
    except RecursionError:
        # Deeper than the interpreter's recursion limit, which is far above MAX_JSON_DEPTH.
        return _message()
    except ValueError:
        return None
    return _message() if json_depth(value) > MAX_JSON_DEPTH else None


def body_problem(body: bytes) -> BodyRefusal | None:
    """Why a request body is refused before the app sees it (bytes first, then nesting), or None."""
    encoding = encoding_problem(body)
    if encoding is not None:
        return BodyRefusal(400, _ENCODING_CODE, encoding)
    depth = too_deep(body)
    if depth is not None:
        return BodyRefusal(422, _DEPTH_CODE, depth)
    return None


def _message() -> str:
    return f"body: JSON nests deeper than {MAX_JSON_DEPTH} levels"
