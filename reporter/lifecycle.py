"""Step lifecycle over the static pipeline's ordered top-level nodes.

Each known node is ``unexecuted`` → ``started`` → ``completed`` | ``failed``; terminal states stay
terminal and a repeated start keeps the first start time. Transitions are reported through the
`emit` callback (the reporter turns them into ``started_at``/``completed_at`` patches), never
twice for the same node and state.

Rules:

* At creation, the steps before the first dataset step start (they have no events of their own;
  with no dataset step at all, every step is "before" it).
* A map start starts its dataset step and completes every earlier step that is still open: the
  pipeline is sequential, so the steps before a running map are done.
* A map completion/failure settles its step (starting it first if its start was missed).
* ``tool.call.started`` starts the first not-yet-settled tool step with that ``toolId``; its
  settlement completes or fails it.
* At the end (`settle_open`), a failed run fails every step still open, a cancelled one cancels
  them and a completed run completes them; steps that settled stay as they settled, and steps that
  never started (untaken branches) stay unexecuted here (the ledger skips them as the run ends).
* A step's state is its node progress (`_step_state`: the `state` it carries, else its times), so
  a reporter that continues an attempt (resume) decides from what the ledger holds, exactly as the
  first reporter did.

Every transition says the step's state explicitly (``running``, ``completed``, ``failed``,
``cancelled``: `transition_patch`), so the ledger stores it as it is rather than deriving it. A
failure carries a reason (``map failed``, ``tool <id> failed``, with the runner's error when it
gives one: ``tool <id> failed: <error>``; ``run failed`` for a step the run's failure ends), kept on
the step as its ``reason`` and, for ledgers that read failures from the node's I/O, in
``node_io.error``. Steps that never started are left to the ledger, which settles them ``skipped``
when the run ends. Events naming a node or tool the pipeline does not know are ignored here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from reporter.pipeline import PipelineNode
from reporter.progress import NodeProgress

__all__ = [
    "StepLifecycleTracker",
    "StepState",
    "StepTransition",
    "transition_patch",
]


class StepState(StrEnum):
    UNEXECUTED = "unexecuted"
    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


_TERMINAL = (StepState.COMPLETED, StepState.FAILED, StepState.CANCELLED, StepState.SKIPPED)
# The ledger's step states (`ledger.validate.STEP_STATES`) as the tracker's.
_FROM_LEDGER = {
    "pending": StepState.UNEXECUTED,
    "running": StepState.STARTED,
    "completed": StepState.COMPLETED,
    "failed": StepState.FAILED,
    "cancelled": StepState.CANCELLED,
    "skipped": StepState.SKIPPED,
}

_Transition = Literal["started", "completed", "failed", "cancelled"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTransition:
    node_id: str
    transition: _Transition
    at: int
    reason: str | None = None  # why a step failed or was cancelled


def transition_patch(event: StepTransition, current: NodeProgress | None) -> dict[str, Any]:
    """The node progress patch that records `event` on the step (`current`): its time, its state
    and, for a failure or a cancel, its reason (a failure's also in ``node_io.error``, which older
    ledgers read a failure from)."""
    if event.transition == "started":
        return {"started_at": event.at, "state": "running"}
    patch: dict[str, Any] = {"completed_at": event.at, "state": event.transition}
    if event.transition == "completed":
        return patch
    reason = event.reason or f"step {event.transition}"
    patch["reason"] = reason
    if event.transition == "failed":
        node_io = dict(current.node_io) if current is not None and current.node_io else {}
        node_io["error"] = node_io.get("error") or reason
        patch["node_io"] = node_io
    return patch


def _step_state(node: NodeProgress | None) -> StepState:
    """A step's state as its node progress shows it: the state it carries (the ledger's, when a
    reporter continues an attempt), else started once it has ``started_at``, settled once it has
    ``completed_at`` (failed when its I/O carries an error)."""
    if node is None:
        return StepState.UNEXECUTED
    if node.state is not None and node.state in _FROM_LEDGER:
        return _FROM_LEDGER[node.state]
    if node.started_at is None and node.completed_at is None:
        return StepState.UNEXECUTED
    if node.completed_at is None:
        return StepState.STARTED
    failed = isinstance(node.node_io, Mapping) and bool(node.node_io.get("error"))
    return StepState.FAILED if failed else StepState.COMPLETED


class StepLifecycleTracker:
    """Decides the top-level steps' transitions and reports each one once.

    It keeps no state of its own: a step's state is read from its node progress (`_step_state`),
    which the `emit` callback updates. So a reporter that continues an attempt, whose node
    progress comes back from the ledger, takes every decision the first reporter would have.
    """

    def __init__(
        self,
        nodes: Sequence[PipelineNode],
        progress: Mapping[str, NodeProgress],
        emit: Callable[[StepTransition], None],
        now_ms: Callable[[], int],
    ) -> None:
        self._nodes = tuple(nodes)
        self._ids = frozenset(node.node_id for node in self._nodes)
        self._progress = progress
        self._emit = emit
        self._now_ms = now_ms
        first_dataset = next((i for i, n in enumerate(self._nodes) if n.type == "dataset"), None)
        cut = len(self._nodes) if first_dataset is None else first_dataset
        self._pre_dataset = tuple(node.node_id for node in self._nodes[:cut])

    def state(self, node_id: str) -> StepState | None:
        if node_id not in self._ids:
            return None
        return _step_state(self._progress.get(node_id))

    def states(self) -> dict[str, StepState]:
        """Every known node's state, in pipeline order."""
        return {node.node_id: _step_state(self._progress.get(node.node_id)) for node in self._nodes}

    def _start(self, node_id: str) -> None:
        if self.state(node_id) is StepState.UNEXECUTED:
            self._emit(StepTransition(node_id=node_id, transition="started", at=self._now_ms()))

    def _settle(
        self, node_id: str, state: Literal["completed", "failed", "cancelled"], reason: str | None = None
    ) -> None:
        current = self.state(node_id)
        if current is None or current in _TERMINAL:
            return
        if current is StepState.UNEXECUTED:
            self._start(node_id)
        self._emit(
            StepTransition(
                node_id=node_id,
                transition=state,
                at=self._now_ms(),
                reason=reason if state != "completed" else None,
            )
        )

    def mark_pre_dataset_steps_started(self) -> None:
        for node_id in self._pre_dataset:
            self._start(node_id)

    def on_map_started(self, node_id: str) -> None:
        if node_id not in self._ids:
            return
        for node in self._nodes:
            if node.node_id == node_id:
                break
            if self.state(node.node_id) is StepState.STARTED:
                self._settle(node.node_id, "completed")
        self._start(node_id)

    def on_map_completed(self, node_id: str) -> None:
        self._settle(node_id, "completed")

    def on_map_failed(self, node_id: str, error: str | None = None) -> None:
        self._settle(node_id, "failed", _reason("map failed", error))

    def _tool_node(self, tool_id: str, *, open_only: bool) -> str | None:
        for node in self._nodes:
            if node.type != "tool" or node.tool_id != tool_id:
                continue
            state = self.state(node.node_id)
            if state not in _TERMINAL and (not open_only or state is StepState.STARTED):
                return node.node_id
        return None

    def on_tool_called(self, tool_id: str) -> None:
        node_id = self._tool_node(tool_id, open_only=False)
        if node_id is not None:
            self._start(node_id)

    def on_tool_completed(self, tool_id: str) -> None:
        node_id = self._tool_node(tool_id, open_only=True)
        if node_id is not None:
            self._settle(node_id, "completed")

    def on_tool_failed(self, tool_id: str, error: str | None = None) -> None:
        node_id = self._tool_node(tool_id, open_only=True) or self._tool_node(tool_id, open_only=False)
        if node_id is not None:
            self._settle(node_id, "failed", _reason(f"tool {tool_id} failed", error))

    def mark_started_failed(self, reason: str = "run failed") -> None:
        for node_id, state in self.states().items():
            if state is StepState.STARTED:
                self._settle(node_id, "failed", reason)

    def mark_started_cancelled(self, reason: str = "run cancelled") -> None:
        for node_id, state in self.states().items():
            if state is StepState.STARTED:
                self._settle(node_id, "cancelled", reason)

    def mark_all_terminal(self) -> None:
        for node_id, state in self.states().items():
            if state is StepState.STARTED:
                self._settle(node_id, "completed")

    def settle_open(self, run_status: str, error: str | None = None) -> None:
        """The run's end settles the steps still running by its outcome: completed with a
        completed run, cancelled with a cancelled one (``run cancelled``), failed with any other
        end (``run <status>``, with the run's error when known). Steps that never started stay
        pending here: the ledger settles them ``skipped``."""
        if run_status == "completed":
            self.mark_all_terminal()
        elif run_status == "cancelled":
            self.mark_started_cancelled(_reason("run cancelled", error))
        else:
            self.mark_started_failed(_reason(f"run {run_status}", error))


def _reason(what: str, error: object) -> str:
    """`what`, with the runner's error after it when it gave one (as text)."""
    if isinstance(error, str) and error.strip():
        return f"{what}: {error.strip()}"
    return what
