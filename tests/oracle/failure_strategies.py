"""Hypothesis strategies of the failure oracle: a contract, the runner's lines, and how it ends.

The runner works through its contract's steps in order (docs/worker.md): a dataset step is a map
(``map.started``, progress ticks, maybe a suspension and a resumption, then ``map.completed`` or
``map.failed``), a tool step a call (``tool.call.started``, then ``tool.call.settled``, succeeded or
failed); the last step it reaches may be left open. Log lines fall between any two lines, and lines
naming steps the contract does not list (a map, a tool) come up among them. Optional fields are
left out at random: a count a line does not carry leaves the stored one unchanged.

How the story ends is drawn too (`tests.oracle.failure_model.FailureScenario`): the result line
(each status the ledger takes, and some it does not), the stream cut at any line, a signal at any
line (left resumable, or ``--on-interrupt fail|cancel``), a cancel while the reporter still reads,
a batch ended with ``--no-finalize``;
then nothing, a ``--resume`` with the rest of the lines, the watchdog, a cancel, or (after a signal) the rest
reported again without ``--resume``. A result
may carry the runner's whole log (`logs`): what the live stream delivered is not added twice.
Everything shrinks towards a short story with one ending.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import strategies as st

from tests.oracle.failure_model import (
    ACCEPTED_STATUSES,
    BAD_STATUSES,
    CODE_STEPS,
    GHOST_NAMESPACE,
    GHOST_NODE,
    GHOST_TOOL,
    RUNNER_PREFIX,
    STEP_POOL,
    WORK_STEPS,
    FailureScenario,
    contract_steps,
)


def _execution(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": "execution_event", "event": {"type": kind, **fields}}


@st.composite
def contracts(draw: st.DrawFn) -> tuple[dict[str, Any], ...]:
    code = draw(st.lists(st.sampled_from(CODE_STEPS), unique=True, max_size=2))
    work = draw(st.lists(st.sampled_from(WORK_STEPS), unique=True, min_size=1, max_size=4))
    return tuple(dict(STEP_POOL[name]) for name in (*code, *work))


class _Lines:
    """The runner's lines as they are drawn, each log line numbered (so every one is told apart)."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.lines: list[dict[str, Any]] = []
        self.logs = 0

    def chatter(self) -> None:
        """Log lines and lines outside the contract, between two of the runner's step lines."""
        for _ in range(self.draw(st.integers(0, 2))):
            what = self.draw(st.sampled_from(("log",) * 6 + ("ghost map", "ghost tool")))
            if what == "log":
                self.lines.append({"type": "log", "line": f"{RUNNER_PREFIX}{self.logs}"})
                self.logs += 1
            elif what == "ghost map":
                by_id = self.draw(st.booleans())
                where = {"mapNodeId": GHOST_NODE} if by_id else {"artifactTableNamespace": GHOST_NAMESPACE}
                kind = self.draw(st.sampled_from(("map.started", "map.progress", "map.completed")))
                self.lines.append(_execution(kind, **where, totalRows=7, completedRows=3, failedRows=1))
            else:
                kind = self.draw(st.sampled_from(("tool.call.started", "tool.call.settled")))
                self.lines.append(_execution(kind, toolId=GHOST_TOOL, outcome="succeeded"))

    def add(self, line: dict[str, Any]) -> None:
        self.chatter()
        self.lines.append(line)

    def counts(self, required: bool, completed: int, failed: int, total: int) -> dict[str, Any]:
        """A map line's counts, optional ones left out at random (`required`: completedRows)."""
        out: dict[str, Any] = {}
        if required or self.draw(st.booleans()):
            out["completedRows"] = completed
        if self.draw(st.booleans()):
            out["failedRows"] = failed
        if self.draw(st.booleans()):
            out["totalRows"] = total
        return out

    def map(self, node_id: str, namespace: str | None, last: bool) -> None:
        draw = self.draw
        where: dict[str, Any] = (
            {"mapNodeId": node_id}
            if namespace is None or draw(st.booleans())
            else {"artifactTableNamespace": draw(st.sampled_from((namespace, f"{namespace}_r1")))}
        )
        total = draw(st.integers(1, 1_000))
        completed = failed = 0
        self.add(_execution("map.started", **where, **self.counts(False, 0, 0, total)))
        for _ in range(draw(st.integers(0, 3))):
            completed = draw(st.integers(completed, total))
            failed = draw(st.integers(failed, max(failed, total - completed)))
            kind = draw(st.sampled_from(("map.progress", "map.progress", "map.suspended")))
            self.add(_execution(kind, **where, **self.counts(True, completed, failed, total)))
            if kind == "map.suspended":
                self.add(_execution("map.resumed", **where, **self.counts(False, completed, failed, total)))
        if last and draw(st.booleans()):
            return  # the runner stops inside the map
        kind = draw(st.sampled_from(("map.completed", "map.completed", "map.failed")))
        self.add(_execution(kind, **where, **self.counts(True, completed, failed, total)))

    def tool(self, tool_id: str, last: bool) -> None:
        self.add(_execution("tool.call.started", toolId=tool_id))
        if last and self.draw(st.booleans()):
            return  # the runner stops during the call
        settled: dict[str, Any] = {"toolId": tool_id}
        outcome = self.draw(st.sampled_from(("succeeded", "failed", "failed", None)))
        if outcome is not None:
            settled["outcome"] = outcome
        self.add(_execution("tool.call.settled", **settled))


@st.composite
def runner_lines(draw: st.DrawFn, contract: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
    steps = [s for s in contract_steps(list(contract)) if s.kind != "code"]
    reached = draw(st.integers(0, len(steps)))
    lines = _Lines(draw)
    for index, step in enumerate(steps[:reached]):
        last = index == reached - 1
        if step.kind == "dataset":
            lines.map(step.node_id, step.namespace, last)
        else:
            assert step.tool_id is not None
            lines.tool(step.tool_id, last)
    lines.chatter()
    return tuple(lines.lines)


@st.composite
def result_lines(draw: st.DrawFn) -> dict[str, Any] | None:
    """The stream's last line: each status the ledger takes, one it does not, or none at all."""
    pick = draw(st.sampled_from(("accepted", "accepted", "accepted", "bad", "none")))
    if pick == "none":
        return None
    status = draw(st.sampled_from(ACCEPTED_STATUSES if pick == "accepted" else BAD_STATUSES))
    result: dict[str, Any] = {"type": "result", "status": status}
    if draw(st.integers(0, 3)) == 0:
        # A checkpoint frame for a step the contract does not list: junk, nothing changes.
        frame = {"status": "completed", "mapNodeId": GHOST_NODE, "totalRows": 9, "completedRowsCount": 9}
        result["checkpoint"] = {"mapFrames": {"ghost": frame}}
    return result


@st.composite
def failure_scenarios(draw: st.DrawFn, *, on_interrupt: bool = True) -> FailureScenario:
    scenario = draw(_failure_scenarios(on_interrupt=on_interrupt))
    if isinstance(scenario.result, dict) and draw(st.integers(0, 2)) == 0:
        # The runner's whole log in its result: lines the live stream delivered are not added twice.
        whole = [*scenario.first_batch, *(scenario.rest if scenario.then == "resume" else ())]
        logs = [line["line"] for line in whole if line["type"] == "log"]
        scenario = dataclasses.replace(scenario, result={**scenario.result, "logs": logs})
    return scenario


@st.composite
def _failure_scenarios(draw: st.DrawFn, *, on_interrupt: bool) -> FailureScenario:
    contract = draw(contracts())
    lines = draw(runner_lines(contract))
    ending = draw(st.sampled_from(("result", "cut", "batch", "signal", "signal", "cancel-live")))
    if ending == "result":
        result = draw(result_lines().filter(lambda r: r is not None))
        return FailureScenario(contract, lines, "result", len(lines), result)
    # A batch must upload something for the run to exist: it reads at least one line.
    stop = draw(st.integers(1 if ending == "batch" and lines else 0, len(lines)))
    if ending == "cut":
        return FailureScenario(contract, lines, "cut", stop)
    if ending == "cancel-live":
        return FailureScenario(contract, lines, "cancel-live", stop, draw(result_lines()))
    if ending == "batch" and stop == 0:
        lines = ({"type": "log", "line": RUNNER_PREFIX + "only"},)
        stop = 1
    mode = None
    if ending == "signal" and on_interrupt:
        mode = draw(st.sampled_from((None, None, "resumable", "fail", "cancel")))
    if mode in ("fail", "cancel"):
        signal = draw(st.sampled_from(("SIGINT", "SIGTERM")))
        return FailureScenario(contract, lines, "signal", stop, signal=signal, on_interrupt=mode)
    thens = ("resume", "resume", "watchdog", "cancel", "nothing", *(("again",) if ending == "signal" else ()))
    then = draw(st.sampled_from(thens))
    result = draw(result_lines()) if then in ("resume", "again") else None
    return FailureScenario(
        contract,
        lines,
        ending,
        stop,
        result,
        signal=draw(st.sampled_from(("SIGINT", "SIGTERM"))) if ending == "signal" else None,
        on_interrupt=mode,
        then=then,
    )
