"""Step states: what each step of a run is, and how a run's end settles its open steps. No I/O here.

Every step (a node of the run's `live_node_progress`) has one `state` (`validate.STEP_STATES`):
`pending` (not started), `running`, or settled: `completed`, `failed`, `cancelled`, `skipped` (the
run ended before the step started). A settled step may carry a `reason`, a plain sentence.

- **Explicit wins.** A node that carries `state` is taken as it says. One without (an older
  reporter, a hand-written upload) gets one derived from its fields (`derived_state`): with
  `completed_at` it is `completed`, or `failed` when its `node_io.error` is set or the upload that
  brought it failed the run; with `started_at` it is `running`; otherwise `pending`. A derived
  failure keeps the node's error as its reason (else the run's). Nothing ever reads "done" from a
  completion time alone: readers go by `state`.
- **A run's end settles its open steps**, whichever way it ends (a terminal upload, a terminal set
  over HTTP, the watchdog, a cancel), in the transaction that ends it: a running step takes the
  run's outcome (`failed` / `cancelled` with the reason `run <status>: <error>`, `completed`), a
  pending one is `skipped`. Settled steps stay as they settled.
- **One event per settlement**: `step.completed`, `step.failed`, `step.cancelled` or
  `step.skipped` with `node_id`, `state`, `outcome` (the same as `state`, kept for readers of the
  older `step.completed` events), `completed_at` when the step has one, `reason` when there is one
  and the node's `error`. A step is announced settled when its state becomes a settled one it did
  not already hold, so replaying an upload or a settlement announces nothing twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ledger import validate

__all__ = [
    "OPEN_STATES",
    "SETTLED_STATES",
    "SKIPPED_REASON",
    "STEP_STATES",
    "derived_state",
    "node_error",
    "run_reason",
    "settle",
    "settle_steps",
    "settlement_event",
    "with_state",
    "with_states",
]

STEP_STATES: Final = validate.STEP_STATES
OPEN_STATES: Final = ("pending", "running")
SETTLED_STATES: Final = ("completed", "failed", "cancelled", "skipped")
SKIPPED_REASON: Final = "the run ended before this step started"

_Node = Mapping[str, Any]


def node_error(node: _Node) -> str | None:
    """The error the step's own I/O reports, if any."""
    node_io = node.get("node_io")
    error = node_io.get("error") if isinstance(node_io, Mapping) else None
    return str(error) if error else None


def derived_state(node: _Node, run_status: str | None = None) -> str:
    """The node's state: its own `state` when it carries one, else read from its fields (see the
    module docstring); `run_status` is the status of the upload that brought the node."""
    state = node.get("state")
    if state in STEP_STATES:
        return str(state)
    if node.get("completed_at") is not None:
        return "failed" if node_error(node) or run_status == "failed" else "completed"
    if node.get("started_at") is not None:
        return "running"
    return "pending"


def run_reason(status: str, error: str | None) -> str:
    """The reason of a step the run's end settled: `run failed: <error>` (or `run failed`)."""
    return validate.truncate_line(f"run {status}: {error}" if error else f"run {status}")


def with_state(node: _Node, run_status: str | None = None, error: str | None = None) -> dict[str, Any]:
    """`node` with its `state` (derived when it carries none) and, for a derived failure, a
    `reason`: the node's own error, else the run's (`error`, the upload's terminal error)."""
    if node.get("state") in STEP_STATES:
        return dict(node)
    state = derived_state(node, run_status)
    out = {**node, "state": state}
    if state == "failed" and not node.get("reason"):
        out["reason"] = validate.truncate_line(node_error(node) or run_reason("failed", error))
    return out


def with_states(nodes: object) -> dict[str, Any]:
    """A stored snapshot as readers get it: every node with its `state` (derived for a node stored
    without one); a snapshot that is not an object reads as no steps."""
    if not isinstance(nodes, Mapping):
        return {}
    return {
        node_id: with_state(node) if isinstance(node, Mapping) else node for node_id, node in nodes.items()
    }


def settle(node: _Node, status: str, error: str | None) -> dict[str, Any] | None:
    """The node settled by its run's end (`status`, `error`), or None when it is settled already."""
    state = derived_state(node)
    if state in SETTLED_STATES:
        return None
    if state == "pending":
        return {**node, "state": "skipped", "reason": SKIPPED_REASON}
    if status == "completed":
        return {**node, "state": "completed"}
    return {**node, "state": status, "reason": run_reason(status, error)}


def settlement_event(node_id: str, node: _Node) -> dict[str, Any]:
    """The event that announces `node` settled (its `state` is a settled one)."""
    state = str(node["state"])
    event: dict[str, Any] = {"type": f"step.{state}", "node_id": node_id, "state": state, "outcome": state}
    if node.get("completed_at") is not None:
        event["completed_at"] = node["completed_at"]
    if node.get("reason"):
        event["reason"] = node["reason"]
    error = node_error(node)
    if error:
        event["error"] = error
    return event


def settle_steps(
    stored: Mapping[str, Any], snapshot: Mapping[str, Any], status: str, error: str | None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Settle every open step of `snapshot` for a run that ends `status` with `error`: the events
    (one per step whose settled state `stored`, the snapshot before this change, did not already
    hold) and the new snapshot."""
    events: list[dict[str, Any]] = []
    settled_snapshot = dict(snapshot)
    for node_id, node in snapshot.items():
        if not isinstance(node, Mapping):
            continue
        settled = settle(node, status, error)
        if settled is None:
            continue
        settled_snapshot[node_id] = settled
        before = stored.get(node_id)
        if not isinstance(before, Mapping) or derived_state(before) != settled["state"]:
            events.append(settlement_event(node_id, settled))
    return events, settled_snapshot
