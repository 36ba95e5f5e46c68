"""What `ledger demo` shows while its run progresses: a model fed by the ledger's events (pure).

The demo tails its run's events from the service (SSE) and hands each one to `DemoView.apply`
with the time it arrived. The view keeps per-step counts and a rows/s rate, the last few event
lines, and returns the plain line (if any) a non-terminal stdout prints for that event; on a
terminal `renderable()` gives the rich layout that `rich.live.Live` redraws.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ledger import validate
from ledger.cli import render

__all__ = [
    "DemoView",
]

_RECENT_EVENTS = 8
_COUNT_KEYS = ("completed", "failed", "total")
# The events that settle a step, and the state each says when it names none.
_SETTLED_BY = {
    "step.completed": "completed",
    "step.failed": "failed",
    "step.cancelled": "cancelled",
    "step.skipped": "skipped",
}
_SETTLED = frozenset(_SETTLED_BY.values())


@dataclass(kw_only=True)
class _StepLive:
    """One step as the ledger's events describe it."""

    node_id: str
    state: str = "not started"  # not started | running | completed | failed | cancelled | skipped
    completed: int | None = None
    failed: int | None = None
    total: int | None = None
    # (arrival time, rows processed) of the first and the latest progress event: the rate.
    first: tuple[float, int] | None = None
    last: tuple[float, int] | None = None

    @property
    def processed(self) -> int:
        return (self.completed or 0) + (self.failed or 0)

    def rate(self) -> float | None:
        """Rows per second between the first and the latest progress event, None before two."""
        if self.first is None or self.last is None or self.last[0] <= self.first[0]:
            return None
        return (self.last[1] - self.first[1]) / (self.last[0] - self.first[0])

    def counts_text(self) -> str:
        if self.total is None and self.completed is None:
            return ""
        return render.rows_cell(self.completed, self.failed, self.total)


def _int(value: object) -> int | None:
    return value if validate.is_int(value) else None


@dataclass(kw_only=True)
class DemoView:
    """The live picture of one run, in the step order of its pipeline."""

    run_id: str
    step_order: Sequence[str]
    steps: dict[str, _StepLive] = field(default_factory=dict)
    by_type: Counter[str] = field(default_factory=Counter)
    recent: deque[str] = field(default_factory=lambda: deque(maxlen=_RECENT_EVENTS))
    terminal: dict[str, Any] | None = None
    started_at: float | None = None
    elapsed: float = 0.0

    def __post_init__(self) -> None:
        for node_id in self.step_order:
            self.steps.setdefault(node_id, _StepLive(node_id=node_id))

    def step(self, node_id: str) -> _StepLive:
        return self.steps.setdefault(node_id, _StepLive(node_id=node_id))

    def apply(self, event: Mapping[str, Any], t: float) -> str | None:
        """Fold one event that arrived at `t` (seconds); the plain progress line for it, if any."""
        if self.started_at is None:
            self.started_at = t
        self.elapsed = t - self.started_at
        kind = str(event.get("type", "?"))
        self.by_type[kind] += 1
        self.recent.append(render.event_line(event))
        node_id = event.get("node_id")
        if isinstance(node_id, str) and kind.startswith("step."):
            return self._apply_step(kind, self.step(node_id), event, t)
        if kind == "terminal":
            self.terminal = dict(event)
            return f"{self.stamp()} terminal   {render.event_summary(event)}"
        if kind in ("log", "status", "progress"):
            # Logs are many: the plain output counts them instead of printing each one.
            return None
        return f"{self.stamp()} {kind:<10} {render.event_summary(event)}"

    def _apply_step(self, kind: str, step: _StepLive, event: Mapping[str, Any], t: float) -> str:
        if kind == "step.started":
            if step.state == "not started":
                step.state = "running"
            return f"{self.stamp()} started    {step.node_id}"
        if kind in _SETTLED_BY:
            # A settlement event names its state (`state`, or `outcome` as older ledgers wrote it).
            said = event.get("state") or event.get("outcome")
            step.state = said if isinstance(said, str) and said in _SETTLED else _SETTLED_BY[kind]
            line = f"{self.stamp()} {step.state:<10} {step.node_id} {step.counts_text()}".rstrip()
            return f"{line} ({event['reason']})" if event.get("reason") else line
        for key in _COUNT_KEYS:
            value = _int(event.get(key))
            if value is not None:
                setattr(step, key, value)
        if step.state == "not started":
            step.state = "running"
        sample = (t, step.processed)
        if step.first is None:
            step.first = sample
        step.last = sample
        line = f"{self.stamp()} progress   {step.node_id} {step.counts_text()}"
        rate = step.rate()
        if rate is not None and step.state == "running":
            line += f"  {rate:,.0f} rows/s"
        return line

    def stamp(self) -> str:
        return f"[{self.elapsed:6.1f}s]"

    def status_line(self) -> str:
        done = sum(1 for s in self.steps.values() if s.state in _SETTLED)
        state = render.event_summary(self.terminal) if self.terminal else "running"
        return (
            f"run {self.run_id} · {state} · {done}/{len(self.steps)} steps settled · "
            f"{sum(self.by_type.values()):,} events ({self.by_type['log']:,} log lines) · "
            f"{self.elapsed:.1f}s"
        )

    def renderable(self) -> RenderableType:
        """Steps with progress bars and rates, the latest events, and a status line."""
        table = Table("step", "progress", "rows", "rows/s", "state", box=None, padding=(0, 1))
        for step in self.steps.values():
            if step.total:
                bar = ProgressBar(total=step.total, completed=min(step.processed, step.total), width=36)
            elif step.state == "running":
                # No row counts to show: a pulsing bar says "busy".
                bar = ProgressBar(total=None, width=36)
            else:
                settled = step.state in _SETTLED
                bar = ProgressBar(total=1, completed=1 if settled else 0, width=36)
            rate = step.rate()
            style = render.STATUS_STYLES.get(step.state, "dim" if step.state == "not started" else "")
            table.add_row(
                step.node_id,
                bar,
                step.counts_text(),
                "" if rate is None or step.state != "running" else f"{rate:,.0f}",
                Text(step.state, style=style),
            )
        events = Panel("\n".join(self.recent) or "waiting for the first event…", title="events as they land")
        return Group(table, events, Text(self.status_line()))
