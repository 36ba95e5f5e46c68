"""Make an upload storable before it leaves the worker: repair free text, drop what would be refused.

A runner's stream is whatever its tools produced. The ledger refuses a whole upload when one field
is out of bounds (a NUL in a node id, a string `observedAt`, a count past a bigint), and a refused
upload would be retried forever: one junk value must never cost the run its progress. So every
upload goes through `sanitize_upload`, which checks it field by field with the very functions the
ledger parses it with (`ledger.validate`, dependency-free):

* free text (log lines, replay lines, node messages, a node's error) is repaired: NUL and lone
  surrogates become U+FFFD, as the ledger itself would store them; and an over-long one is
  truncated to the line bound (`ledger.validate.truncate_line`: its beginning and end kept, a
  marker saying how many bytes were cut between them);
* the contract's step list (``pipeline_steps``) keeps, in order, the steps whose ids fit a value's
  bound (`ledger.validate.UploadBounds.value_bytes`) together: a contract whose step ids alone
  would fill the body can never make an upload too big; the steps left out are counted;
* a structured value the ledger would refuse, or one bigger than an upload may carry (the
  `ledger.validate.UploadBounds` of the service's body limit), is dropped at the smallest unit
  that holds it (one node field, one key of a node's I/O, one node, one lifecycle event, one
  activity observation), and counted per kind by the `Sanitizer`; the rest of the upload still goes.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from ledger import validate

__all__ = [
    "Sanitizer",
    "bounded",
    "sanitize_upload",
]

_log = logging.getLogger("reporter.sanitize")

_T = TypeVar("_T")


class Sanitizer:
    """Checks values against the ledger's rules and counts what it drops, per kind; says so once
    per kind on the logger. One per reporter: the fold checks values as they arrive (so nothing
    the ledger would drop can steer it) and the uploader checks every upload once more."""

    def __init__(self, run_id: str, bounds: validate.UploadBounds = validate.DEFAULT_UPLOAD_BOUNDS) -> None:
        self.run_id = run_id
        self.bounds = bounds
        self.counts: Counter[str] = Counter()

    def note(self, kind: str, problem: validate.InvalidInput) -> None:
        if not self.counts[kind]:
            _log.warning(
                "run %s: dropping %s the ledger would refuse (%s); further ones are counted, not logged",
                self.run_id,
                kind,
                problem.message,
            )
        self.counts[kind] += 1

    def kept(self, kind: str, check: Callable[[str, Any], _T], value: object) -> _T | None:
        """`check(kind, value)`, or None (counted) when the ledger would refuse the value."""
        try:
            return check(kind, value)
        except validate.InvalidInput as problem:
            self.note(kind, problem)
            return None

    def node_io(self, name: str, node_io: dict[str, Any]) -> dict[str, Any]:
        """The keys of a node's I/O the ledger stores and an upload has room for; the error (free
        text) survives repaired and bounded, since it is how the ledger tells a failed step from a
        completed one."""
        clean: dict[str, Any] = {}
        for key, value in node_io.items():
            try:
                validate.text(f"{name} key", key)
                if key == "error" and isinstance(value, str):
                    clean[key] = validate.log_line(value, self.bounds.log_line_bytes)
                    continue
                field = f"{name}.{key}"
                checked = validate.json_value(field, value, max_depth=validate.MAX_WRAPPED_VALUE_DEPTH)
                clean[key] = validate.upload_value(field, checked, self.bounds.value_bytes)
            except validate.InvalidInput as problem:
                self.note("node I/O value", problem)
                if key == "error":
                    clean[key] = "step failed (its error text could not be stored)"
        return clean


def sanitize_upload(payload: dict[str, Any], sanitizer: Sanitizer) -> dict[str, Any]:
    """A copy of `payload` the ledger accepts whole (see the module docstring)."""
    bounds = sanitizer.bounds
    clean = dict(payload)
    clean["live_logs"] = [validate.log_line(line, bounds.log_line_bytes) for line in payload["live_logs"]]
    clean["live_node_progress"] = _nodes(payload["live_node_progress"], sanitizer)
    clean["dataset_lifecycle_events"] = _kept_all(
        payload["dataset_lifecycle_events"],
        bounded(validate.dataset_lifecycle_event, bounds),
        "dataset lifecycle event",
        sanitizer,
    )
    clean["activity_observations"] = _kept_all(
        payload["activity_observations"],
        bounded(validate.activity_observation, bounds),
        "activity observation",
        sanitizer,
    )
    if payload.get("error") is not None:
        clean["error"] = validate.log_line(payload["error"], bounds.log_line_bytes)
    steps = payload.get("pipeline_steps")
    if steps:
        clean["pipeline_steps"] = _steps_within(steps, bounds.value_bytes, sanitizer)
    positions = payload.get("step_positions")
    if positions is not None:
        # Only for the nodes the upload carries: a node dropped here has no step events to place.
        nodes = clean["live_node_progress"]
        clean["step_positions"] = {node_id: marks for node_id, marks in positions.items() if node_id in nodes}
    interruption = payload.get("interruption")
    if interruption is not None:
        clean["interruption"] = {
            key: None if text is None else validate.log_line(text, bounds.log_line_bytes)
            for key, text in interruption.items()
        }
    replay = payload.get("terminal_log_replay")
    if replay is not None:
        clean["terminal_log_replay"] = {
            **replay,
            "lines": [validate.log_line(line, bounds.log_line_bytes) for line in replay["lines"]],
        }
    return clean


def bounded(check: Callable[[str, Any], _T], bounds: validate.UploadBounds) -> Callable[[str, Any], _T]:
    """`check`, then `validate.upload_value`: a value the ledger takes and an upload has room for."""

    def checked(field: str, value: object) -> _T:
        return validate.upload_value(field, check(field, value), bounds.value_bytes)  # type: ignore[no-any-return]

    return checked


def _kept_all(
    items: list[Any], check: Callable[[str, Any], Any], kind: str, sanitizer: Sanitizer
) -> list[Any]:
    kept = (sanitizer.kept(kind, check, item) for item in items)
    return [item for item in kept if item is not None]


def _steps_within(steps: list[str], max_bytes: int, sanitizer: Sanitizer) -> list[str]:
    """The steps, in order, whose ids take at most `max_bytes` encoded together (the list's
    brackets and commas included); each one left out is counted."""
    kept: list[str] = []
    size = 2
    for step in steps:
        cost = len(validate.encode_body(step)) + 1
        if size + cost > max_bytes:
            sanitizer.note(
                "pipeline step",
                validate.InvalidInput("pipeline_steps", f"the steps' ids take more than {max_bytes} bytes"),
            )
            continue
        kept.append(step)
        size += cost
    return kept


def _nodes(nodes: dict[str, dict[str, Any]], sanitizer: Sanitizer) -> dict[str, dict[str, Any]]:
    clean: dict[str, dict[str, Any]] = {}
    for node_id, node in nodes.items():
        if sanitizer.kept("node", validate.node_id, node_id) is not None:
            clean[node_id] = _node(node_id, node, sanitizer)
    return clean


def _node(node_id: str, node: dict[str, Any], sanitizer: Sanitizer) -> dict[str, Any]:
    clean: dict[str, Any] = {}
    for key, value in node.items():
        if value is None or key not in validate.NODE_FIELDS:
            continue
        name = f"{node_id}.{key}"
        if key == "node_io" and isinstance(value, dict):
            clean[key] = sanitizer.node_io(name, value)  # its values one by one: each may be too big
            continue
        try:
            clean[key] = validate.node_field(name, key, value)
        except validate.InvalidInput as problem:
            sanitizer.note("node progress field", problem)
            continue
        if key == "message":
            clean[key] = validate.truncate_line(clean[key], sanitizer.bounds.log_line_bytes)
    return clean
