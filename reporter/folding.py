"""Folding the runner's event stream into node progress (the hot path: synchronous, no I/O).

`EventFolder.on_runner_event` takes one raw runner event (camelCase, as the runner writes it) and
updates the `ProgressState`; after each fact it calls ``schedule(force)`` so the reporter can ask
its uploader for a (throttled, or for one-shot facts forced) flush. A line the runner protocol
refuses (`reporter.lines`) is junk: counted by the sanitizer and skipped whole, without raising,
since a junk line from the runner must never kill a run.

Counting rules worth knowing:

* The map-start log line is emitted once per *source page* and its "already satisfied" number is
  page-local, so it never lowers the cumulative ``completed``/``failed`` already folded.
* ``map.progress`` keeps ``started_rows`` monotonic; active rows are started minus settled.
* Docflow node events are ordered by ``(attempt, invocation sequence)`` where the sequence is the
  last ``:``-separated part of ``invocationId``; an older event never overwrites a newer one.
* Map events name their node by ``mapNodeId``, else by their table namespace through the static
  pipeline (the inline runner sends ``mapNodeId: null``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from ledger import validate
from ledger.validate import MAX_LOG_LINE_BYTES
from reporter import reconcile, wire
from reporter.lifecycle import StepLifecycleTracker, StepState, StepTransition, transition_patch
from reporter.lines import (
    ACTIVITY_KIND,
    DATASET_LIFECYCLE_KIND,
    DOCFLOW_HIT_KIND,
    DOCFLOW_NODE_KINDS,
    MAP_COUNT_KINDS,
    MAP_START_KINDS,
    TOOL_CALL_SETTLED_KIND,
    TOOL_CALL_STARTED_KIND,
    junk_reason,
)
from reporter.pipeline import StaticPipeline, storable
from reporter.progress import NodeProgress, calls_in_flight_message, rows_processed_message, settled_map_patch
from reporter.sanitize import Sanitizer, bounded
from reporter.state import ProgressState
from reporter.wire import (
    MAP_START_MARKER,
    PERF_MAP_SETUP_MARKER,
    TOOL_BATCH_AT_START,
    TOOL_BATCH_MARKER,
    LogMode,
    as_count,
    as_epoch_ms,
    as_int,
    durable_log_filter,
    invocation_sequence,
    tool_batch_calls,
)

__all__ = [
    "JUNK_OUTSIDE_CONTRACT",
    "JUNK_RUNNER_LINE",
    "EventFolder",
]

_log = logging.getLogger("reporter")

# Every tool-batch line of a map builds its message, and the lines between two of the map's
# progress events state the same counts: a hit costs a quarter of building the text.
_in_flight_message = functools.lru_cache(maxsize=256)(calls_in_flight_message)

# The kinds of junk the sanitizer counts (`ledger report` sums them into the lines it could not use):
# a line the runner protocol refuses, and a line or checkpoint frame naming a step the contract does
# not list.
JUNK_RUNNER_LINE = "runner line"
JUNK_OUTSIDE_CONTRACT = "line or frame naming a step outside the contract"
# Unsent log lines past which a line asks for an upload at once (half the live tail).
_LOG_BACKLOG = validate.LIVE_LOG_TAIL_LIMIT // 2
# How many steps outside the contract are named in warnings (the rest are counted).
_NAMED_OUTSIDE_STEPS = 20
# The node I/O a stored observation or a later event of the same invocation keeps when it does not
# carry it.
_KEPT_IO_KEYS = ("inputs", "inputs_truncated", "outputs", "outputs_truncated")


def _same_invocation(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a.get("attempt") == b.get("attempt") and a.get("invocation_id") == b.get("invocation_id")


def _kept_io(new: Mapping[str, Any], stored: Mapping[str, Any]) -> dict[str, Any]:
    """`new` node I/O with the inputs, outputs and truncation flags of `stored` it lacks, when both
    are of the same invocation."""
    kept = dict(new)
    if _same_invocation(new, stored):
        for key in _KEPT_IO_KEYS:
            if key not in kept and key in stored:
                kept[key] = stored[key]
    return kept


@dataclass(frozen=True, slots=True, kw_only=True)
class _MapFacts:
    """What a ``map.*`` execution event says, read once."""

    node_id: str
    total: int | None
    completed: int | None
    failed: int
    namespace: str | None


class EventFolder:
    """Owns the fold from runner events to `ProgressState` and the step lifecycle."""

    def __init__(
        self,
        state: ProgressState,
        pipeline: StaticPipeline,
        *,
        mode: LogMode = "progress_reporter",
        schedule: Callable[[bool], None] = lambda force: None,
        sanitizer: Sanitizer | None = None,
    ) -> None:
        self.state = state
        self.sanitizer = sanitizer or Sanitizer("")
        self.pipeline = pipeline
        self._durable_log = durable_log_filter(mode)
        # A line of up to this many characters, ASCII without NUL, is kept and parsed as it is.
        self._kept_line_bytes = min(state.bounds.log_line_bytes, MAX_LOG_LINE_BYTES)
        self.active_map_node_id: str | None = None
        self.lifecycle = StepLifecycleTracker(pipeline.nodes, state.nodes, self._on_transition, state.now_ms)
        # Folded, not sent: the first event or the end sends it, and a reporter that continues an
        # attempt must read where the ledger is (`resume`) before it uploads anything.
        self.schedule: Callable[[bool], None] = lambda force: None
        self.lifecycle.mark_pre_dataset_steps_started()
        self.schedule = schedule
        self._execution_handlers = self._execution_handler_table()
        self._outside_steps: set[str] = set()

    def _on_transition(self, event: StepTransition) -> None:
        self.state.mark_transition(event.node_id, "started" if event.transition == "started" else "settled")
        # The step's time, its state and (failed, cancelled) its reason, sent to the ledger as such.
        self.state.set_node_progress(
            event.node_id, transition_patch(event, self.state.nodes.get(event.node_id))
        )
        self.schedule(False)

    # -- the end of a run (not the hot path) -----------------------------------------------------

    def step_states(self) -> dict[str, StepState]:
        """Every known step's state, in pipeline order."""
        return self.lifecycle.states()

    def apply_observations(self, observations: Iterable[object]) -> None:
        """Fold durable node observations that are at least as recent as the live node I/O."""
        for node_id, patch in reconcile.observation_patches(
            observations, self.state.nodes, self.state.now_ms()
        ):
            current = self.state.nodes.get(node_id)
            if current is not None and current.node_io:
                # A stored observation keeps no truncation flags, and no inputs or outputs it was
                # not given: of the same invocation, what the node already shows stays.
                patch = {**patch, "node_io": _kept_io(patch["node_io"], current.node_io)}
            self.state.set_node_progress(node_id, patch)

    def reconcile(self, result: Mapping[str, Any] | None, sheet_outcomes: Iterable[object]) -> None:
        """Rewrite map nodes from the result's checkpoint frames, then from the sheet outcomes
        (the reconciliation of record: they win). A step the data plane shows settled is settled:
        one still open completes, as it would have on its own ``map.completed``."""
        now = self.state.now_ms()
        patches = [
            (node_id, patch)
            for node_id, patch in reconcile.checkpoint_patches(result, self.pipeline, self.state.nodes, now)
            if self._in_contract(node_id, "a checkpoint frame")
        ]
        for node_id, patch in patches:
            self.state.set_node_progress(node_id, patch)
        outcome_patches = reconcile.sheet_outcome_patches(
            sheet_outcomes, self.pipeline, self.state.nodes, now
        )
        for node_id, patch in outcome_patches:
            self.state.set_node_progress(node_id, patch)
        for node_id, _ in (*patches, *outcome_patches):
            self.lifecycle.on_map_completed(node_id)

    def finish(self, result_status: str) -> None:
        """The terminal step transitions: every step still open completes with a completed run, is
        cancelled with a cancelled one ("run cancelled") and fails with any other end ("run
        failed"), its counts settled (none active or waiting); settled and never-started steps stay
        as they are (the ledger skips the latter)."""
        still_open = [node_id for node_id, state in self.step_states().items() if state is StepState.STARTED]
        self.lifecycle.settle_open(result_status)
        for node_id in still_open:
            # A step the run's end settles is settled in its counts too: nothing active or
            # waiting any more, its rows as last reported (reconciliation may still correct them).
            node = self.state.nodes.get(node_id)
            if node is not None and node.total is not None:
                completed, failed = node.completed or 0, node.failed or 0
                settled = completed + failed
                patch = settled_map_patch(
                    completed, failed, node.total, started_rows=min(node.total, settled)
                )
                patch["completed_at"] = node.completed_at
                self.state.set_node_progress(node_id, patch)

    def restore(self, nodes: object) -> None:
        """Take the steps' progress as the ledger holds it (a reporter continuing an attempt);
        the step states follow from it, so no transition is reported again."""
        if not isinstance(nodes, Mapping):
            return
        for node_id, wire_node in nodes.items():
            if isinstance(node_id, str) and isinstance(wire_node, Mapping):
                node = NodeProgress.from_wire(wire_node)
                if self.lifecycle.state(node_id) is None:
                    # Only the pipeline's steps carry a state the reporter set; any other node's
                    # follows from its fields, as it did for the reporter that sent it (kept, the
                    # ledger's word would outlast a later failure of the same invocation).
                    node.state = node.reason = None
                self.state.replace_node(node_id, node)
                self.state.note_total_rows(node.total)

    # -- entry point ------------------------------------------------------------------------------

    def on_runner_event(self, event: object) -> None:
        """Fold one runner event; never raises on malformed input, never awaits. A line that is
        not one of the runner protocol is junk: counted, and skipped whole."""
        if type(event) is dict:
            # The two most frequent lines, well-formed, are checked here, without a call; any
            # other line goes through `junk_reason`, which has the last word.
            kind = event.get("type")
            if kind == "log":
                line, source = event.get("line"), event.get("source")
                if line and type(line) is str and (source is None or type(source) is str):
                    lowered = line.lower()
                    node_id = self.active_map_node_id
                    state = self.state
                    # The usual tool-batch line of the active map, folded with every step written
                    # out: one comes for each of the map's batches, and a call per rule cost twice
                    # what decoding the line does. Usual: every line durable; the diagnostic at
                    # the line's start and no other; the line kept as it is (ASCII, no NUL,
                    # nothing to strip, within the bound); the map's step known and not
                    # completed. `_fold_log`, the general path, folds every other line, and the
                    # tests hold the two to the same state.
                    if (
                        node_id is not None
                        and lowered.startswith(TOOL_BATCH_MARKER)
                        and self._durable_log is None
                        and len(line) <= self._kept_line_bytes
                        and line.isascii()
                        and "\x00" not in line
                        and line[-1] > " "  # (ASCII: nothing for `str.strip` to take)
                        and MAP_START_MARKER not in lowered
                        and (match := TOOL_BATCH_AT_START.match(lowered)) is not None
                        and len(digits := match[1]) < 19  # up to 18 digits are always a count
                        and (calls := int(digits)) > 0
                        and (node := state.nodes.get(node_id)) is not None
                        and node.completed_at is None
                        and (positions := state.positions.get(node_id)) is not None
                    ):
                        # The tail keeps the line (`ProgressState.append_log`).
                        state.log_total_count += 1
                        logs = state.logs
                        logs.append(line)
                        state.log_bytes += len(line)
                        state.trim_logs()
                        # The map's calls in flight (`_calls_in_flight`), merged
                        # (`ProgressState.merge_row_counts`; not completed, so the stale-completion
                        # rule has nothing to undo).
                        completed = node.completed or 0
                        total = node.total or 0
                        settled = completed + (node.failed or 0)
                        room = total - settled if total > settled else 0
                        active = (calls if calls < room else room) if total > 0 else calls
                        started = node.started_rows or 0
                        if settled + active > started:
                            started = settled + active
                        node.started_rows = started if total <= 0 or started < total else total
                        node.active_rows = active
                        if total > 0:
                            waiting = total - settled - active
                            node.waiting_rows = waiting if waiting > 0 else 0
                        node.completed_rows = completed
                        node.message = _in_flight_message(active, settled, total)
                        node.updated_at = state.now_ms()
                        positions["progress"] = state.log_total_count
                        state.dirty = True
                        # Lines arriving faster than the uploads: upload now, before the tail
                        # drops one (`ProgressState.unsent_log_lines`).
                        self.schedule(
                            state.log_hole_after is None
                            and state.log_total_count - state.log_sent_through >= _LOG_BACKLOG
                        )
                        return
                    self._fold_log(line, source, lowered)
                    return
            elif kind == "row_update":
                # Sheet rows belong to the data plane's writer, never to progress.
                table, key = event.get("tableNamespace"), event.get("rowKey")
                if (table is None or type(table) is str) and (key is None or type(key) is str):
                    return
        problem = junk_reason(event)
        if problem is not None:
            self.sanitizer.note(JUNK_RUNNER_LINE, validate.InvalidInput("line", problem))
            return
        event = cast("Mapping[str, Any]", event)  # junk_reason made sure
        kind = event.get("type")
        try:
            if kind == "execution_event":
                inner = event.get("event")
                if type(inner) is not dict and not isinstance(inner, Mapping):
                    return
                inner_kind = inner.get("type")
                if isinstance(inner_kind, str):
                    handler = self._execution_handlers.get(inner_kind)
                    if handler is not None:
                        handler(inner_kind, inner)
                    self.schedule(False)
            elif kind == "log":
                line = event.get("line")
                if not isinstance(line, str) or not line:
                    return
                self._fold_log(line, event.get("source"), line.lower())
            # "row_update": sheet rows belong to the data plane's writer, never to progress.
        except (TypeError, ValueError, KeyError, AttributeError):
            # Junk of a shape we did not foresee; progress is best-effort, the run goes on.
            return

    # -- log lines --------------------------------------------------------------------------------

    def _fold_log(self, line: str, source: object, lowered: str) -> None:
        """Fold a log line (`lowered` is ``line.lower()``): the general path, each rule by its
        own implementation."""
        if self._durable_log is None or self._durable_log(line, source):
            self.state.append_log(line)
        # Most lines carry no fact: a diagnostic's regex runs only on a line with its marker.
        if MAP_START_MARKER in lowered:
            start = wire.parse_map_start(line)
            if start is not None:
                self._map_started_from_log(start.table_namespace, start.total, start.already_satisfied)
        if PERF_MAP_SETUP_MARKER in lowered:
            setup = wire.parse_map_setup(line)
            if setup is not None:
                self._map_started_from_log(setup.table_namespace, setup.rows, 0)
        node_id = self.active_map_node_id
        if node_id is not None and TOOL_BATCH_MARKER in lowered:
            calls = tool_batch_calls(line, lowered)
            if calls is not None:
                self._tool_batch_in_flight(node_id, calls)
        # Lines arriving faster than the uploads: upload now, before the tail drops one.
        self.schedule(self.state.unsent_log_lines >= _LOG_BACKLOG)

    def _map_started_from_log(self, namespace: str, total: int, already_satisfied: int) -> None:
        ref = self.pipeline.resolve_namespace(namespace)
        if ref is None:
            return
        node_id = ref.node_id
        self.active_map_node_id = node_id
        self.state.note_total_rows(total)
        self.lifecycle.on_map_started(node_id)
        current = self.state.nodes.get(node_id) or NodeProgress()
        effective_total = max(total if total > 0 else 0, current.total or 0)
        # Page-local "already satisfied" must not lower what earlier pages committed.
        completed = max(0, current.completed or 0, already_satisfied)
        failed = max(0, current.failed or 0)
        settled = completed + failed
        self.state.set_node_progress(
            node_id,
            {
                "completed": completed,
                "failed": failed,
                "total": effective_total if effective_total > 0 else None,
                "started_rows": max(current.started_rows or 0, settled),
                "active_rows": 0,
                "waiting_rows": max(0, effective_total - settled) if effective_total > 0 else None,
                "completed_rows": completed,
                "artifact_table_namespace": ref.artifact_table_namespace,
                "started_at": current.started_at if current.started_at is not None else self.state.now_ms(),
                "message": rows_processed_message(settled, effective_total),
            },
        )

    def _tool_batch_in_flight(self, node_id: str, calls: int) -> None:
        if calls <= 0:
            return
        started, active, waiting, completed, message = _calls_in_flight(
            self.state.nodes.get(node_id) or NodeProgress(), calls
        )
        self.state.merge_row_counts(
            node_id, None, None, None, started, active, waiting, completed, None, message
        )

    # -- execution events -------------------------------------------------------------------------

    def _execution_handler_table(self) -> dict[str, Callable[[str, Mapping[str, Any]], None]]:
        """Which method folds which execution event type; any other type is ignored."""
        return {
            **dict.fromkeys((*MAP_START_KINDS, *MAP_COUNT_KINDS), self._fold_map_event),
            **dict.fromkeys((DOCFLOW_HIT_KIND, *DOCFLOW_NODE_KINDS), self._fold_docflow_event),
            TOOL_CALL_STARTED_KIND: self._tool_call_started,
            TOOL_CALL_SETTLED_KIND: self._tool_call_settled,
            ACTIVITY_KIND: self._activity_observed,
            DATASET_LIFECYCLE_KIND: self._dataset_lifecycle,
        }

    def _tool_call_started(self, kind: str, event: Mapping[str, Any]) -> None:
        tool_id = event.get("toolId")
        if isinstance(tool_id, str) and tool_id:
            self.lifecycle.on_tool_called(tool_id)

    def _tool_call_settled(self, kind: str, event: Mapping[str, Any]) -> None:
        tool_id = event.get("toolId")
        if isinstance(tool_id, str) and tool_id:
            # Any settlement but a failure ("succeeded", "completed") completes the step.
            if event.get("outcome") == "failed":
                self.lifecycle.on_tool_failed(tool_id, event.get("error"))
                self.schedule(True)
            else:
                self.lifecycle.on_tool_completed(tool_id)

    def _activity_observed(self, kind: str, event: Mapping[str, Any]) -> None:
        observation = self.sanitizer.kept(
            "activity observation",
            bounded(validate.activity_observation, self.sanitizer.bounds),
            event.get("observation"),
        )
        if observation is not None:
            self.state.add_activity_observation(observation)
            self.schedule(True)

    def _dataset_lifecycle(self, kind: str, event: Mapping[str, Any]) -> None:
        lifecycle = self.sanitizer.kept(
            "dataset lifecycle event",
            bounded(validate.dataset_lifecycle_event, self.sanitizer.bounds),
            dict(event),
        )
        if lifecycle is not None:
            self.state.add_lifecycle_event(lifecycle)
            self.schedule(True)

    def _fold_docflow_event(self, kind: str, event: Mapping[str, Any]) -> None:
        node_id = event.get("nodeId")
        if not isinstance(node_id, str) or not node_id.strip() or not storable(node_id):
            return
        at = as_epoch_ms(event.get("at"))
        if at is None:
            at = self.state.now_ms()
        if kind == DOCFLOW_HIT_KIND:
            self.state.set_node_progress(node_id, {"started_at": at, "completed_at": at})
            self.schedule(True)
            return
        attempt = as_int(event.get("attempt"))
        if attempt is None:
            return
        current = self.state.nodes.get(node_id)
        current_io = current.node_io if current is not None and current.node_io else {}
        current_attempt = as_int(current_io.get("attempt"))
        current_attempt = -1 if current_attempt is None else current_attempt
        if attempt < current_attempt:
            return
        invocation_id = event.get("invocationId")
        if attempt == current_attempt and invocation_sequence(invocation_id) < invocation_sequence(
            current_io.get("invocation_id")
        ):
            return
        node_io: dict[str, Any] = {"attempt": attempt, "invocation_id": invocation_id}
        # Absent is unchanged: what a line leaves out, the node keeps from the same invocation's
        # earlier lines; what it carries (null and false included) is set.
        _carry(node_io, event, "inputs", "inputs")
        _carry_flag(node_io, event, "inputsTruncated", "inputs_truncated")
        if kind == "docflow.node.completed":
            _carry(node_io, event, "outputs", "outputs")
            _carry_flag(node_io, event, "outputsTruncated", "outputs_truncated")
            node_io["error"] = None
        elif kind == "docflow.node.failed":
            error = event.get("error")
            # The error is how the ledger tells a failed node: one without its text still failed.
            node_io["error"] = error if isinstance(error, str) and error.strip() else "docflow node failed"
        node_io = _kept_io(node_io, current_io)
        if kind == "docflow.node.started":
            node_io.pop("outputs", None)
            node_io.pop("outputs_truncated", None)
            node_io = self.sanitizer.node_io(f"{node_id}.node_io", node_io)
            # A new invocation starts from a clean node: earlier outputs/completion belong to the old one.
            self.state.replace_node(node_id, NodeProgress(started_at=at, updated_at=at, node_io=node_io))
        else:
            node_io = self.sanitizer.node_io(f"{node_id}.node_io", node_io)
            started_at = current.started_at if current is not None and current.started_at is not None else at
            self.state.set_node_progress(
                node_id, {"started_at": started_at, "completed_at": at, "node_io": node_io}
            )
        self.schedule(True)

    def _in_contract(self, node_id: str, what: str) -> bool:
        """Whether `node_id` is a step of the contract (any step is, without one); a line or frame
        naming another step is junk, counted, and the step named in a warning once."""
        if not self.pipeline.nodes or self.lifecycle.state(node_id) is not None:
            return True
        if node_id not in self._outside_steps and len(self._outside_steps) < _NAMED_OUTSIDE_STEPS:
            self._outside_steps.add(node_id)
            _log.warning(
                "run %s: %s names step %r, which the contract does not list: ignored",
                self.sanitizer.run_id,
                what,
                node_id,
            )
        self.sanitizer.counts[JUNK_OUTSIDE_CONTRACT] += 1
        return False

    def _fold_map_event(self, kind: str, event: Mapping[str, Any]) -> None:
        node_id = self.pipeline.map_node_id(event)
        if node_id is None or not self._in_contract(node_id, f"a {kind} event"):
            return
        completed = as_count(event.get("completedRows"))
        if completed is None and kind not in MAP_START_KINDS:
            return  # a count-carrying event without its counts says nothing
        total = as_count(event.get("totalRows"))
        current = self.state.nodes.get(node_id)
        # Absent is unchanged: a count the line leaves out stays as the node has it (null is 0).
        failed = as_count(event.get("failedRows"))
        if failed is None:
            failed = (current.failed or 0) if current is not None and "failedRows" not in event else 0
        namespace = event.get("artifactTableNamespace")
        if not (isinstance(namespace, str) and namespace and storable(namespace)):
            namespace = None
        self.active_map_node_id = node_id
        self.state.note_total_rows(total)
        if kind == "map.progress":  # by far the most frequent event: no facts record for it
            self._map_progress(node_id, completed or 0, failed, total, namespace)
            return
        if completed is None:
            completed = (
                (current.completed or 0) if current is not None and "completedRows" not in event else 0
            )
        if total is None and current is not None:
            total = current.total
        facts = _MapFacts(
            node_id=node_id, total=total, completed=completed, failed=failed, namespace=namespace
        )
        if kind in MAP_START_KINDS:
            self._map_started(kind, facts)
        elif kind == "map.suspended":
            self._map_suspended(facts)
        else:
            self._map_settled(kind, facts)

    def _map_started(self, kind: str, facts: _MapFacts) -> None:
        done = facts.completed or 0
        settled = done + facts.failed
        total = facts.total
        self.lifecycle.on_map_started(facts.node_id)
        preparing = kind == "map.preparing"
        message = "Preparing durable table..." if preparing else rows_processed_message(settled, total)
        self.state.set_node_progress(
            facts.node_id,
            {
                "completed": done,
                "failed": facts.failed,
                "total": total,
                "started_rows": settled,
                "active_rows": 0,
                "waiting_rows": max(0, total - settled) if total is not None else None,
                "completed_rows": done,
                "artifact_table_namespace": facts.namespace,
                "started_at": self.state.now_ms(),
                "message": message,
            },
        )

    def _map_suspended(self, facts: _MapFacts) -> None:
        completed = facts.completed or 0
        self.state.set_node_progress(
            facts.node_id,
            {
                "completed": completed,
                "failed": facts.failed,
                "total": facts.total,
                "completed_rows": completed,
                "artifact_table_namespace": facts.namespace,
                "message": rows_processed_message(completed + facts.failed, facts.total),
            },
        )

    def _map_settled(self, kind: str, facts: _MapFacts) -> None:
        if kind == "map.failed":
            self.lifecycle.on_map_failed(facts.node_id)
        else:
            self.lifecycle.on_map_completed(facts.node_id)
        completed, total = facts.completed or 0, facts.total or 0
        # The rows the map says it settled: a map that settled early (failed, or cut short) never
        # started the rest of its total.
        settled = max(0, completed + facts.failed)
        patch = settled_map_patch(
            completed, facts.failed, total, started_rows=min(total, settled) if total > 0 else settled
        )
        patch["artifact_table_namespace"] = facts.namespace
        patch["completed_at"] = self.state.now_ms()
        self.state.set_node_progress(facts.node_id, patch)
        self.active_map_node_id = None

    def _map_progress(
        self, node_id: str, completed: int, failed: int, total: int | None, namespace: str | None
    ) -> None:
        current = self.state.nodes.get(node_id)
        current_total = current.total if current is not None and current.total else 0
        current_started = current.started_rows if current is not None and current.started_rows else 0
        # Conditional expressions, not max(): this runs for every progress event.
        settled = completed + failed
        if settled < 0:
            settled = 0
        progress_total = total or 0
        if current_total > progress_total:
            progress_total = current_total
        started = settled if settled > current_started else current_started
        waiting = progress_total - started if progress_total > started else 0
        self.state.merge_row_counts(
            node_id,
            completed,
            failed,
            progress_total if progress_total > 0 else None,
            started,
            started - settled if started > settled else 0,
            waiting if progress_total > 0 else None,
            completed,
            namespace,
            rows_processed_message(settled, progress_total),
        )


def _calls_in_flight(node: NodeProgress, calls: int) -> tuple[int, int, int | None, int, str]:
    """What a tool batch of `calls` (at least one) in flight makes of its map's counts: the rows
    started, active and waiting (None without a total), completed, and the message. As many rows as
    calls are active, within the rows left; started rows never go down, nor past the total."""
    completed = node.completed or 0
    total = node.total or 0
    settled = completed + (node.failed or 0)
    # Conditional expressions, not min()/max(): this runs for every tool-batch line.
    room = total - settled if total > settled else 0
    active = (calls if calls < room else room) if total > 0 else calls
    started = node.started_rows or 0
    if settled + active > started:
        started = settled + active
    waiting = total - settled - active
    return (
        started if total <= 0 or started < total else total,
        active,
        (waiting if waiting > 0 else 0) if total > 0 else None,
        completed,
        _in_flight_message(active, settled, total),
    )


def _carry(node_io: dict[str, Any], event: Mapping[str, Any], name: str, key: str) -> None:
    """`node_io[key]` from the event's `name` when the event carries it (null included)."""
    if name in event:
        node_io[key] = event[name]


def _carry_flag(node_io: dict[str, Any], event: Mapping[str, Any], name: str, key: str) -> None:
    """A truncation flag the event carries: true sets it, false or null clears it (the node then
    shows none, not even an earlier one)."""
    if name in event:
        node_io[key] = event[name] is True
