"""Step lifecycle over the static pipeline's ordered top-level nodes.

Each known node is ``unexecuted`` → ``started`` → ``completed`` | ``failed``; terminal states stay
terminal and a repeated start keeps the first start time. Transitions are reported through the
`emit` callback (the reporter turns them into ``started_at``/``completed_at`` patches), never
twice for the same node and state.

Rules (SPEC 3):

* At creation, the steps before the first dataset step start (they have no events of their own;
  with no dataset step at all, every step is "before" it).
* A map start starts its dataset step and completes every earlier step that is still open: the
  pipeline is sequential, so the steps before a running map are done.
* A map completion/failure settles its step (starting it first if its start was missed).
* ``tool.call.started`` starts the first not-yet-settled tool step with that ``toolId``; its
  settlement completes or fails it.
* At the end, a failed run fails every step still open and a completed run completes them; steps
  that settled stay as they settled, and steps that never started (untaken branches) stay
  unexecuted.
* A reporter that continues an attempt (resume) restores the states the ledger holds without
  reporting them again.

A failure carries a reason (``map failed``, ``tool <id> failed``, ``run failed``); the reporter
puts it in the node's ``node_io.error``, which is how the ledger tells a failed step from a
completed one. Events naming a node or tool the pipeline does not know are ignored here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from reporter.pipeline import PipelineNode


class StepState(StrEnum):
    UNEXECUTED = "unexecuted"
    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"


_TERMINAL = (StepState.COMPLETED, StepState.FAILED)


@dataclass(frozen=True, slots=True)
class StepTransition:
    node_id: str
    transition: Literal["started", "completed", "failed"]
    at: int
    reason: str | None = None  # why a step failed, for the node's error


class StepLifecycleTracker:
    """Tracks which top-level steps started and settled, and reports each transition once."""

    def __init__(
        self,
        nodes: Sequence[PipelineNode],
        emit: Callable[[StepTransition], None],
        now_ms: Callable[[], int],
    ) -> None:
        self._nodes = tuple(nodes)
        self._emit = emit
        self._now_ms = now_ms
        self._states = {node.node_id: StepState.UNEXECUTED for node in self._nodes}
        first_dataset = next((i for i, n in enumerate(self._nodes) if n.type == "dataset"), None)
        cut = len(self._nodes) if first_dataset is None else first_dataset
        self._pre_dataset = tuple(node.node_id for node in self._nodes[:cut])

    def state(self, node_id: str) -> StepState | None:
        return self._states.get(node_id)

    def states(self) -> dict[str, StepState]:
        """Every known node's state, in pipeline order."""
        return dict(self._states)

    def _start(self, node_id: str) -> None:
        if self._states.get(node_id) is StepState.UNEXECUTED:
            self._states[node_id] = StepState.STARTED
            self._emit(StepTransition(node_id, "started", self._now_ms()))

    def _settle(self, node_id: str, state: Literal["completed", "failed"], reason: str | None = None) -> None:
        current = self._states.get(node_id)
        if current is None or current in _TERMINAL:
            return
        if current is StepState.UNEXECUTED:
            self._start(node_id)
        self._states[node_id] = StepState(state)
        self._emit(StepTransition(node_id, state, self._now_ms(), reason if state == "failed" else None))

    def mark_pre_dataset_steps_started(self) -> None:
        for node_id in self._pre_dataset:
            self._start(node_id)

    def restore(self, node_id: str, state: StepState) -> None:
        """Take a node's state as the ledger holds it, reporting nothing (a resumed attempt)."""
        if node_id in self._states:
            self._states[node_id] = state

    def on_map_started(self, node_id: str) -> None:
        if node_id not in self._states:
            return
        for node in self._nodes:
            if node.node_id == node_id:
                break
            if self._states[node.node_id] is StepState.STARTED:
                self._settle(node.node_id, "completed")
        self._start(node_id)

    def on_map_completed(self, node_id: str) -> None:
        self._settle(node_id, "completed")

    def on_map_failed(self, node_id: str) -> None:
        self._settle(node_id, "failed", "map failed")

    def _tool_node(self, tool_id: str, *, open_only: bool) -> str | None:
        for node in self._nodes:
            if node.type != "tool" or node.tool_id != tool_id:
                continue
            state = self._states[node.node_id]
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

    def on_tool_failed(self, tool_id: str) -> None:
        node_id = self._tool_node(tool_id, open_only=True) or self._tool_node(tool_id, open_only=False)
        if node_id is not None:
            self._settle(node_id, "failed", f"tool {tool_id} failed")

    def mark_started_failed(self) -> None:
        for node_id, state in list(self._states.items()):
            if state is StepState.STARTED:
                self._settle(node_id, "failed", "run failed")

    def mark_all_terminal(self) -> None:
        for node_id, state in list(self._states.items()):
            if state is StepState.STARTED:
                self._settle(node_id, "completed")
