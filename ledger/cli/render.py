"""How the client commands show the service's JSON: pure functions from dicts to text and rich renderables.

Nothing here does I/O, so the unit tests can feed it JSON and check the rows, bars and lines a
person would see. Times on the wire are epoch milliseconds; `now_ms` is passed in, never read here.

What a runner wrote (a step's name, a log line, an error) or the ledger holds reaches a person's
terminal only through `ledger.cli.shown.shown`, applied here where each value becomes a cell or a
line: a step named ``[/bold]n`` is shown as written, never read as a tag, and an escape sequence
in a log line never reaches the terminal. The data itself stays exact.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ledger.cli.shown import shown
from ledger.runlog.steps import derived_state

__all__ = [
    "RUNS_COLUMNS",
    "STATUS_STYLES",
    "duration",
    "event_line",
    "event_summary",
    "pool_view",
    "rows_cell",
    "run_detail",
    "run_row",
    "runs_table",
    "shown",
    "step_bar",
    "step_counts",
    "steps",
    "steps_cell",
    "terminal_line",
]

STATUS_STYLES = {
    "running": "cyan",
    "completed": "green",
    "failed": "red",
    "cancelled": "yellow",
    "skipped": "dim",
    "pending": "dim",
}


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value == value and abs(value) < 2**63:
        return int(value)
    return None


def _count(value: object) -> str:
    """`1,234` for a number, `-` for anything else."""
    n = _int(value)
    return "-" if n is None else f"{n:,}"


def duration(ms: object) -> str:
    """A short human duration: `850ms`, `42s`, `4m 05s`, `2h 07m`, `3d 04h`; `-` when unknown."""
    n = _int(ms)
    if n is None:
        return "-"
    if n < 0:
        n = 0
    if n < 1000:
        return f"{n}ms"
    s = n // 1000
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m {s:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h {m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d {h:02d}h"


def _clock_time(ms: object) -> str:
    """`HH:MM:SS.mmm` (UTC) of an epoch-ms time; `-` when unknown."""
    n = _int(ms)
    if n is None:
        return "-"
    t = datetime.fromtimestamp(n / 1000, tz=UTC)
    return t.strftime("%H:%M:%S.") + f"{t.microsecond // 1000:03d}"


def _run_state(run: Mapping[str, Any]) -> str:
    """The terminal status when there is one, else the live status."""
    terminal = run.get("terminal")
    if isinstance(terminal, Mapping) and terminal.get("status"):
        return str(terminal["status"])
    return str(run.get("terminal_status") or run.get("status") or "?")


# -- ledger runs -----------------------------------------------------------------------------------

RUNS_COLUMNS = ("run", "status", "age", "last event", "steps", "rows", "why it ended")
# How much of a terminal error the run list shows (`ledger run` shows all of it).
_ERROR_CELL_CHARS = 80


def rows_cell(completed: object, failed: object, total: object) -> str:
    """`4,001 / 5,001` plus `(12 failed)` when any row failed."""
    text = f"{_count(completed)} / {_count(total)}"
    if (_int(failed) or 0) > 0:
        text += f" ({_count(failed)} failed)"
    return text


def run_row(run: Mapping[str, Any], now_ms: int) -> tuple[str, ...]:
    """One line of `ledger runs` from one `run_overview` dict (see `ledger.runlog.overview.list_runs`)."""
    age = run.get("age_ms")
    created = _int(run.get("created_at"))
    if age is None and created is not None:
        age = now_ms - created
    last = f"#{_count(run.get('last_seq'))}"
    if run.get("last_event_type"):
        last += f" {run['last_event_type']}"
    updated = _int(run.get("updated_at"))
    if updated is not None:
        last += f", {duration(now_ms - updated)} ago"
    rows = rows_cell(run.get("rows_completed"), run.get("rows_failed"), run.get("rows_total"))
    error = str(run.get("terminal_error") or "")
    if len(error) > _ERROR_CELL_CHARS:
        error = error[: _ERROR_CELL_CHARS - 1] + "…"
    return (str(run.get("run_id", "?")), _run_state(run), duration(age), last, steps_cell(run), rows, error)


def steps_cell(run: Mapping[str, Any]) -> str:
    """`1/3 done (1 failed, 1 skipped)`: the run's steps by state (`run_overview`'s counts)."""
    text = f"{_count(run.get('steps_done'))}/{_count(run.get('steps_total'))} done"
    others = [
        f"{_count(run.get(f'steps_{state}'))} {state}"
        for state in ("failed", "cancelled", "skipped")
        if (_int(run.get(f"steps_{state}")) or 0) > 0
    ]
    return f"{text} ({', '.join(others)})" if others else text


def runs_table(runs: Sequence[Mapping[str, Any]], now_ms: int) -> Table:
    """The `ledger runs` table."""
    table = Table(*RUNS_COLUMNS, title=f"{len(runs)} run(s), newest first", title_justify="left")
    rows = [run_row(run, now_ms) for run in runs]
    # A run id is what a person copies into `ledger run`, and a status is one word: never cut
    # either; the other columns wrap instead.
    plain = [tuple(shown(cell, markup=False) for cell in cells) for cells in rows]
    for index in (0, 1):
        table.columns[index].no_wrap = True
        table.columns[index].min_width = max((len(cells[index]) for cells in plain), default=3)
    for cells in plain:
        style = STATUS_STYLES.get(cells[1], "")
        table.add_row(Text(cells[0]), Text(cells[1], style=style), *(Text(cell) for cell in cells[2:]))
    return table


# -- ledger run RUN_ID -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _StepView:
    """One step of a run as `ledger run` shows it."""

    node_id: str
    state: str  # the step's state, as the ledger gives it (`ledger.runlog.steps`)
    reason: str | None
    position: int | None
    completed: int | None
    failed: int | None
    total: int | None
    message: str | None
    started_at: int | None
    completed_at: int | None

    @property
    def processed(self) -> int:
        return (self.completed or 0) + (self.failed or 0)

    def fraction(self) -> float | None:
        """Share of rows processed (completed or failed), None when the total is unknown."""
        if not self.total or self.total <= 0:
            return None
        return min(1.0, self.processed / self.total)


def steps(live_node_progress: object) -> list[_StepView]:
    """The run's steps from its live node progress, in pipeline order when the steps have
    positions, else started ones first in start order. A step's state is the one the ledger gives
    (never read from a completion time: a step can end without completing)."""
    if not isinstance(live_node_progress, Mapping):
        return []
    views = []
    for node_id, raw in live_node_progress.items():
        node = raw if isinstance(raw, Mapping) else {}
        started, done = _int(node.get("started_at")), _int(node.get("completed_at"))
        message, reason = node.get("message"), node.get("reason")
        views.append(
            _StepView(
                node_id=str(node_id),
                state=derived_state(node),
                reason=reason if isinstance(reason, str) and reason else None,
                position=_int(node.get("position")),
                completed=_int(node.get("completed")),
                failed=_int(node.get("failed")),
                total=_int(node.get("total")),
                message=message if isinstance(message, str) and message else None,
                started_at=started,
                completed_at=done,
            )
        )
    # Object key order does not survive JSONB: the pipeline's order, else what happened.
    return sorted(
        views,
        key=_order,
    )


def _order(step: _StepView) -> tuple[bool, int, bool, int, str]:
    started = step.started_at
    return (step.position is None, step.position or 0, started is None, started or 0, step.node_id)


def step_counts(step: _StepView) -> str:
    """`1,234 / 10,000` (+ failed) when the step counts rows, else its state."""
    if step.total is None and step.completed is None:
        return step.state
    return rows_cell(step.completed, step.failed, step.total)


def step_bar(step: _StepView, width: int = 30) -> ProgressBar:
    """A bar filled by the rows processed; a finished step without counts shows full."""
    fraction = step.fraction()
    if fraction is None:
        fraction = 1.0 if step.state == "completed" else 0.0
    return ProgressBar(total=1000, completed=round(fraction * 1000), width=width)


def terminal_line(run: Mapping[str, Any]) -> str:
    """`completed · 5,001 rows · 12s` or `failed: <error>`; `running` while not terminal."""
    terminal = run.get("terminal")
    if not isinstance(terminal, Mapping) or not terminal.get("status"):
        return f"{run.get('status') or 'running'} (not terminal)"
    parts = [str(terminal["status"])]
    if terminal.get("total_rows") is not None:
        parts.append(f"{_count(terminal['total_rows'])} rows")
    if terminal.get("duration_ms") is not None:
        parts.append(duration(terminal["duration_ms"]))
    line = " · ".join(parts)
    if terminal.get("error"):
        line += f": {terminal['error']}"
    return line


def run_detail(run: Mapping[str, Any], now_ms: int) -> RenderableType:
    """`ledger run RUN_ID`: header, one progress bar per step, terminal state."""
    header = Table.grid(padding=(0, 2))
    header.add_column(style="bold")
    header.add_column()
    header.add_row("run", shown(run.get("run_id", "?")))
    header.add_row("play", shown(run.get("play_name") or "-"))
    state = _run_state(run)
    header.add_row("status", Text(shown(state, markup=False), style=STATUS_STYLES.get(state, "")))
    created, updated = _int(run.get("created_at")), _int(run.get("updated_at"))
    header.add_row("age", duration(None if created is None else now_ms - created))
    header.add_row(
        "last event",
        f"#{_count(run.get('last_seq'))}, {duration(None if updated is None else now_ms - updated)} ago",
    )
    header.add_row("terminal", shown(terminal_line(run)))

    columns = ("step", "progress", "rows", "state", "reason / message")
    table = Table(*columns, title="steps", title_justify="left")
    for step in steps(run.get("live_node_progress")):
        note = " · ".join(text for text in (step.reason, step.message) if text)
        state_cell = Text(shown(step.state, markup=False), style=STATUS_STYLES.get(step.state, ""))
        table.add_row(shown(step.node_id), step_bar(step), shown(step_counts(step)), state_cell, shown(note))
    return Group(header, table)


# -- ledger events ---------------------------------------------------------------------------------

_SUMMARY_KEYS = ("status", "line", "node_id", "message", "error", "missing", "reason", "signal")
_SETTLEMENT_TYPES = ("step.completed", "step.failed", "step.cancelled", "step.skipped")


def event_summary(event: Mapping[str, Any]) -> str:
    """The gist of one event's fields (its own fields minus seq/type/ts)."""
    kind = event.get("type")
    if kind == "log":
        return str(event.get("line", ""))
    if kind == "log.gap":
        return f"{_count(event.get('missing'))} log line(s) not kept"
    if kind == "terminal":
        parts = [str(event.get("status", "?"))]
        if event.get("total_rows") is not None:
            parts.append(f"{_count(event['total_rows'])} rows")
        if event.get("error"):
            parts.append(str(event["error"]))
        return " · ".join(parts)
    if kind in _SETTLEMENT_TYPES:
        # The step's state, never read from its completion time, and why it settled so.
        node = event.get("node_id") or "?"
        state = event.get("state") or event.get("outcome") or str(kind).removeprefix("step.")
        parts = [str(node), str(state)]
        if event.get("reason"):
            parts.append(str(event["reason"]))
        elif event.get("error"):
            parts.append(str(event["error"]))
        return " · ".join(parts)
    if kind in ("step.started", "step.progress"):
        node = event.get("node_id") or event.get("node") or "?"
        parts = [str(node)]
        if event.get("total") is not None or event.get("completed") is not None:
            parts.append(rows_cell(event.get("completed"), event.get("failed"), event.get("total")))
        if event.get("status"):
            parts.append(str(event["status"]))
        return " · ".join(parts)
    if kind in ("status", "progress") and event.get("status"):
        return str(event["status"])
    if kind == "dataset.lifecycle":
        # Passed through as the runner produced it (camelCase), possibly wrapped in `event`.
        wrapped = event.get("event")
        inner: Mapping[str, Any] = wrapped if isinstance(wrapped, Mapping) else event
        namespace = inner.get("tableNamespace") or inner.get("table_namespace") or "?"
        return f"{namespace} {inner.get('phase') or inner.get('type') or ''}".strip()
    if kind == "activity.observed":
        raw = event.get("observation")
        observation: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        activity = event.get("activity_id") or observation.get("activityId") or "?"
        state = observation.get("state") or observation.get("status") or ""
        return f"{activity} {state}".strip()
    if kind == "reporter.interrupted":
        return str(event.get("reason") or f"the reporter was interrupted ({event.get('signal') or '?'})")
    if kind == "reporter.resumed":
        return f"a reporter resumed the run ({event.get('status') or 'running'})"
    rest = {k: v for k, v in event.items() if k not in ("seq", "type", "ts", "run_id")}
    picked = [f"{k}={rest[k]}" for k in _SUMMARY_KEYS if k in rest]
    return " ".join(picked) if picked else json.dumps(rest, sort_keys=True, default=str)[:200]


def event_line(event: Mapping[str, Any]) -> str:
    """`#12 14:03:07.123 step.progress map-2 · 1,234 / 5,000`: one line per event."""
    seq, kind = event.get("seq", "?"), event.get("type", "?")
    return f"#{seq} {_clock_time(event.get('ts'))} {kind} {event_summary(event)}"


# -- ledger pool VERSION ---------------------------------------------------------------------------


def pool_view(
    pool: str, version: str, counts: Mapping[str, Any], entries: Sequence[Mapping[str, Any]], now_ms: int
) -> RenderableType:
    """`ledger pool`: the counts line and a table of the version's entries, newest ready first."""
    head = Text(
        shown(
            f"pool {pool}, version {version}: {_count(counts.get('available'))} available, "
            f"{_count(counts.get('warming'))} warming",
            markup=False,
        )
    )
    table = Table("id", "state", "ready for", "age", "expires in")
    ordered = sorted(entries, key=lambda e: (-(_int(e.get("ready_at")) or 0), str(e.get("id"))))
    for entry in ordered:
        ready, created, expires = (_int(entry.get(k)) for k in ("ready_at", "created_at", "expires_at"))
        table.add_row(
            shown(entry.get("id", "?")),
            shown(entry.get("state", "?")),
            "-" if ready is None else duration(now_ms - ready),
            "-" if created is None else duration(now_ms - created),
            "-" if expires is None else duration(expires - now_ms),
        )
    return Group(head, table) if entries else Group(head, Text("no entries"))
