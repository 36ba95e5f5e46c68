"""The runner's wire format as the reporter reads it: numbers, invocation ids, log modes, and the
log lines that carry progress facts.

Runner events are camelCase JSON from a runner in any language, so a number may arrive as an
integral float (``3.0``) and anything may be junk: every helper here answers None (or -1) rather
than raise.

Three diagnostics of the play runner are parsed (the same stream a person reads):

* map start: ``Starting map over 5000 items with concurrency 8 (table namespace: leads_x;
  10 already satisfied; 4990 pending)`` — the ``(…; K …; P pending)`` tail is optional and
  ``key:`` may stand for ``table namespace:``, ``duplicate keys skipped`` for ``already satisfied``.
  Note the pattern wants text between ``items`` and the parenthesis (``… items (…)`` is no match).
* perf map setup: ``[perf] runtime map setup table=leads_x rows=5000``, at the start of the line
  after an optional ``[2026-01-01T00:00:00.000Z] `` runner timestamp prefix.
* tool batch: ``Executing tool batch enrich:1: 25 calls``, at the start of the line or after a
  ``]`` (a bracketed prefix).

All patterns are case-insensitive and ASCII-digit only. Each is looked for in the line as the ledger
stores it (`bounded_line`) and in time linear in its length, whatever the line holds: a runner's
line must never cost the reporter more than reading it.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple

from ledger.validate import INT64_MAX, MAX_EPOCH_MS, MAX_LOG_LINE_BYTES, invocation_seq, is_int, log_line

__all__ = [
    "MAP_START_MARKER",
    "MAP_START_PATTERN",
    "PERF_MAP_SETUP_MARKER",
    "PERF_MAP_SETUP_PATTERN",
    "TOOL_BATCH_AT_START",
    "TOOL_BATCH_MARKER",
    "TOOL_BATCH_PATTERN",
    "LogMode",
    "MapSetup",
    "MapStart",
    "ToolBatch",
    "as_count",
    "as_epoch_ms",
    "as_int",
    "bounded_line",
    "durable_log_filter",
    "has_timestamp_prefix",
    "invocation_sequence",
    "parse_map_setup",
    "parse_map_start",
    "parse_tool_batch",
    "strip_timestamp_prefix",
    "tool_batch_calls",
]

# Which log lines are durable: all of them, or not the worker host's own (see `durable_log_filter`).
LogMode = Literal["progress_reporter", "direct_worker"]

_FLAGS = re.IGNORECASE | re.ASCII

MAP_START_PATTERN = re.compile(
    r"Starting map over (\d+) items .* \((?:table namespace|key): ([^;)]+)"
    r"(?:; (\d+) (?:already satisfied|duplicate keys skipped); (\d+) pending)?\)",
    _FLAGS,
)
# The pattern above in parts, for `parse_map_start` (which finds what it finds in linear time).
_MAP_START_HEAD = re.compile(r"Starting map over (\d+) items ", _FLAGS)
_MAP_START_OPEN = re.compile(r" \((?:table namespace|key): ", _FLAGS)
_MAP_START_STOP = re.compile(r"[;)]")
_MAP_START_COUNTS = re.compile(
    r"; (\d+) (?:already satisfied|duplicate keys skipped); (\d+) pending\)", _FLAGS
)
PERF_MAP_SETUP_PATTERN = re.compile(r"^\[perf\] runtime map setup table=(\S+) rows=(\d+)\b", _FLAGS)
TOOL_BATCH_PATTERN = re.compile(
    r"(?:^|\]\s*)Executing tool batch\s+([A-Za-z0-9_:-]+):\s+(\d+)\s+calls\b", _FLAGS
)
# `TOOL_BATCH_PATTERN` from where its literal starts, lower case and case-sensitive, for
# `tool_batch_calls` and the fold's tool-batch line (which match it in an ASCII line's lower case
# form, where a case-insensitive pattern costs a case fold per character): what may come before
# the literal is checked by hand.
TOOL_BATCH_AT_START = re.compile(r"executing tool batch\s+[a-z0-9_:-]+:\s+(\d+)\s+calls\b", re.ASCII)
# What `\s` matches under `re.ASCII`.
_ASCII_SPACE = " \t\n\r\f\v"
# A literal each pattern above holds (lower-cased): a line whose `str.lower()` lacks it cannot
# match, and testing for it costs a fraction of a case-insensitive regex search. (`lower()` maps
# every ASCII letter to its ASCII lower case, so it can add candidates, never lose one.)
MAP_START_MARKER = "starting map over"
PERF_MAP_SETUP_MARKER = "[perf] runtime map setup"
TOOL_BATCH_MARKER = "executing tool batch"
_TIMESTAMP_PREFIX_PATTERN = re.compile(r"^\[\d{4}-\d{2}-\d{2}T[\d:.]+Z\]\s+", re.ASCII)
_PERF_TRACE_MARKER = "[perf-trace] "


@dataclass(frozen=True, slots=True, kw_only=True)
class MapStart:
    total: int
    table_namespace: str
    already_satisfied: int
    pending: int | None


class MapSetup(NamedTuple):
    table_namespace: str
    rows: int


class ToolBatch(NamedTuple):
    batch_id: str
    calls: int


def parse_map_start(line: str) -> MapStart | None:
    """The map-start diagnostic anywhere in `line` (its bounded form, `bounded_line`), or None."""
    found = _map_start_groups(bounded_line(line))
    if found is None:
        return None
    total, satisfied, pending = _digits(found[0]), _digits(found[2]), _digits(found[3])
    if total is None or (found[2] is not None and satisfied is None):
        return None
    return MapStart(
        total=total,
        table_namespace=found[1].strip(),
        already_satisfied=satisfied or 0,
        pending=pending,
    )


def _map_start_groups(line: str) -> tuple[str, str, str | None, str | None] | None:
    """The groups `MAP_START_PATTERN.search(line)` would find, in time linear in `line`.

    The pattern's ``.*`` makes a backtracking search quadratic (a line repeating its head tries
    every head against every later position). The same answer, found directly: the first head
    whose newline-free stretch holds a tail that matches, and of its tails the last one (``.*`` is
    greedy). A later head of the same stretch sees only a subset of those tails, so after the
    first head of a stretch fails, the search goes on at the next stretch.
    """
    pos = 0
    while (head := _MAP_START_HEAD.search(line, pos)) is not None:
        stretch_end = line.find("\n", head.end())
        if stretch_end < 0:
            stretch_end = len(line)
        tail = _last_map_start_tail(line, head.end(), stretch_end)
        if tail is not None:
            return (head.group(1), *tail)
        pos = stretch_end + 1
    return None


_Tail = tuple[str, str | None, str | None]


def _last_map_start_tail(line: str, start: int, stretch_end: int) -> _Tail | None:
    # `[^;)]+` stops only at the next `;` or `)` (giving characters back never helps: the next
    # thing must be one of those), so a tail is decided by where that stop is, found by bisection.
    opens = [m.end() for m in _MAP_START_OPEN.finditer(line, start, stretch_end)]
    if not opens:
        return None
    stops = [m.start() for m in _MAP_START_STOP.finditer(line, opens[0])]
    for name_start in reversed(opens):
        index = bisect.bisect_left(stops, name_start)
        if index == len(stops) or stops[index] == name_start:
            continue
        stop = stops[index]
        if line[stop] == ")":
            return line[name_start:stop], None, None
        counts = _MAP_START_COUNTS.match(line, stop)
        if counts is not None:
            return line[name_start:stop], counts.group(1), counts.group(2)
    return None


def bounded_line(line: str) -> str:
    """`line` as the ledger would store it (`ledger.validate.log_line`: repaired, and cut to the
    line bound keeping both ends): the text every diagnostic is looked for in, so a line of any
    length costs no more than one at the bound."""
    return log_line(line, MAX_LOG_LINE_BYTES)


def strip_timestamp_prefix(line: str) -> str:
    """`line` without a leading ``[ISO-timestamp] `` runner prefix."""
    if not line.startswith("["):
        return line
    return _TIMESTAMP_PREFIX_PATTERN.sub("", line, count=1)


def has_timestamp_prefix(line: str) -> bool:
    return _TIMESTAMP_PREFIX_PATTERN.match(line) is not None


def parse_map_setup(line: str) -> MapSetup | None:
    """The perf map-setup marker at the start of `line` (after an optional timestamp), or None."""
    match = PERF_MAP_SETUP_PATTERN.match(strip_timestamp_prefix(bounded_line(line)))
    rows = _digits(match.group(2)) if match is not None else None
    if match is None or rows is None:
        return None
    return MapSetup(table_namespace=match.group(1), rows=rows)


def parse_tool_batch(line: str) -> ToolBatch | None:
    """The tool-batch diagnostic, or None."""
    match = TOOL_BATCH_PATTERN.search(bounded_line(line))
    if match is None:
        return None
    batch_id, digits = match.groups()
    calls = _digits(digits)
    return None if calls is None else ToolBatch(batch_id, calls)


def tool_batch_calls(line: str, lowered: str) -> int | None:
    """The calls of `parse_tool_batch(line)` (None without a diagnostic); `lowered` is
    ``line.lower()``, which a caller that looked for the markers has already made.

    An ASCII line without NUL within the line bound is its own bounded form (a byte a character,
    nothing to repair), and its lowered form keeps every
    position and changes no digit, so the diagnostic is looked for in the lowered form, where its
    literal is, in one pass over the line:
    each place the literal starts at (the leftmost first, as a search goes), matched from there,
    when the start of the line or a ``]`` and only whitespace comes before it. Any other line takes
    `parse_tool_batch`.
    """
    if len(line) > MAX_LOG_LINE_BYTES or not line.isascii() or "\x00" in line:
        batch = parse_tool_batch(line)
        return None if batch is None else batch.calls
    at = lowered.find(TOOL_BATCH_MARKER)
    while at >= 0:
        before = at
        while before > 0 and line[before - 1] in _ASCII_SPACE:
            before -= 1
        if at == 0 or (before > 0 and line[before - 1] == "]"):
            match = TOOL_BATCH_AT_START.match(lowered, at)
            if match is not None:
                digits = match[1]
                # Up to 18 digits are always a count: the bound is checked only past them.
                return int(digits) if len(digits) < 19 else _digits(digits)
        at = lowered.find(TOOL_BATCH_MARKER, at + 1)
    return None


def as_int(value: object) -> int | None:
    """A finite integral number as int (bools and NaN are not numbers here), else None."""
    if is_int(value):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def invocation_sequence(invocation_id: object) -> int:
    """The trailing ``:<n>`` of a docflow invocation id (`ledger.validate.invocation_seq`), or -1:
    an id without one orders before invocation 0."""
    seq = invocation_seq(invocation_id)
    return -1 if seq is None else seq


def as_count(value: object) -> int | None:
    """A count the ledger can store (an int from 0 to the bigint maximum), else None: a value out
    of bounds would be dropped at upload, and must not steer the fold meanwhile either."""
    if type(value) is int:  # the usual case, answered without a call (an exact int is no bool)
        return value if 0 <= value <= INT64_MAX else None
    number = as_int(value)
    return number if number is not None and 0 <= number <= INT64_MAX else None


def as_epoch_ms(value: object) -> int | None:
    """Epoch milliseconds the ledger can store (0 up to year 9999), else None."""
    number = as_int(value)
    return number if number is not None and 0 <= number <= MAX_EPOCH_MS else None


def _digits(text: str | None) -> int | None:
    # The patterns match ASCII digits only; past a bigint a number is junk, not a count.
    if text is None or len(text) > 19:
        return None
    number = int(text)
    return number if number <= INT64_MAX else None


def durable_log_filter(mode: LogMode) -> Callable[[str, object], bool] | None:
    """Which log lines (`line`, `source`) of `mode` are durable: None when all of them are; in
    direct_worker mode the worker host's own lines stay out, except perf-trace markers."""
    if mode != "direct_worker":
        return None
    return _durable_direct_worker_line


def _durable_direct_worker_line(line: str, source: object) -> bool:
    return source != "worker" or line.startswith(_PERF_TRACE_MARKER)
