"""JSON text Postgres cannot store: unpaired UTF-16 surrogates (`"\\ud800"`).

JSON allows them as escapes and Python decodes them into `str`, but they are not Unicode scalar
values, so encoding the text for Postgres fails deep inside a statement. The service refuses such a
body up front, naming where the bad string is. (NUL, which Postgres text also refuses, is checked by
the library per field.)
"""

from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
# Only bodies holding a \uD8xx-\uDFxx escape can decode to a surrogate: the common case skips parsing.
_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _find(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        return path if _SURROGATE.search(value) else None
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _find(item, f"{path}[{index}]")
            if found is not None:
                return found
    elif isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if _SURROGATE.search(key):
                return path or "body"
            found = _find(item, where)
            if found is not None:
                return found
    return None


def unpaired_surrogate(body: bytes) -> str | None:
    """A message naming the first string with an unpaired surrogate, or None (also for non-JSON:
    the JSON parser reports that)."""
    if not _ESCAPE.search(body):
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    where = _find(value, "")
    if where is None:
        return None
    return f"{where or 'body'}: contains an unpaired UTF-16 surrogate escape, which is not valid Unicode"
