"""Splitting an upload that would be larger than the service takes into successive uploads.

The sanitizer already bounds every single item (a log line, a node's I/O value, a lifecycle event,
an activity observation; `ledger.validate.UploadBounds`), so one item always fits an upload of its
own; what can still be too big is their sum. `split_upload` then cuts the upload into bodies that
each encode (`ledger.validate.encode_body`, exactly the bytes sent) to at most the limit, and that
together carry everything the one upload did, losing no line:

* the live tail's lines go first, in order, each body's ``live_log_total_count`` the position of
  its last line (so the ledger places every line where the one upload would have);
* then the nodes (the ledger keeps a node an upload does not name), each with its
  ``step_positions`` entry in the same body, the lifecycle events and the activity observations;
* then the terminal log replay's lines, each body's ``total_count`` placing its slice (those at
  positions before the live tail's first go before the tail: they fill what it lost);
* the status (and its ``error`` or ``interruption``) only in the last body (the others are
  ``running``), so the run ends once all of it has landed. The first body carries
  ``dropped_one_shot_events`` and the contract's ``pipeline_steps`` (the ledger keeps them for the
  bodies after it).

``upload_seq`` is measured as the widest number it can be; the caller numbers the bodies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ledger.validate import INT64_MAX, encode_body, truncate_line

__all__ = [
    "split_upload",
]

# The widest value a number the caller fills in later can take, for measuring.
_WIDEST = INT64_MAX
_LIST_FIELDS = ("dataset_lifecycle_events", "activity_observations")
# The status of every part but the last: the run ends only once all of it has landed.
_RUNNING = "running"


@dataclass(kw_only=True)
class _Body:
    logs: list[str] = field(default_factory=list)
    log_end: int = 0
    nodes: dict[str, Any] = field(default_factory=dict)
    positions: dict[str, Any] = field(default_factory=dict)
    lists: dict[str, list[Any]] = field(default_factory=lambda: {name: [] for name in _LIST_FIELDS})
    replay: list[str] = field(default_factory=list)
    replay_end: int = 0
    size: int = 0


def split_upload(
    body: dict[str, Any], max_bytes: int, *, shrunk: Callable[[str], None] = lambda kind: None
) -> list[dict[str, Any]]:
    """`body` as successive bodies of at most `max_bytes` encoded bytes (module docstring); just
    `[body]` when it fits. An item too big even for a body of its own (only when the limit is
    smaller than the bounds it was checked against) is shortened if it is a line, else dropped;
    `shrunk(kind)` is told either way. A line is cut (`ledger.validate.truncate_line`, marked) to
    the most UTF-8 bytes that fit its body whatever characters it holds: a sixth of what the body
    leaves it, less the three bytes of its quotes and separator."""
    if len(encode_body({**body, "upload_seq": _WIDEST})) <= max_bytes:
        return [body]
    replay = body.get("terminal_log_replay")
    status = body["status"]
    skeleton = {
        **body,
        "upload_seq": _WIDEST,
        "status": max(status, _RUNNING, key=len),
        "live_node_progress": {},
        **({"step_positions": {}} if "step_positions" in body else {}),
        "live_logs": [],
        "live_log_total_count": _WIDEST,
        **{name: [] for name in _LIST_FIELDS},
        "terminal_log_replay": None,
    }
    room = max_bytes - len(encode_body(skeleton))
    live = list(body["live_logs"])
    live_start = int(body["live_log_total_count"]) - len(live)
    # Without a replay, an empty one ending where the live tail starts: it places nothing.
    replayed: dict[str, Any] = replay if replay is not None else {"lines": [], "total_count": live_start}
    replay_lines: list[str] = list(replayed["lines"])
    replay_start = int(replayed["total_count"]) - len(replay_lines)
    # What a body's replay takes besides its lines (with the widest total_count), instead of null.
    replay_room = len(encode_body({**replayed, "lines": [], "total_count": _WIDEST})) - len(b"null")
    bodies: list[_Body] = []
    current = _Body(log_end=live_start)

    def close() -> None:
        nonlocal current
        bodies.append(current)
        # A body that carries no live line says where the last one before it left the channel; its
        # replay's end is set by its first replayed line.
        current = _Body(log_end=current.log_end)

    def place(size: int, opening: int = 0, reopening: int = 0) -> bool:
        """Whether an item of `size` bytes fits a body of its own; if so it is counted into
        `current` (`opening` more: it opens its list there), or into a new body (`reopening` more
        there) when `current` has no room left for it."""
        if size > room:
            return False
        if current.size + size + opening > room:
            close()
            opening = reopening
        current.size += size + opening
        return True

    def line(text: str, extra: int) -> tuple[str, int]:
        """`text` and the bytes it takes in a body (its separator too); cut, and `shrunk` told, when
        it would not fit a body of its own beside `extra` bytes."""
        size = len(encode_body(text)) + 1
        if size + extra > room:
            # Cut to the most that fits whatever it holds: a UTF-8 byte encodes to at most six
            # bytes (a control character's \\u escape), the quotes and the separator take three.
            # No floor: a line cut to more than this could take its part past the limit.
            text = truncate_line(text, (room - extra - 3) // 6)
            size = len(encode_body(text)) + 1
            shrunk("log line")
        return text, size

    # The replay's lines before the live tail's first position fill what the tail lost: they go
    # first, so no body leaves a gap there that a later one could no longer fill.
    lead = max(0, min(len(replay_lines), live_start - replay_start))

    def replay_slice(lines: list[str], after: int) -> None:
        """Place `lines`, the replay's lines at the positions after `after`."""
        for position, text in enumerate(lines, start=after + 1):
            text, size = line(text, replay_room)
            place(size, 0 if current.replay else replay_room, replay_room)  # `line` made it fit
            current.replay.append(text)
            current.replay_end = position
            if position <= live_start:
                # A body that carries no live line says no more of the channel than its lines.
                current.log_end = position

    replay_slice(replay_lines[:lead], replay_start)
    for position, text in enumerate(live, start=live_start + 1):
        text, size = line(text, 0)
        place(size)
        current.logs.append(text)
        current.log_end = position
    positions: dict[str, Any] = body.get("step_positions") or {}
    for node_id, node in body["live_node_progress"].items():
        size = len(encode_body(node_id)) + len(encode_body(node)) + 2
        marks = positions.get(node_id)
        if marks is not None:
            # A node's transitions are placed by its positions: both travel in the same body.
            size += len(encode_body(node_id)) + len(encode_body(marks)) + 2
        if place(size):
            current.nodes[node_id] = node
            if marks is not None:
                current.positions[node_id] = marks
        else:
            shrunk("node")
    for name in _LIST_FIELDS:
        for item in body[name]:
            if place(len(encode_body(item)) + 1):
                current.lists[name].append(item)
            else:
                shrunk(name)
    replay_slice(replay_lines[lead:], replay_start + lead)
    bodies.append(current)
    return [_render(body, part, index == 0, index == len(bodies) - 1) for index, part in enumerate(bodies)]


def _render(body: dict[str, Any], part: _Body, first: bool, last: bool) -> dict[str, Any]:
    out = {
        **body,
        "status": body["status"] if last else _RUNNING,
        "live_node_progress": part.nodes,
        **({"step_positions": part.positions} if "step_positions" in body else {}),
        "live_logs": part.logs,
        "live_log_total_count": part.log_end,
        **part.lists,
        "terminal_log_replay": None,
    }
    replay = body.get("terminal_log_replay")
    if replay is not None and part.replay:
        out["terminal_log_replay"] = {**replay, "lines": part.replay, "total_count": part.replay_end}
    if not first:
        out.pop("dropped_one_shot_events", None)
        out.pop("pipeline_steps", None)
    if not last:
        out.pop("error", None)
        out.pop("interruption", None)
    return out
