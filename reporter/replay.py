"""The terminal log replay: the runner result's ``logs`` sent once more with the final upload.

Wire shape (the ``terminal_log_replay`` field of an upload; null when there is nothing to send)::

    {"lines": [str, ...], "dedupe_mode": "exact" | "positional", "total_count": int}

* ``lines`` — trimmed, non-empty lines, in order.
* ``dedupe_mode: "exact"`` (replay-all) — the lines are the attempt's complete log; the ledger
  absorbs an exact retransmission of the same lines from the same attempt.
* ``dedupe_mode: "positional"`` — the lines occupy positions ``total_count - len(lines) + 1 …
  total_count`` of the attempt's positional log channel (the one ``live_log_total_count`` counts);
  the ledger appends only positions it does not hold yet.
* ``total_count`` — the channel position of the last line.

Modes. In ``progress_reporter`` mode every live line was durable, so the result logs *are* the
channel from position 1 (``total_count = len(lines)``): positional dedupe drops what the live
stream already delivered. In ``direct_worker`` mode only lines carrying the runner's
``[ISO-timestamp] `` prefix are replayed, minus those the live tail already carried — compared
without the prefix, as a multiset, so a line printed three times live and four times in the result
is replayed once — and the rest continue the channel after the live count. ``replay_all`` keeps
every line (exact dedupe, offset zero).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from ledger.validate import MAX_LOG_LINE_BYTES, log_line
from reporter.wire import LogMode, has_timestamp_prefix, strip_timestamp_prefix

__all__ = [
    "build_terminal_replay",
    "drop_live_lines",
]


def _replay_lines_for_mode(
    result_logs: Iterable[object], mode: LogMode, line_bytes: int = MAX_LOG_LINE_BYTES
) -> list[str]:
    """The result's log lines that may be replayed: trimmed, non-empty, runner-stamped in direct
    mode, each as the live tail holds it (repaired, truncated to `line_bytes`)."""
    lines: list[str] = []
    for raw in result_logs:
        if not isinstance(raw, str):
            continue
        line = log_line(raw.strip(), line_bytes)  # compared with the live tail, which holds such lines
        if line and (mode != "direct_worker" or has_timestamp_prefix(line)):
            lines.append(line)
    return lines


def drop_live_lines(lines: Sequence[str], live_logs: Iterable[str]) -> list[str]:
    """`lines` minus those the live stream carried, as a multiset, ignoring the timestamp prefix."""
    seen = Counter(key for key in (strip_timestamp_prefix(line.strip()) for line in live_logs) if key)
    kept: list[str] = []
    for line in lines:
        key = strip_timestamp_prefix(line.strip())
        if seen[key] > 0:
            seen[key] -= 1
            continue
        kept.append(line)
    return kept


def build_terminal_replay(
    result_logs: Iterable[object],
    *,
    mode: LogMode,
    live_logs: Iterable[str],
    live_log_total_count: int,
    replay_all: bool = False,
    line_bytes: int = MAX_LOG_LINE_BYTES,
) -> dict[str, Any] | None:
    """The ``terminal_log_replay`` payload (see the module docstring), or None when empty."""
    lines = _replay_lines_for_mode(result_logs, mode, line_bytes)
    total_count = len(lines)
    if mode == "direct_worker" and not replay_all:
        lines = drop_live_lines(lines, live_logs)
        total_count = live_log_total_count + len(lines)
    if not lines:
        return None
    return {
        "lines": lines,
        "dedupe_mode": "exact" if replay_all else "positional",
        "total_count": total_count,
    }
