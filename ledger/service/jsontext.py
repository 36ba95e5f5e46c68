"""Checks on a raw JSON request body, before anything parses it for the endpoint.

Only nesting is checked here: JSON deeper than `MAX_JSON_DEPTH` levels is refused whole (422)
before anything is written. Python's parser would recurse once per level - a body nested 100,000
deep must get an answer, not exhaust the stack - and a stored value that deep would break every
later read of the run.

Everything about values (NUL, lone surrogates, ranges) is the library's: free text (log lines,
messages, errors) is repaired there and structured values are refused naming their field, which a
check on the raw body could not tell apart.

How: the brackets outside strings are counted, without parsing (strings are cut out by one
regular expression, every other byte by `bytes.translate`); that is exact for valid JSON. Only a
body the count finds too deep is parsed, to tell deep JSON (422) from broken JSON (the endpoint's
400).
"""

from __future__ import annotations

import json
import re
from typing import Final

from ledger.validate import MAX_JSON_DEPTH, json_depth

# A JSON string, escapes included (unrolled: no backtracking on long strings).
_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET: Final = bytes(byte for byte in range(256) if byte not in b"[]{}")
_OPENING: Final = frozenset(b"[{")


def bracket_depth(body: bytes) -> int:
    """How deep the brackets outside strings nest (the JSON depth of a valid JSON body)."""
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKET)
    depth = deepest = 0
    for byte in brackets:
        if byte in _OPENING:
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


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
