"""Per-node progress: the model, the merge rule and the progress messages.

A node's progress is a `NodeProgress` whose fields are all optional: a field that was never set is
left off the wire. A *patch* is a mapping of snake_case field names to values; it overrides only the
fields it names, and a value of ``None`` counts as "not named" (so callers can write
``total=t if t > 0 else None``). Every merge refreshes ``updated_at``.

A patch without a ``state`` that ends an open step (names ``completed_at``), or starts a pending one
(names ``started_at``), drops the open state the node had: its times say what it is now (a node
restored from the ledger as ``pending`` that the data plane shows settled reads as one never
restored would). A settled state stays until a patch names another.

The stale-completion rule: after the merge a node whose ``completed`` is below a positive ``total``
loses its ``completed_at`` unless the patch itself sets one (a step that regressed, or that a later
page reopened, is not finished any more), and a settled ``state`` with it (it is ``running``
again). ``completed`` counts successes only, so a map with failed rows keeps ``completed_at`` only
when the patch that closes it names it.

In an upload every field is snake_case, times are epoch milliseconds, and ``node_io`` is
a dict with snake_case keys (``attempt``, ``invocation_id``, ``inputs``, ``outputs``, ``error``,
``inputs_truncated``, ``outputs_truncated``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ledger.validate import NODE_FIELDS

__all__ = [
    "PROGRESS_FIELDS",
    "NodeProgress",
    "calls_in_flight_message",
    "grouped",
    "merge_patch",
    "merge_row_counts",
    "rows_processed_message",
    "settled_map_patch",
]

# What a patch may name: every field of a node's progress the ledger stores but `updated_at`,
# which every merge sets itself.
PROGRESS_FIELDS: tuple[str, ...] = tuple(name for name in NODE_FIELDS if name != "updated_at")
_PATCHABLE = frozenset(PROGRESS_FIELDS)
_SETTLED = frozenset(("completed", "failed", "cancelled", "skipped"))
_OPEN = frozenset(("pending", "running"))


@dataclass(slots=True, kw_only=True)
class NodeProgress:
    """One step's live progress; ``None`` means "never reported"."""

    completed: int | None = None
    failed: int | None = None
    total: int | None = None
    started_rows: int | None = None
    active_rows: int | None = None
    waiting_rows: int | None = None
    completed_rows: int | None = None
    message: str | None = None
    artifact_table_namespace: str | None = None
    started_at: int | None = None
    completed_at: int | None = None
    node_io: dict[str, Any] | None = None
    updated_at: int | None = None
    # The step's state (`ledger.validate.STEP_STATES`) and why it settled as it did, sent
    # explicitly so the ledger need not derive them.
    state: str | None = None
    reason: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """The node's snake_case JSON object in an upload, without the fields that were never set."""
        out: dict[str, Any] = {}
        for name in _WIRE_ORDER:
            value = getattr(self, name)
            if value is not None:
                out[name] = dict(value) if name == "node_io" else value
        return out

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> NodeProgress:
        """A node from its JSON object as the ledger stores it (unknown keys ignored)."""
        node = cls()
        for name in _WIRE_ORDER:
            value = wire.get(name)
            if value is not None:
                setattr(
                    node, name, dict(value) if name == "node_io" and isinstance(value, Mapping) else value
                )
        return node


_WIRE_ORDER = tuple(f.name for f in fields(NodeProgress))


def merge_patch(node: NodeProgress, patch: Mapping[str, Any], now_ms: int) -> None:
    """Apply `patch` to `node` in place (see the module docstring for the rule).

    Unknown keys are a programming error and raise `KeyError`, so a typo cannot silently drop data.
    """
    if not _PATCHABLE.issuperset(patch):  # one C-level pass over the keys, not a test per key
        unknown = next(key for key in patch if key not in _PATCHABLE)
        raise KeyError(f"not a node progress field: {unknown!r}")
    for key, value in patch.items():
        if value is not None:
            setattr(node, key, value)
    if node.state in _OPEN and patch.get("state") is None and _moves_on(node.state, patch):
        # A start or an end without a state: the times say what the step is now.
        node.state = node.reason = None
    _end_merge(node, patch.get("completed_at") is not None, now_ms)


def _moves_on(state: str | None, patch: Mapping[str, Any]) -> bool:
    """Whether `patch` ends a step in the open `state`, or starts a pending one."""
    return patch.get("completed_at") is not None or (
        state == "pending" and patch.get("started_at") is not None
    )


def merge_row_counts(
    node: NodeProgress,
    now_ms: int,
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
    """`merge_patch` of a patch naming exactly these fields, without building it: the per-event
    path of map progress and tool batches (a setattr per key costs more than the whole fold)."""
    if completed is not None:
        node.completed = completed
    if failed is not None:
        node.failed = failed
    if total is not None:
        node.total = total
    if started_rows is not None:
        node.started_rows = started_rows
    if active_rows is not None:
        node.active_rows = active_rows
    if waiting_rows is not None:
        node.waiting_rows = waiting_rows
    if completed_rows is not None:
        node.completed_rows = completed_rows
    if artifact_table_namespace is not None:
        node.artifact_table_namespace = artifact_table_namespace
    if message is not None:
        node.message = message
    _end_merge(node, False, now_ms)


def _end_merge(node: NodeProgress, names_completed_at: bool, now_ms: int) -> None:
    """The stale-completion rule and the ``updated_at`` stamp that end every merge."""
    if not names_completed_at and node.completed_at is not None:
        completed = node.completed or 0
        total = node.total or 0
        if total > 0 and completed < total:
            node.completed_at = None
            if node.state in _SETTLED:
                # Reopened: under way again, whatever it had settled as.
                node.state, node.reason = "running", None
    node.updated_at = now_ms


def settled_map_patch(
    completed: int, failed: int, total: int, *, started_rows: int | None = None
) -> dict[str, Any]:
    """The patch of a map that settled: nothing active or waiting, every row started (`total`, or
    the settled rows when there is no positive total) unless `started_rows` says otherwise."""
    if started_rows is None:
        started_rows = total if total > 0 else completed + failed
    return {
        "completed": completed,
        "failed": failed,
        "total": total if total > 0 else None,
        "started_rows": started_rows,
        "active_rows": 0,
        "waiting_rows": 0,
        "completed_rows": completed,
        "message": rows_processed_message(completed + failed, total if total > 0 else None),
    }


def rows_processed_message(processed: int, total: int | None) -> str | None:
    """``1,234 / 10,000 rows processed``, the rows processed being those that completed and those
    that failed (every face says the failed ones apart); None when there is no positive total."""
    if total is None or total <= 0:
        return None
    return f"{grouped(processed if processed > 0 else 0)} / {grouped(total)} rows processed"


def calls_in_flight_message(active_rows: int, processed_rows: int, total_rows: int) -> str:
    """``8 calls in flight · 1,234 / 10,000 rows processed`` (the tail only with a total; processed:
    completed or failed)."""
    head = f"{grouped(active_rows)} calls in flight"
    if total_rows > 0:
        return f"{head} · {grouped(processed_rows)} / {grouped(total_rows)} rows processed"
    return head


# Every message of every progress event groups its numbers; the format mini-language's ","
# costs several times what two table look-ups and a concatenation do.
_GROUPS = tuple(str(n) for n in range(1000))
_GROUPS_PADDED = tuple(f"{n:03d}" for n in range(1000))


def grouped(number: int) -> str:
    """``f"{number:,}"`` (thousands separated by commas), from tables below a billion."""
    if 0 <= number < 1_000_000_000:
        if number < 1000:
            return _GROUPS[number]
        if number < 1_000_000:
            return f"{_GROUPS[number // 1000]},{_GROUPS_PADDED[number % 1000]}"
        return (
            f"{_GROUPS[number // 1_000_000]},{_GROUPS_PADDED[number // 1000 % 1000]},"
            f"{_GROUPS_PADDED[number % 1000]}"
        )
    return f"{number:,}"
