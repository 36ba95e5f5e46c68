"""The failure oracle's scenarios and its reference model, written from the documentation.

A `FailureScenario` is a contract, the runner's lines in order (log lines and the step events of
the runner protocol), and how the story ends: the result line the runner writes (or none), a
signal to `ledger report` after some line, a batch ended with ``--no-finalize``, and what follows
an interruption or a batch (nothing, a ``--resume`` batch with the rest of the lines, the
watchdog, a cancel).

`expected` computes the final record from what the documentation says, never from the code under
test: docs/worker.md ("The contract: which steps a run has"), docs/runner-protocol.md (how the run
ends, the exit codes, each line's meaning), docs/api.md and the interface the failed-run work
builds to (step states and their settlement, run status ``interrupted``, the terminal errors the
reporter writes). Where those texts fix a value the model pins it (`Pin.exact`); where they only
say that something is there (a step's reason, the error of a run the runner said failed) the
model pins its presence; where they say nothing, the model leaves it open and only the faces'
agreement with each other is checked (`tests.oracle.faces`).

The lines drawn keep to what the documentation decides unambiguously: steps run in pipeline
order, code steps only before the first dataset step (they start with the run), counts that never
go down, and no explicit ``null`` count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ledger.runlog.events import WATCHDOG_ERROR

# -- the vocabulary ---------------------------------------------------------------------------------

# Contract steps the scenarios pick from (a step without an id is named by its type and position).
STEP_POOL: dict[str, dict[str, Any]] = {
    "load": {"type": "code", "id": "load"},
    "prepare": {"type": "code", "id": "prepare", "field": "input"},
    "enrich": {"type": "dataset", "id": "enrich", "tableNamespace": "leads"},
    "score": {"type": "dataset", "field": "scores"},
    "notify": {"type": "tool", "id": "notify", "toolId": "slack.post"},
    "mail": {"type": "tool", "toolId": "mail.send"},
}
CODE_STEPS = ("load", "prepare")
WORK_STEPS = ("enrich", "score", "notify", "mail")

RUNNER_PREFIX = "runner line "
GHOST_NODE = "ghost-step"
GHOST_NAMESPACE = "ghost_table"
GHOST_TOOL = "ghost.tool"

STATES = ("pending", "running", "completed", "failed", "cancelled", "skipped")
SETTLED = ("completed", "failed", "cancelled", "skipped")
SKIPPED_REASON = "the run ended before this step started"
NO_RESULT_ERROR = "the runner's output ended without a result line"
CANCEL_ERROR = "cancelled by the failure oracle"
ACCEPTED_STATUSES = ("completed", "failed", "cancelled")
BAD_STATUSES = ("succeeded", "COMPLETED", "done")

Ending = Literal["result", "cut", "signal", "batch", "cancel-live"]
Then = Literal["nothing", "resume", "watchdog", "cancel", "again"]

# `ledger report`'s exit codes (docs/errors.md, docs/worker.md).
EXIT_REPORTED, EXIT_NOT_TAKEN, EXIT_ENDED, EXIT_INTERRUPTED, EXIT_NEEDS_RESUME = 0, 1, 4, 11, 12


def bad_status_error(status: str) -> str:
    return f"the runner reported status '{status}', which the ledger does not take"


def interrupted_error(signal: str) -> str:
    return f"the reporter was interrupted ({signal})"


@dataclass(frozen=True)
class ContractStep:
    node_id: str
    kind: str
    namespace: str | None = None
    tool_id: str | None = None


def contract_steps(contract: list[dict[str, Any]]) -> list[ContractStep]:
    """The run's steps, in pipeline order (docs/worker.md: a step's node id is its `id`, else
    `<type>-<position>`; a dataset step's namespace is `tableNamespace`, else `field`)."""
    steps = []
    for position, sub in enumerate(contract):
        kind = sub["type"]
        steps.append(
            ContractStep(
                node_id=sub.get("id") or f"{kind}-{position}",
                kind=kind,
                namespace=(sub.get("tableNamespace") or sub.get("field")) if kind == "dataset" else None,
                tool_id=sub.get("toolId"),
            )
        )
    return steps


# -- a pinned value ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    """What the model says of one value: ``exact`` (this value), ``present`` (a non-empty
    string), ``absent`` (None) or ``open`` (anything; the faces must still agree)."""

    how: Literal["exact", "present", "absent", "open"]
    value: Any = None

    def holds(self, actual: Any) -> bool:
        if self.how == "exact":
            return bool(actual == self.value)
        if self.how == "present":
            return isinstance(actual, str) and actual.strip() != ""
        if self.how == "absent":
            return actual is None
        return True

    def __repr__(self) -> str:
        return repr(self.value) if self.how == "exact" else f"<{self.how}>"


OPEN = Pin("open")
PRESENT = Pin("present")
ABSENT = Pin("absent")


def exact(value: Any) -> Pin:
    return Pin("exact", value)


# -- the scenario -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FailureScenario:
    """One failure story. `stop` is how many of `lines` the first `ledger report` reads before its
    ending (``result``: all of them); a ``--resume`` batch reads the rest."""

    contract: tuple[dict[str, Any], ...]
    lines: tuple[dict[str, Any], ...]
    ending: Ending
    stop: int
    result: dict[str, Any] | None = None  # the last batch's result line (None: the stream is cut)
    signal: str | None = None  # "SIGINT" | "SIGTERM"
    on_interrupt: str | None = None  # None (the default), "resumable", "fail", "cancel"
    then: Then = "nothing"

    @property
    def first_batch(self) -> list[dict[str, Any]]:
        lines = list(self.lines[: self.stop])
        if self.ending in ("signal", "cancel-live"):
            lines.append(signal_marker())
        return lines

    @property
    def rest(self) -> list[dict[str, Any]]:
        return list(self.lines[self.stop :])

    @property
    def reads_result_first(self) -> bool:
        """The first `ledger report` reads the result line (its stream is not cut or signalled)."""
        return self.ending == "result"

    def describe(self) -> str:
        out = [
            f"FailureScenario(ending={self.ending!r}, stop={self.stop}, signal={self.signal!r}, "
            f"on_interrupt={self.on_interrupt!r}, then={self.then!r},",
            f"  contract={list(self.contract)},",
            "  lines=[",
        ]
        for index, line in enumerate(self.lines):
            if index == self.stop and self.ending != "result":
                out.append(f"    --- first report stops here ({self.ending}) ---")
            out.append(f"    {index:3d} {line}")
        if self.stop == len(self.lines) and self.ending != "result":
            out.append(f"    --- first report stops here ({self.ending}) ---")
        out.append("  ],")
        out.append(f"  result={self.result})")
        return "\n".join(out)

    def __repr__(self) -> str:
        return self.describe()


def signal_marker() -> dict[str, Any]:
    """The log line the runner writes just before the signal (or the cancel while the reporter
    still reads): the harness waits for it to land."""
    return {"type": "log", "line": RUNNER_PREFIX + "before the interruption"}


# -- the expected record -----------------------------------------------------------------------------

EventKey = tuple[str, str | None]  # (type, node id or log line or None)


@dataclass
class ExpectedStep:
    state: str
    reason: Pin = OPEN
    completed: Pin = OPEN
    failed: Pin = OPEN
    total: Pin = OPEN


@dataclass
class Expected:
    status: Pin  # the run's `status`
    terminal_status: str | None
    error: Pin
    steps: dict[str, ExpectedStep]
    # The modelled events in order; a frozenset is a group whose order the documents leave open.
    events: list[EventKey | frozenset[EventKey]]
    exits: list[Pin] = field(default_factory=list)  # each `ledger report`'s exit code, in order

    def totals(self) -> dict[str, int]:
        states = [step.state for step in self.steps.values()]
        return {
            "steps_total": len(states),
            "steps_done": states.count("completed"),
            "steps_failed": states.count("failed"),
            "steps_cancelled": states.count("cancelled"),
            "steps_skipped": states.count("skipped"),
        }


# Event types the model speaks of (others, e.g. `step.progress`, are compared between faces only).
MODELLED_TYPES = frozenset(
    {
        "step.started",
        "step.completed",
        "step.failed",
        "step.cancelled",
        "step.skipped",
        "reporter.interrupted",
        "reporter.resumed",
        "terminal",
    }
)


def modelled(kind: str, line: Any) -> bool:
    """Whether a stored event is one the model lists: its types above, and the runner's own log
    lines (the reporter's notes in the log are not the runner's story)."""
    if kind == "log":
        return isinstance(line, str) and line.startswith(RUNNER_PREFIX)
    return kind in MODELLED_TYPES


class _Story:
    """The documented step lifecycle, line by line (docs/worker.md)."""

    def __init__(self, steps: list[ContractStep]) -> None:
        self.steps = steps
        self.state = {s.node_id: "pending" for s in steps}
        self.reason: dict[str, Pin] = {s.node_id: OPEN for s in steps}
        self.counts: dict[str, dict[str, Pin]] = {
            s.node_id: {"completed": OPEN, "failed": OPEN, "total": OPEN} for s in steps
        }
        self.events: list[EventKey | frozenset[EventKey]] = []

    # -- transitions

    def start(self, node_id: str) -> None:
        if self.state[node_id] == "pending":
            self.state[node_id] = "running"
            self.events.append(("step.started", node_id))

    def settle(self, node_id: str, state: str, reason: Pin = OPEN) -> None:
        if self.state[node_id] in SETTLED:
            return
        if self.state[node_id] == "pending":
            self.start(node_id)  # a settlement whose start was missed starts it first
        self.state[node_id] = state
        self.reason[node_id] = PRESENT if state != "completed" else reason
        self.events.append((f"step.{state}", node_id))

    def begin(self) -> None:
        """At the start, the steps before the first dataset step start (all, without one)."""
        for step in self.steps:
            if step.kind == "dataset":
                break
            self.start(step.node_id)

    # -- lookups

    def dataset(self, event: dict[str, Any]) -> str | None:
        node = event.get("mapNodeId")
        if isinstance(node, str) and node.strip():
            known = [s.node_id for s in self.steps if s.kind == "dataset" and s.node_id == node]
            return known[0] if known else None
        namespace = event.get("artifactTableNamespace")
        for step in self.steps:
            if (
                step.kind == "dataset"
                and isinstance(namespace, str)
                and step.namespace is not None
                and (namespace == step.namespace or namespace.startswith(step.namespace + "_"))
            ):
                return step.node_id
        return None

    def tool(self, tool_id: Any, *, open_only: bool) -> str | None:
        for step in self.steps:
            settled = self.state[step.node_id] in SETTLED
            if step.kind == "tool" and step.tool_id == tool_id and not (open_only and settled):
                return step.node_id
        return None

    # -- one runner line

    def line(self, line: dict[str, Any]) -> None:
        if line["type"] == "log":
            self.events.append(("log", line["line"]))
            return
        event = line["event"]
        kind = event["type"]
        if kind.startswith("map."):
            node = self.dataset(event)
            if node is None:
                return  # a step the contract does not list: junk, nothing changes
            self.counts_from(node, event)
            if kind in ("map.started", "map.resumed", "map.preparing"):
                for step in self.steps:
                    if step.node_id == node:
                        break
                    if self.state[step.node_id] == "running":
                        self.settle(step.node_id, "completed")
                self.start(node)
            elif kind == "map.completed":
                self.settle(node, "completed")
            elif kind == "map.failed":
                self.settle(node, "failed")
        elif kind == "tool.call.started":
            node = self.tool(event["toolId"], open_only=True)
            if node is not None:
                self.start(node)
        elif kind == "tool.call.settled":
            node = self.tool(event["toolId"], open_only=True)
            if node is not None:
                self.settle(node, "failed" if event.get("outcome") == "failed" else "completed")

    def counts_from(self, node: str, event: dict[str, Any]) -> None:
        """Absent is unchanged: only a field the line carries sets the count."""
        for key, name in (("completed", "completedRows"), ("failed", "failedRows"), ("total", "totalRows")):
            if name in event:
                self.counts[node][key] = exact(event[name])

    # -- the run's end

    def end(self, terminal: str, error: str | None, *, by_ledger: bool) -> None:
        """Settle every open step by the run's outcome; the settlement events come as one group
        (the documents do not order them), before the terminal event. `by_ledger`: the ledger
        settles them itself (watchdog, cancel), with the reasons the interface fixes."""
        group: list[EventKey] = []
        for step in self.steps:
            node = step.node_id
            if self.state[node] == "running":
                state = {"completed": "completed", "failed": "failed", "cancelled": "cancelled"}[terminal]
                if by_ledger and state == "failed":
                    reason = exact(f"run failed: {error}")
                elif by_ledger and state == "cancelled":
                    reason = exact(f"run cancelled: {error}")
                else:
                    reason = OPEN if state == "completed" else PRESENT
            elif self.state[node] == "pending":
                state, reason = "skipped", exact(SKIPPED_REASON)
            else:
                continue
            self.state[node] = state
            self.reason[node] = reason
            group.append((f"step.{state}", node))
        if group:
            self.events.append(frozenset(group))
        self.events.append(("terminal", terminal))


def expected(scenario: FailureScenario) -> Expected:
    """The final record the documents say `scenario` ends with."""
    story = _Story(contract_steps(list(scenario.contract)))
    story.begin()
    exits: list[Pin] = []
    status: Pin = OPEN
    terminal: str | None = None
    error: Pin = ABSENT

    def finish(result: dict[str, Any] | None) -> None:
        """A `ledger report` that reads to the end of its stream (docs/runner-protocol.md)."""
        nonlocal terminal, error
        if result is None:
            terminal, error = "failed", exact(NO_RESULT_ERROR)
            exits.append(exact(EXIT_NOT_TAKEN))
        elif result.get("status") in ACCEPTED_STATUSES:
            terminal = result["status"]
            # The runner's own verdict: the documents give it no error text of the ledger's.
            error = ABSENT if terminal == "completed" else OPEN
            exits.append(exact(EXIT_REPORTED))
        else:
            terminal, error = "failed", exact(bad_status_error(str(result.get("status"))))
            exits.append(exact(EXIT_NOT_TAKEN))
        story.end(terminal, None, by_ledger=False)

    def ledger_ends(how: str) -> None:
        nonlocal terminal, error
        if how == "watchdog":
            terminal, error = "failed", exact(WATCHDOG_ERROR)
            story.end("failed", WATCHDOG_ERROR, by_ledger=True)
        else:
            terminal, error = "cancelled", exact(CANCEL_ERROR)
            story.end("cancelled", CANCEL_ERROR, by_ledger=True)

    for line in scenario.first_batch:
        story.line(line)

    if scenario.ending in ("result", "cut"):
        finish(scenario.result if scenario.ending == "result" else None)
    elif scenario.ending == "signal":
        assert scenario.signal is not None
        exits.append(exact(EXIT_INTERRUPTED))
        if scenario.on_interrupt in (None, "resumable"):
            story.events.append(("reporter.interrupted", None))
            status = exact("interrupted")
        elif scenario.on_interrupt == "fail":
            terminal, error = "failed", exact(interrupted_error(scenario.signal))
            story.end("failed", None, by_ledger=False)
        else:
            terminal, error = "cancelled", exact(interrupted_error(scenario.signal))
            story.end("cancelled", None, by_ledger=False)
    elif scenario.ending == "cancel-live":
        # Cancelled while the reporter still reads: its next upload is refused, it stops (exit 4)
        # and nothing after the cancel lands.
        ledger_ends("cancel")
        exits.append(exact(EXIT_ENDED))
    else:  # a batch ended with --no-finalize: the run stays in flight
        exits.append(exact(EXIT_REPORTED))
        status = exact("running")

    if terminal is None:
        if scenario.then == "resume":
            if scenario.ending == "signal":
                story.events.append(("reporter.resumed", None))
            for line in scenario.rest:
                story.line(line)
            finish(scenario.result)
        elif scenario.then in ("watchdog", "cancel"):
            ledger_ends(scenario.then)
        elif scenario.then == "again":
            # Reported again without --resume: refused before anything changes.
            exits.append(exact(EXIT_NEEDS_RESUME))

    if terminal is not None:
        status = OPEN
    steps = {
        node: ExpectedStep(story.state[node], story.reason[node], **story.counts[node])
        for node in story.state
    }
    return Expected(
        status=status,
        terminal_status=terminal,
        error=error if terminal is not None else ABSENT,
        steps=steps,
        events=story.events,
        exits=exits,
    )


def optional_events(scenario: FailureScenario) -> frozenset[str]:
    """Event types the documents neither require nor rule out in this scenario: a reporter that
    ends the run on a signal (``--on-interrupt fail|cancel``) may say it was interrupted first."""
    if scenario.ending == "signal" and scenario.on_interrupt in ("fail", "cancel"):
        return frozenset({"reporter.interrupted"})
    return frozenset()


def _segments(events: list[EventKey]) -> tuple[list[EventKey], list[list[EventKey]]]:
    """The barriers (log lines, the reporter's and the terminal events) in order, and the step
    events between each two."""
    barriers: list[EventKey] = []
    segments: list[list[EventKey]] = [[]]
    for event in events:
        if event[0].startswith("step."):
            segments[-1].append(event)
        else:
            barriers.append(event)
            segments.append([])
    return barriers, segments


def _per_node(segment: list[EventKey]) -> dict[str | None, list[str]]:
    out: dict[str | None, list[str]] = {}
    for kind, node in segment:
        out.setdefault(node, []).append(kind)
    return out


def events_match(want: list[EventKey | frozenset[EventKey]], got: list[EventKey]) -> bool:
    """`got` tells `want`'s story in the runner's order: the log lines, the reporter's events and
    the terminal event in order, and between two of them the same step transitions, each step's in
    order. (Transitions of different steps between the same two log lines carry no order of their
    own on the wire: the ledger places a transition after the log line it followed.)"""
    flat: list[EventKey] = []
    for item in want:
        flat.extend(sorted(item, key=repr) if isinstance(item, frozenset) else [item])
    want_barriers, want_segments = _segments(flat)
    got_barriers, got_segments = _segments(got)
    if want_barriers != got_barriers:
        return False
    return all(
        sorted(mine, key=repr) == sorted(theirs, key=repr) and _per_node(mine) == _per_node(theirs)
        for mine, theirs in zip(want_segments, got_segments, strict=True)
    )
