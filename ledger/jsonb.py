"""JSON text for a jsonb parameter, encoded with orjson where it can.

orjson is several times the standard encoder's speed (a 1,000-event append batch: about 0.2 ms
against 2 ms). What orjson refuses - an integer beyond 64 bits, which jsonb keeps exactly, or a
string with a lone surrogate - goes through the standard encoder, which says what is wrong.
NaN and infinities never get here: validation refuses them first (orjson would write null).
"""

from __future__ import annotations

import json
from typing import Any, Final

import orjson

_STANDARD: Final = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def dumps(value: Any) -> str:
    """`value` as compact JSON text."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return _STANDARD.encode(value)
