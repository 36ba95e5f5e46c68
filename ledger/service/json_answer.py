"""How the service writes JSON answers: one encoder for every body it sends.

orjson writes the same JSON as the encoders it replaces (Starlette's `JSONResponse` and the
pydantic serializer FastAPI applies to a response model): compact, UTF-8 (not `\\u` escapes),
NaN and infinities as `null` (pydantic's choice, which the library never stores anyway), in a
fraction of their time. What orjson refuses goes to pydantic's encoder instead, which writes it
the way a response model would: an integer beyond 64 bits (a client's `result` may hold one;
jsonb keeps it exactly) and dict keys that are not strings.

`JsonAnswer` is the response class; hot routes hand it the library's answer directly, so the
answer is encoded once and not validated against its own type first (the library built it).
"""

from __future__ import annotations

from typing import Any

import orjson
import pydantic_core
from starlette.responses import JSONResponse

__all__ = [
    "JsonAnswer",
    "encode",
]


def encode(value: Any) -> bytes:
    """`value` as JSON bytes (see the module docstring)."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return pydantic_core.to_json(value, inf_nan_mode="null")


class JsonAnswer(JSONResponse):
    """A JSON answer encoded by `encode`."""

    def render(self, content: Any) -> bytes:
        return encode(content)
