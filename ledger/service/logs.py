"""Structured logs: one JSON object per line, carrying the run id of the request being served.

The request middleware puts the run id (from the path) into a context variable; every record logged
while serving that request - by the service or the library below it - carries it.
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import orjson

__all__ = [
    "JsonFormatter",
    "configure_json_logging",
    "current_run_id",
]

current_run_id: ContextVar[str | None] = ContextVar("ledger_run_id", default=None)

# Attributes every LogRecord has; anything else was passed with `extra=` and is logged as a field.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's ANSI-coloured duplicate of the message
}


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "message", "run_id"?, ...extra fields}` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        run_id = getattr(record, "run_id", None) or current_run_id.get()
        if run_id is not None:
            entry["run_id"] = run_id
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        try:
            # One line per request is logged: orjson writes it in a fraction of json's time.
            return orjson.dumps(entry, default=str).decode()
        except orjson.JSONEncodeError:
            # What orjson refuses (an integer beyond 64 bits, a lone surrogate) json still writes.
            return json.dumps(entry, default=str, ensure_ascii=False)


def configure_json_logging(level: int = logging.INFO) -> None:
    """Route the root logger (and uvicorn's) to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        named = logging.getLogger(name)
        named.handlers[:] = []
        named.propagate = True
