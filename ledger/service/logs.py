"""Structured logs: one JSON object per line, carrying the run id of the request being served.

The request middleware puts the run id (from the path) into a context variable; every record logged
while serving that request - by the service or the library below it - carries it.

Every request writes one access line (`AccessLog`), so its cost is paid per answer: when one append
wakes a thousand long-polls, that is a thousand records built through `Logger.info` (the caller
lookup walks the stack, the record splits its file name) and formatted through the generic walk of
the record's attributes, the largest part of each answer that was ours. The access line's record is built
directly (its caller's place is looked up once: it has one), only when the logger is enabled, and
`JsonFormatter` writes its fixed fields without the walk. The line is the same either way, byte for
byte; a record that is not plainly an access line (a filter added to it, another record factory) takes
the generic way.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import threading
import time
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Final

import orjson

__all__ = [
    "AccessLog",
    "AccessRecord",
    "JsonFormatter",
    "configure_json_logging",
    "current_run_id",
    "iso_timestamp",
]

current_run_id: ContextVar[str | None] = ContextVar("ledger_run_id", default=None)

# Attributes every LogRecord has; anything else was passed with `extra=` and is logged as a field.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's ANSI-coloured duplicate of the message
}


# The second of the last timestamp written and its date and time as text, one tuple (read whole, so a
# thread writing another second's meanwhile cannot mix the two): log lines come many a second, and
# building a `datetime` for each costs more than the rest of an access line's fields.
_second_written: list[tuple[int | None, str]] = [(None, "")]


def iso_timestamp(created: float) -> str:
    """`datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")`, the same text
    (rounded to the microsecond half to even as `fromtimestamp` rounds, then cut to milliseconds),
    with the part up to the second made once per second."""
    fraction, whole = math.modf(created)
    micros = round(fraction * 1e6)
    if micros >= 1_000_000:
        whole += 1
        micros -= 1_000_000
    second = int(whole)
    written = _second_written[0]
    if written[0] != second:
        written = _second_written[0] = (second, datetime.fromtimestamp(second, UTC).isoformat()[:-6])
    return f"{written[1]}.{micros // 1000:03d}+00:00"


class AccessRecord(logging.LogRecord):
    """The record of one access line: `"%s %s %s"` of the method, path and status, with `route`,
    `status` and `duration_ms` as extra fields (in that order), as `Logger.info` would build it from
    the same call, but with its caller's place given (`where`: path, line, function, file name,
    module), found once for the one place that writes access lines, not per record."""

    def __init__(
        self,
        name: str,
        method: str,
        path: str,
        status: int,
        route: str,
        duration_ms: float,
        where: tuple[str, int, str, str, str],
    ) -> None:
        created = time.time()
        self.name = name
        self.msg = "%s %s %s"
        self.args = (method, path, status)
        self.levelname = "INFO"
        self.levelno = logging.INFO
        self.pathname, self.lineno, self.funcName, self.filename, self.module = where
        self.exc_info = None
        self.exc_text = None
        self.stack_info = None
        self.created = created
        self.msecs = int((created - int(created)) * 1000) + 0.0
        self.relativeCreated = (created - _LOGGING_STARTED) * 1000
        self.thread = threading.get_ident() if logging.logThreads else None
        self.threadName = threading.current_thread().name if logging.logThreads else None
        self.processName = _process_name() if logging.logMultiprocessing else None
        self.process = os.getpid() if logging.logProcesses else None
        if _TASK_NAMES:
            # Python 3.12 on: the asyncio task's name, as `LogRecord` gives it.
            self.taskName = _task_name()
        self.route = route
        self.status = status
        self.duration_ms = duration_ms


# The attributes every `LogRecord` has on this Python (3.12 added `taskName`).
_RECORD_FIELDS: Final = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__)
_TASK_NAMES: Final = "taskName" in _RECORD_FIELDS
# What `relativeCreated` counts from: when the logging module was loaded.
_LOGGING_STARTED: Final[float] = vars(logging)["_startTime"]


def _task_name() -> str | None:
    asyncio = sys.modules.get("asyncio")
    if asyncio is None or not getattr(logging, "logAsyncioTasks", True):
        return None
    try:
        return str(asyncio.current_task().get_name())
    except Exception:
        return None


def _process_name() -> str:
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is None:
        return "MainProcess"
    try:
        return str(multiprocessing.current_process().name)
    except Exception:
        return "MainProcess"


# What an access record holds: any more (a filter's addition) and it is formatted the generic way.
_ACCESS_FIELDS: Final = len(_RECORD_FIELDS) + 3


class AccessLog:
    """Writes the access line of each request to the logger `name` (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self.logger = logging.getLogger(name)
        self._where: tuple[str, int, str, str, str] | None = None

    def write(self, method: str, path: str, status: int, route: str, seconds: float) -> None:
        """Log `"<method> <path> <status>"` with the route template, status and duration; nothing
        is built while the logger would drop it."""
        logger = self.logger
        if not logger.isEnabledFor(logging.INFO):
            return
        duration_ms = round(seconds * 1000, 2)
        if logging.getLogRecordFactory() is not logging.LogRecord:
            # Someone adds to every record: their factory builds this one too.
            extra = {"route": route, "status": status, "duration_ms": duration_ms}
            logger.info("%s %s %s", method, path, status, extra=extra, stacklevel=2)
            return
        if self._where is None:
            # The caller's place, as `Logger.info` would find it; there is one caller.
            pathname, lineno, func, _ = logger.findCaller(stacklevel=2)
            filename = os.path.basename(pathname)
            self._where = (pathname, lineno, func, filename, os.path.splitext(filename)[0])
        logger.handle(AccessRecord(logger.name, method, path, status, route, duration_ms, self._where))


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "message", "run_id"?, ...extra fields}` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        if type(record) is AccessRecord and len(record.__dict__) == _ACCESS_FIELDS:
            return _dumps(_access_entry(record))
        entry: dict[str, Any] = {
            "ts": iso_timestamp(record.created),
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
        return _dumps(entry)


def _access_entry(record: AccessRecord) -> dict[str, Any]:
    """The generic entry of an access record, its fields named instead of found."""
    entry: dict[str, Any] = {
        "ts": iso_timestamp(record.created),
        "level": "info",
        "logger": record.name,
        "message": record.getMessage(),
    }
    run_id = current_run_id.get()
    if run_id is not None:
        entry["run_id"] = run_id
    entry["route"] = record.route
    entry["status"] = record.status
    entry["duration_ms"] = record.duration_ms
    return entry


def _dumps(entry: dict[str, Any]) -> str:
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
