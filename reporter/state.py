"""The reporter's mutable state: node progress, the live log tail and the pending one-shot events.

The folding code writes it synchronously; the uploader takes a `Snapshot` of it (copying progress
and logs, *draining* the one-shot events) and hands the snapshot back through `requeue` when the
upload fails, so dataset lifecycle events and activity observations are delivered exactly once.

The live tail holds at most `LIVE_LOG_TAIL_LIMIT` lines and `UploadBounds.log_tail_bytes` UTF-8
bytes (the oldest go first), each line repaired and truncated to the line bound as the ledger
stores it: what an upload carries of it always fits the service's body limit.

The live tail never skips a line silently: a line that falls out of it before any upload carried it
opens a *hole*, and until an upload that takes the whole tail (the last of a batch: a terminal,
interrupted or batch-ending one, `snapshot(whole_tail=True)`) the uploads carry no line past it.
A gap in the ledger's log is then decided only at the end, where the result's ``logs`` (the terminal
replay) fill what the tail lost, in order, once. A hole is held for `HOLE_HOLD_MS` at most: a run
that goes on longer shows its live log again, and the lines the tail lost are then a gap.

Each node's *positions* say where on the log its transitions happened (the log count when it
started, when its progress last changed, when it settled): the ledger puts its step events right
after those lines, so the log reads in the order the runner wrote. It can only when the lines come
first: an upload that holds back the lines past a hole holds back the nodes that moved after them
too (the ledger keeps what it holds of them), and the upload that carries the lines carries them.

One-shot events are bounded (``max_pending_one_shot`` per kind) so that a ledger that stays down
cannot grow the worker's memory without limit: the oldest are dropped and counted, and the count
travels in the next upload as ``dropped_one_shot_events``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ledger.validate import (
    DEFAULT_UPLOAD_BOUNDS,
    LIVE_LOG_TAIL_LIMIT,
    UploadBounds,
    is_number,
    log_line,
    utf8_length,
)
from reporter.progress import NodeProgress, merge_patch, merge_row_counts

__all__ = [
    "DEFAULT_MAX_PENDING_ONE_SHOT",
    "HOLE_HOLD_MS",
    "ProgressState",
    "Snapshot",
]

DEFAULT_MAX_PENDING_ONE_SHOT = 10_000
# How long the uploads hold back the lines past a hole in the tail, waiting for the batch's end
# (whose replay can fill it), before they carry the live log again and leave the hole a gap.
HOLE_HOLD_MS = 60_000


@dataclass(slots=True, kw_only=True)
class Snapshot:
    """What one upload carries from the state (all copies: the state may move on meanwhile)."""

    live_node_progress: dict[str, dict[str, Any]]
    live_logs: list[str]
    live_log_total_count: int
    dataset_lifecycle_events: list[dict[str, Any]] = field(default_factory=list)
    activity_observations: list[dict[str, Any]] = field(default_factory=list)
    dropped_one_shot_events: int = 0
    step_positions: dict[str, dict[str, int]] = field(default_factory=dict)


def _observed_at(observation: Mapping[str, Any]) -> float:
    value = observation.get("observedAt")
    if is_number(value):
        return float(value)
    return float("-inf")


class ProgressState:
    """Node progress, logs and one-shot events of one reporter."""

    def __init__(
        self,
        *,
        now_ms: Callable[[], int],
        initial_live_log_total_count: int = 0,
        max_pending_one_shot: int = DEFAULT_MAX_PENDING_ONE_SHOT,
        bounds: UploadBounds = DEFAULT_UPLOAD_BOUNDS,
    ) -> None:
        self.now_ms = now_ms
        self.bounds = bounds
        self.nodes: dict[str, NodeProgress] = {}
        self.logs: deque[str] = deque()
        self.log_bytes = 0  # UTF-8 bytes of the lines in `logs`
        self.log_total_count = initial_live_log_total_count
        self.total_rows = 0
        # Progress or logs changed since the last snapshot (one flag: every reader asks for either).
        self.dirty = False
        self.max_pending_one_shot = max_pending_one_shot
        self._lifecycle_events: deque[dict[str, Any]] = deque()
        self._activity: dict[str, dict[str, Any]] = {}
        self.dropped_one_shot_events = 0
        # How far the uploads have carried the log, and where a hole opened (None: no hole).
        self.log_sent_through = initial_live_log_total_count
        self.log_hole_after: int | None = None
        self.log_hole_opened_ms = 0
        self.positions: dict[str, dict[str, int]] = {}

    # -- writes (synchronous, from the event path) ------------------------------------------------

    def set_node_progress(self, node_id: str, patch: Mapping[str, Any]) -> None:
        node = self.nodes.get(node_id)
        if node is None:
            node = self.nodes[node_id] = NodeProgress()
        merge_patch(node, patch, self.now_ms())
        self._moved(node_id, "progress")
        self.dirty = True

    def _moved(self, node_id: str, kind: str) -> None:
        positions = self.positions.get(node_id)
        if positions is None:
            positions = self.positions[node_id] = {}
        positions[kind] = self.log_total_count

    def mark_transition(self, node_id: str, kind: str) -> None:
        """Note that `node_id` started or settled (`kind`) after the log's current last line."""
        self._moved(node_id, kind)

    def merge_row_counts(
        self,
        node_id: str,
        completed: int | None,
        failed: int | None,
        total: int | None,
        started_rows: int | None,
        active_rows: int | None,
        waiting_rows: int | None,
        completed_rows: int | None,
        artifact_table_namespace: str | None,
        message: str | None,
    ) -> None:
        """`set_node_progress` with a patch of these fields (`progress.merge_row_counts`)."""
        node = self.nodes.get(node_id)
        if node is None:
            node = self.nodes[node_id] = NodeProgress()
        merge_row_counts(
            node,
            self.now_ms(),
            completed,
            failed,
            total,
            started_rows,
            active_rows,
            waiting_rows,
            completed_rows,
            artifact_table_namespace,
            message,
        )
        self._moved(node_id, "progress")
        self.dirty = True

    def replace_node(self, node_id: str, node: NodeProgress) -> None:
        self.nodes[node_id] = node
        self.dirty = True

    def note_total_rows(self, total: int | None) -> None:
        if total is not None and total > self.total_rows:
            self.total_rows = total

    def append_log(self, line: str) -> None:
        trimmed = line.strip()
        if not trimmed:
            return
        self.log_total_count += 1
        # Kept as the ledger will store it, so the tail compares equal to lines read back from it.
        if len(trimmed) <= self.bounds.log_line_bytes and trimmed.isascii() and "\x00" not in trimmed:
            # The usual line, stored as it is (nothing to repair, a byte a character, within the
            # bound), kept without a call.
            self.logs.append(trimmed)
            self.log_bytes += len(trimmed)
            self.trim_logs()
        else:
            self._keep_log(log_line(trimmed, self.bounds.log_line_bytes))
        self.dirty = True

    def _keep_log(self, line: str) -> None:
        self.logs.append(line)
        self.log_bytes += utf8_length(line)
        self.trim_logs()

    def trim_logs(self) -> None:
        """Drop the oldest lines of the tail past its bounds (lines and bytes)."""
        logs = self.logs
        tail_bytes = self.bounds.log_tail_bytes
        while len(logs) > LIVE_LOG_TAIL_LIMIT or (self.log_bytes > tail_bytes and logs):
            if self.log_hole_after is None and self.log_total_count - len(logs) >= self.log_sent_through:
                # The oldest line goes before any upload carried it: a hole opens after the last
                # line that was.
                self.log_hole_after = self.log_sent_through
                self.log_hole_opened_ms = self.now_ms()
            line = logs.popleft()
            # (Most lines are ASCII: a byte a character, told without a call.)
            self.log_bytes -= len(line) if line.isascii() else utf8_length(line)

    def restore_logs(self, tail: list[str], total_count: int) -> None:
        """Continue the positional channel after `total_count` lines, `tail` the last of them
        (already delivered: nothing to upload)."""
        self.log_total_count = max(self.log_total_count, total_count)
        for line in tail:
            self._keep_log(line)
        self.log_sent_through, self.log_hole_after = self.log_total_count, None

    def add_lifecycle_event(self, event: dict[str, Any]) -> None:
        self._lifecycle_events.append(event)
        self._trim()

    def add_activity_observation(self, observation: dict[str, Any]) -> None:
        """Keep the newest observation per ``activityId`` (by ``observedAt``; a tie goes to the later)."""
        activity_id = observation["activityId"]
        pending = self._activity.get(activity_id)
        if pending is not None and _observed_at(observation) < _observed_at(pending):
            return
        # Re-inserting moves the activity to the newest end, which is what the trim keeps.
        self._activity.pop(activity_id, None)
        self._activity[activity_id] = observation
        self._trim()

    def _trim(self) -> None:
        limit = self.max_pending_one_shot
        while len(self._lifecycle_events) > limit:
            self._lifecycle_events.popleft()
            self.dropped_one_shot_events += 1
        while len(self._activity) > limit:
            del self._activity[next(iter(self._activity))]
            self.dropped_one_shot_events += 1

    # -- reads (the uploader) ---------------------------------------------------------------------

    @property
    def pending_one_shot_count(self) -> int:
        return len(self._lifecycle_events) + len(self._activity)

    @property
    def unsent_log_lines(self) -> int:
        """Lines no upload has carried yet and a live upload still could (none past a hole)."""
        if self.log_hole_after is not None:
            return 0
        return self.log_total_count - self.log_sent_through

    @property
    def has_changes(self) -> bool:
        return (
            self.dirty
            or bool(self._lifecycle_events)
            or bool(self._activity)
            or self.dropped_one_shot_events > 0
        )

    def snapshot(self, *, whole_tail: bool = False) -> Snapshot:
        """Copy progress and logs, drain the one-shot events, and mark everything clean. Past a
        hole in the tail only an upload of the `whole_tail` carries lines, and the nodes that moved
        after them (module docstring)."""
        held = self.log_hole_after is not None and self.now_ms() - self.log_hole_opened_ms < HOLE_HOLD_MS
        if self.log_hole_after is not None and held and not whole_tail:
            logs, total = [], self.log_hole_after
        else:
            logs, total = list(self.logs), self.log_total_count
            self.log_sent_through, self.log_hole_after = total, None
        # A node that moved after the last line this upload carries stays out of it (the ledger
        # keeps what it holds): its transitions go with the lines they followed, or the ledger
        # would store them before the lines the result's logs fill in later.
        carried = [
            node_id
            for node_id in self.nodes
            if all(position <= total for position in self.positions.get(node_id, {}).values())
        ]
        snap = Snapshot(
            live_node_progress={node_id: self.nodes[node_id].to_wire() for node_id in carried},
            live_logs=logs,
            live_log_total_count=total,
            dataset_lifecycle_events=list(self._lifecycle_events),
            activity_observations=list(self._activity.values()),
            dropped_one_shot_events=self.dropped_one_shot_events,
            step_positions={
                node_id: dict(self.positions[node_id]) for node_id in carried if node_id in self.positions
            },
        )
        self._lifecycle_events.clear()
        self._activity.clear()
        self.dropped_one_shot_events = 0
        self.dirty = False
        return snap

    def requeue(self, snap: Snapshot) -> None:
        """Give back the one-shot events of a failed upload (older than anything pending now)."""
        self._lifecycle_events.extendleft(reversed(snap.dataset_lifecycle_events))
        older = {obs["activityId"]: obs for obs in snap.activity_observations}
        for activity_id, current in self._activity.items():
            previous = older.get(activity_id)
            if previous is None or _observed_at(previous) <= _observed_at(current):
                older[activity_id] = current
            else:
                older[activity_id] = previous
        # Failed-upload activities go first (oldest), then those that arrived meanwhile.
        merged = {k: v for k, v in older.items() if k not in self._activity}
        merged.update({k: older[k] for k in self._activity})
        self._activity = merged
        self.dropped_one_shot_events += snap.dropped_one_shot_events
        # The progress and logs of the failed upload are still in the state; send them again.
        self.dirty = True
        self._trim()
