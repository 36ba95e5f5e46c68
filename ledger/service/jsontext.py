"""Checks on a raw JSON request body, before anything parses it for the endpoint.

Only nesting is checked here: JSON deeper than `MAX_JSON_DEPTH` levels is refused whole (422)
before anything is written. Python's parser would recurse once per level - a body nested 100,000
deep must get an answer, not exhaust the stack - and a stored value that deep would break every
later read of the run.

Everything about values (NUL, lone surrogates, ranges) is the library's: free text (log lines,
messages, errors) is repaired there and structured values are refused naming their field, which a
check on the raw body could not tell apart.

How: the brackets outside strings are counted, without parsing and without a Python-level loop
over the body (strings are cut out by splitting at their quotes, every other byte by
`bytes.translate`, and the running depth is summed by `itertools.accumulate`); that is exact for
valid JSON. Only a body the count finds too deep is parsed, to tell deep JSON (422) from broken
JSON (the endpoint's 400).
"""

from __future__ import annotations

import json
from itertools import accumulate
from typing import Final

from ledger.validate import MAX_JSON_DEPTH, json_depth

_NOT_BRACKET: Final = bytes(byte for byte in range(256) if byte not in b"[]{}")
_SIGNS: Final = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # as signed bytes: +1, -1


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
    """A message when the body nests deeper than `MAX_JSON_DEPTH` levels, else None (also for a
    body that is not JSON: the JSON parser reports that)."""
    # Each level opens a bracket: with few of them there is nothing to count (the common case).
    if body.count(b"[") + body.count(b"{") <= MAX_JSON_DEPTH or bracket_depth(body) <= MAX_JSON_DEPTH:
        return None
    try:
        value = json.loads(body)
    except RecursionError:
        # Deeper than the interpreter's recursion limit, which is far above MAX_JSON_DEPTH.
        return _message()
    except ValueError:
        return None
    return _message() if json_depth(value) > MAX_JSON_DEPTH else None


def _message() -> str:
    return f"body: JSON nests deeper than {MAX_JSON_DEPTH} levels"
