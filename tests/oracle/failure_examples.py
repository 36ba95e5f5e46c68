"""The failed-run stories the failure oracle plays by name (`test_failure_story`), beside what it draws.

Each is one way a run went wrong that once left a face telling a false or silent story: a runner
that dies inside a map, a result status the ledger does not take, Ctrl-C and SIGTERM on `ledger
report` (left resumable and resumed, or ended), a map resumed or suspended without its counts,
steps the contract does not list, the watchdog under a stall limit other than the default, and a
cancel while a step runs. Each is named, so one whose fix has not landed can be marked alone.
"""

from __future__ import annotations

from typing import Any

from tests.oracle.failure_model import RUNNER_PREFIX, STEP_POOL, FailureScenario


def _map(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": "execution_event", "event": {"type": kind, "mapNodeId": "enrich", **fields}}


def _event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": "execution_event", "event": {"type": kind, **fields}}


def _log(n: int) -> dict[str, Any]:
    return {"type": "log", "line": f"{RUNNER_PREFIX}{n}"}


CONTRACT = (STEP_POOL["load"], STEP_POOL["enrich"], STEP_POOL["notify"])
# A runner in the middle of a map over 1,000 rows: 400 done, 2 failed.
MID_MAP = (
    _log(0),
    _map("map.started", totalRows=1_000, completedRows=0, failedRows=0),
    _map("map.progress", totalRows=1_000, completedRows=400, failedRows=2),
    _log(1),
)
REST = (
    _map("map.completed", totalRows=1_000, completedRows=998, failedRows=2),
    {"type": "execution_event", "event": {"type": "tool.call.started", "toolId": "slack.post"}},
    _log(2),
    {
        "type": "execution_event",
        "event": {"type": "tool.call.settled", "toolId": "slack.post", "outcome": "succeeded"},
    },
)
COMPLETED = {"type": "result", "status": "completed"}
TOOL_FAILED = {
    "type": "execution_event",
    "event": {"type": "tool.call.settled", "toolId": "slack.post", "outcome": "failed"},
}
GHOST_PROGRESS = {
    "type": "execution_event",
    "event": {"type": "map.progress", "mapNodeId": "ghost-step", "completedRows": 5},
}
GHOST_CALL = {"type": "execution_event", "event": {"type": "tool.call.started", "toolId": "ghost.tool"}}
STORY = MID_MAP + REST
# A burst of log lines three times the live tail (1,000 lines).
BURST = tuple(_log(n) for n in range(100, 3_100))
BURST_AFTER = tuple(_log(n) for n in range(3_100, 3_200))

STORIES: dict[str, FailureScenario] = {
    # The runner dies mid-map: no result line.
    "runner-dies-mid-map": FailureScenario(CONTRACT, MID_MAP, "cut", len(MID_MAP)),
    # A result status the ledger does not take.
    "refused-result-status": FailureScenario(
        CONTRACT, STORY, "result", len(STORY), {"type": "result", "status": "succeeded"}
    ),
    # A result the runner says cancelled, a map still open.
    "runner-result-cancelled": FailureScenario(
        CONTRACT, MID_MAP, "result", len(MID_MAP), {"type": "result", "status": "cancelled"}
    ),
    # Ctrl-C mid-map, then --resume to a completed result.
    "sigint-then-resume": FailureScenario(
        CONTRACT, STORY, "signal", len(MID_MAP), COMPLETED, signal="SIGINT", then="resume"
    ),
    # Ctrl-C, then the rest reported again without --resume: refused, the run still interrupted.
    "sigint-then-report-without-resume": FailureScenario(
        CONTRACT, STORY, "signal", len(MID_MAP), COMPLETED, signal="SIGINT", then="again"
    ),
    # SIGTERM mid-map and nobody resumes: the watchdog fails the interrupted run.
    "sigterm-then-watchdog": FailureScenario(
        CONTRACT, MID_MAP, "signal", len(MID_MAP), signal="SIGTERM", then="watchdog"
    ),
    # --on-interrupt fail and cancel end the run at the signal.
    "sigint-on-interrupt-fail": FailureScenario(
        CONTRACT, MID_MAP, "signal", len(MID_MAP), signal="SIGINT", on_interrupt="fail"
    ),
    "sigterm-on-interrupt-cancel": FailureScenario(
        CONTRACT, MID_MAP, "signal", len(MID_MAP), signal="SIGTERM", on_interrupt="cancel"
    ),
    # A batch ends while a tool call runs; the --resume batch settles it failed.
    "tool-fails-in-resumed-batch": FailureScenario(
        CONTRACT,
        (*MID_MAP, *REST[:2], _log(2), TOOL_FAILED),
        "batch",
        len(MID_MAP) + 2,
        COMPLETED,
        then="resume",
    ),
    # A cancel through the ledger while the reporter still reads, mid-map.
    "cancel-while-reporting": FailureScenario(CONTRACT, STORY, "cancel-live", len(MID_MAP), COMPLETED),
    # More log lines than the live tail holds, written at once, with the same lines in the
    # result's logs: every line lands once, in the runner's order among the step transitions.
    "result-logs-fill-the-live-tail": FailureScenario(
        CONTRACT,
        (MID_MAP[1], *BURST, *REST[:2], *BURST_AFTER, REST[3]),
        "result",
        len(BURST) + len(BURST_AFTER) + 4,
        {"type": "result", "status": "completed", "logs": [line["line"] for line in (*BURST, *BURST_AFTER)]},
    ),
    # Counts left out (map.suspended without failedRows, map.resumed without completedRows), then
    # a cancel while the map runs.
    "counts-left-out-then-cancel": FailureScenario(
        CONTRACT,
        (
            _map("map.started", totalRows=100),
            _map("map.progress", completedRows=40, failedRows=3),
            _map("map.suspended", completedRows=50),
            _map("map.resumed"),
            _log(0),
        ),
        "batch",
        5,
        then="cancel",
    ),
    # Steps outside the contract: a map and a tool it does not list, a checkpoint frame for one.
    "steps-outside-the-contract": FailureScenario(
        CONTRACT,
        (GHOST_PROGRESS, GHOST_CALL, *STORY),
        "result",
        len(STORY) + 2,
        {
            "type": "result",
            "status": "failed",
            "checkpoint": {
                "mapFrames": {"g": {"status": "completed", "mapNodeId": "ghost-step", "totalRows": 9}}
            },
        },
    ),
}
