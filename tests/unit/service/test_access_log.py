"""The access line: the documented line, byte for byte, built the cheap way and the generic way alike."""

from __future__ import annotations

import io
import json
import logging
import random
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ledger.service import logs, middleware
from ledger.service.logs import AccessLog, AccessRecord, JsonFormatter, current_run_id, iso_timestamp

OPERATIONS = Path(__file__).resolve().parents[3] / "docs" / "operations.md"
ACCESS = "ledger.service.access"


class Kept(logging.Handler):
    """Keeps every record it is handed, and its JSON line."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept() -> Iterator[Kept]:
    logger = logging.getLogger(ACCESS)
    handler = Kept()
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def documented_line() -> str:
    """The access line docs/operations.md shows (its one JSON block with an access line)."""
    blocks = re.findall(r"```json\n(.*?)\n```", OPERATIONS.read_text(), re.DOTALL)
    lines = [block for block in blocks if f'"logger":"{ACCESS}"' in block]
    assert len(lines) == 1, lines
    return lines[0]


def written(kept: Kept, created: float | None = None) -> str:
    record = kept.records[-1]
    if created is not None:
        record.created = created
    return kept.format(record)


def test_the_access_line_is_the_documented_one(kept: Kept) -> None:
    documented = documented_line()
    entry = json.loads(documented)
    created = datetime.fromisoformat(entry["ts"]).timestamp()
    method, path, status = entry["message"].split(" ")
    token = current_run_id.set(entry["run_id"])
    try:
        AccessLog(ACCESS).write(method, path, int(status), entry["route"], entry["duration_ms"] / 1000)
        line = written(kept, created)
    finally:
        current_run_id.reset(token)
    assert type(kept.records[-1]) is AccessRecord
    assert line == documented


def generic_line(
    kept: Kept, method: str, path: str, status: int, route: str, duration_ms: float, created: float
) -> str:
    """The line `Logger.info` with the same arguments gives (what the access line was written with)."""
    logging.getLogger(ACCESS).info(
        "%s %s %s", method, path, status, extra={"route": route, "status": status, "duration_ms": duration_ms}
    )
    assert type(kept.records[-1]) is logging.LogRecord
    return written(kept, created)


@pytest.mark.parametrize(
    ("method", "path", "status", "route", "seconds", "run_id"),
    [
        ("GET", "/v1/runs/r-1/events", 200, "/v1/runs/{run_id}/events", 0.00142, "r-1"),
        ("POST", "/v1/runs", 201, "/v1/runs", 0.0, None),
        ("GET", "/v1/runs/日本/events/stream", 503, "/v1/runs/{run_id}/events/stream", 12.345678, "日本"),
        ("DELETE", '/x"y\\z\n', 404, "unmatched", 1e-9, 'quote"d'),
    ],
)
def test_the_access_line_is_the_line_logger_info_wrote(
    kept: Kept, method: str, path: str, status: int, route: str, seconds: float, run_id: str | None
) -> None:
    token = current_run_id.set(run_id)
    try:
        AccessLog(ACCESS).write(method, path, status, route, seconds)
        created = kept.records[-1].created
        ours = written(kept)
        record = kept.records[-1]
        theirs = generic_line(kept, method, path, status, route, round(seconds * 1000, 2), created)
    finally:
        current_run_id.reset(token)
    assert ours == theirs
    # Every attribute a formatter of the operator's own may use is there, as `Logger.info` sets it.
    generic = kept.records[-1]
    assert record.__dict__.keys() == generic.__dict__.keys()
    same = ("name", "msg", "args", "levelname", "levelno", "exc_info", "exc_text", "stack_info")
    assert all(getattr(record, name) == getattr(generic, name) for name in same)
    assert (record.thread, record.threadName, record.process, record.processName) == (
        generic.thread,
        generic.threadName,
        generic.process,
        generic.processName,
    )
    assert record.getMessage() == generic.getMessage() == f"{method} {path} {status}"


def test_the_access_record_names_its_callers_place(kept: Kept) -> None:
    # The place is the one line of the middleware that writes access lines, found once.
    access = AccessLog(ACCESS)
    for _ in range(2):
        access.write("GET", "/", 200, "/", 0.001)
    first, second = kept.records
    assert (first.pathname, first.filename, first.module, first.funcName) == (
        __file__,
        Path(__file__).name,
        Path(__file__).stem,
        "test_the_access_record_names_its_callers_place",
    )
    assert first.lineno == second.lineno > 0
    assert middleware.AccessLog is AccessLog


def test_a_disabled_access_log_builds_nothing(kept: Kept, monkeypatch: pytest.MonkeyPatch) -> None:
    def built(*args: object) -> None:
        raise AssertionError("an access record was built for a logger that drops it")

    monkeypatch.setattr(logs, "AccessRecord", built)
    logging.getLogger(ACCESS).setLevel(logging.WARNING)
    AccessLog(ACCESS).write("GET", "/", 200, "/", 0.001)
    assert kept.records == []
    logging.getLogger(ACCESS).setLevel(logging.INFO)
    monkeypatch.undo()
    logging.disable(logging.INFO)
    try:
        AccessLog(ACCESS).write("GET", "/", 200, "/", 0.001)
    finally:
        logging.disable(logging.NOTSET)
    assert kept.records == []


def test_another_record_factory_builds_the_access_record_too(kept: Kept) -> None:
    factory = logging.getLogRecordFactory()

    def tagged(*args: object, **kwargs: object) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        record.trace_id = "t-1"
        return record

    logging.setLogRecordFactory(tagged)
    try:
        AccessLog(ACCESS).write("GET", "/v1/runs", 200, "/v1/runs", 0.002)
    finally:
        logging.setLogRecordFactory(factory)
    entry = json.loads(written(kept))
    assert entry["trace_id"] == "t-1"
    assert list(entry)[-4:] == ["trace_id", "route", "status", "duration_ms"]
    assert kept.records[-1].funcName == "test_another_record_factory_builds_the_access_record_too"


def test_a_field_a_filter_adds_is_written_as_on_any_record(kept: Kept) -> None:
    def add(record: logging.LogRecord) -> bool:
        record.replica = "a"
        return True

    kept.addFilter(add)
    AccessLog(ACCESS).write("GET", "/v1/runs", 200, "/v1/runs", 0.002)
    entry = json.loads(written(kept))
    assert list(entry)[-4:] == ["route", "status", "duration_ms", "replica"]


def test_the_timestamp_is_the_one_datetime_writes() -> None:
    rng = random.Random(41)
    edges = [0.0, 0.0005, 0.0004995, 0.9994995, 0.9995, 0.9999994, 0.9999995, 0.9999996, 1.5e-6, 2.5e-6]
    seconds = [1_764_800_000, 1_764_800_001, 1_767_225_599, 4_102_444_799]
    stamps = [second + edge for second in seconds for edge in edges]
    stamps += [rng.uniform(1e9, 4.1e9) for _ in range(20_000)]
    # Consecutive stamps in one second, as lines come, and back in time (another thread's line).
    stamps += [1_764_800_000 + n / 997 for n in range(3000)] + [1_764_799_999.25, 1_764_800_000.75]
    for stamp in stamps:
        expected = datetime.fromtimestamp(stamp, UTC).isoformat(timespec="milliseconds")
        assert iso_timestamp(stamp) == expected, stamp


def test_a_json_handler_writes_one_access_line(capsys: pytest.CaptureFixture[str]) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(ACCESS)
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        AccessLog(ACCESS).write("GET", "/healthz", 200, "/healthz", 0.0005)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    (line,) = stream.getvalue().splitlines()
    entry = json.loads(line)
    assert list(entry) == ["ts", "level", "logger", "message", "route", "status", "duration_ms"]
    assert entry["message"] == "GET /healthz 200" and entry["duration_ms"] == 0.5
