"""The failure oracle's own rules, without a ledger: the model says what the documents say, and
the comparison catches the false stories the oracle exists to catch (a failed step read as done,
a silent error, a step outside the contract, a log line out of the runner's order, a face whose
events contradict its steps)."""

from __future__ import annotations

import copy
from typing import Any

from ledger.runlog.events import WATCHDOG_ERROR
from tests.oracle.faces import Record
from tests.oracle.failure_examples import STORIES
from tests.oracle.failure_model import (
    NO_RESULT_ERROR,
    SKIPPED_REASON,
    EventKey,
    events_match,
    expected,
)
from tests.oracle.test_failure_oracle import event_problems, model_problems


def _record(want_story: str) -> Record:
    """A record every face would give for `want_story` if the ledger told it right."""
    want = expected(STORIES[want_story])
    steps: dict[str, dict[str, Any]] = {}
    for node, step in want.steps.items():
        reason = step.reason.value if step.reason.how == "exact" else None
        if reason is None and step.reason.how == "present":
            reason = "a reason"
        counts = {key: getattr(step, key).value for key in ("completed", "failed", "total")}
        steps[node] = {"state": step.state, "reason": reason, **counts}
    events: list[dict[str, Any]] = []
    error = want.error.value if want.error.how == "exact" else None
    flat: list[EventKey] = []
    for item in want.events:
        flat.extend(sorted(item, key=repr) if isinstance(item, frozenset) else [item])
    for kind, key in flat:
        event: dict[str, Any] = {"seq": len(events) + 1, "type": kind}
        if kind == "log":
            event["line"] = key
        elif kind == "terminal":
            event.update(status=key, error=error)
        elif kind == "reporter.interrupted":
            event.update(signal=STORIES[want_story].signal, reason="the reporter was interrupted")
        elif kind.startswith("step."):
            event["node_id"] = key
            if kind != "step.started":
                event.update(state=kind.removeprefix("step."), reason=steps[str(key)]["reason"])
        events.append(event)
    return Record(
        face="test",
        status="failed" if want.terminal_status else "interrupted",
        terminal_status=want.terminal_status,
        terminal_error=error,
        steps=steps,
        totals=want.totals(),
        events=events,
    )


def test_a_runner_dying_mid_map_fails_the_map_and_skips_what_never_started() -> None:
    want = expected(STORIES["runner-dies-mid-map"])
    assert want.terminal_status == "failed" and want.error.value == NO_RESULT_ERROR
    assert {node: step.state for node, step in want.steps.items()} == {
        "load": "completed",
        "enrich": "failed",
        "notify": "skipped",
    }
    assert want.steps["notify"].reason.value == SKIPPED_REASON
    assert (want.steps["enrich"].completed.value, want.steps["enrich"].failed.value) == (400, 2)
    assert want.totals() == {
        "steps_total": 3,
        "steps_done": 1,
        "steps_failed": 1,
        "steps_cancelled": 0,
        "steps_skipped": 1,
    }
    assert [e for e in want.events if not isinstance(e, frozenset)][:4] == [
        ("step.started", "load"),
        ("log", "runner line 0"),
        ("step.completed", "load"),
        ("step.started", "enrich"),
    ]


def test_the_watchdog_settles_an_interrupted_run_with_the_reasons_the_ledger_gives() -> None:
    want = expected(STORIES["sigterm-then-watchdog"])
    assert want.error.value == WATCHDOG_ERROR
    assert want.steps["enrich"].reason.value == f"run failed: {WATCHDOG_ERROR}"
    assert ("reporter.interrupted", None) in want.events


def test_a_true_record_has_no_problems() -> None:
    for story in ("runner-dies-mid-map", "sigterm-then-watchdog", "counts-left-out-then-cancel"):
        want = expected(STORIES[story])
        record = _record(story)
        assert model_problems(want, record, frozenset(), STORIES[story].signal) == {}, story


def test_each_false_story_is_caught() -> None:
    story = "runner-dies-mid-map"
    want, true = expected(STORIES[story]), _record(story)

    done = copy.deepcopy(true)  # the failed map read as done
    done.steps["enrich"]["state"] = "completed"
    assert "steps" in model_problems(want, done, frozenset())

    silent = copy.deepcopy(true)  # no reason for the run's failure
    silent.terminal_error = None
    assert "terminal" in model_problems(want, silent, frozenset())

    ghost = copy.deepcopy(true)  # a step the contract does not list
    ghost.steps["ghost-step"] = {"state": "running", "reason": None, "completed": 3, "failed": 0, "total": 7}
    assert "steps" in model_problems(want, ghost, frozenset())

    counted = copy.deepcopy(true)
    assert counted.totals is not None
    counted.totals["steps_done"] = 2
    assert "totals" in model_problems(want, counted, frozenset())

    reordered = copy.deepcopy(true)  # a log line stored before the transition it followed
    events = reordered.events
    log = next(i for i, e in enumerate(events) if e["type"] == "log")
    events[log], events[log + 1] = events[log + 1], events[log]
    assert "events" in model_problems(want, reordered, frozenset())

    contradicted = copy.deepcopy(true)  # the step says failed, its event says something else
    settled = next(e for e in contradicted.events if e["type"] == "step.failed")
    settled["state"] = "completed"
    assert event_problems(contradicted, None)


def test_transitions_of_different_steps_between_two_log_lines_carry_no_order() -> None:
    want: list[EventKey | frozenset[EventKey]] = [
        ("step.started", "a"),
        ("step.started", "b"),
        ("step.completed", "a"),
        ("log", "x"),
        ("terminal", "completed"),
    ]
    assert events_match(
        want,
        [
            ("step.started", "a"),
            ("step.completed", "a"),
            ("step.started", "b"),
            ("log", "x"),
            ("terminal", "completed"),
        ],
    )
    # A step's own transitions keep their order, and a log line its place.
    assert not events_match(
        want,
        [
            ("step.completed", "a"),
            ("step.started", "a"),
            ("step.started", "b"),
            ("log", "x"),
            ("terminal", "completed"),
        ],
    )
    assert not events_match(
        want,
        [
            ("step.started", "a"),
            ("step.started", "b"),
            ("log", "x"),
            ("step.completed", "a"),
            ("terminal", "completed"),
        ],
    )
