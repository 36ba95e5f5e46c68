"""The step lifecycle over the static pipeline."""

from __future__ import annotations

from reporter.lifecycle import StepLifecycleTracker, StepState, StepTransition, transition_patch
from reporter.pipeline import StaticPipeline, static_node_id
from reporter.progress import NodeProgress, merge_patch

CONTRACT = {
    "staticPipeline": {
        "substeps": [
            {"type": "code", "id": "a"},
            {"type": "code"},
            "junk",
            {"type": "dataset", "id": "m1", "tableNamespace": "t1"},
            {"type": "tool", "id": "t", "toolId": "x.y"},
            {"type": "code", "id": "branch"},
            {"type": "dataset", "id": "m2", "field": "f2"},
        ]
    }
}


def make(contract: object = CONTRACT) -> tuple[StepLifecycleTracker, list[StepTransition]]:
    events: list[StepTransition] = []
    progress: dict[str, NodeProgress] = {}
    tick = iter(range(100, 10_000))

    def emit(event: StepTransition) -> None:
        # What the reporter does with a transition: the node's progress says it from then on.
        events.append(event)
        node = progress.setdefault(event.node_id, NodeProgress())
        merge_patch(node, transition_patch(event, node), event.at)

    tracker = StepLifecycleTracker(StaticPipeline(contract).nodes, progress, emit, lambda: next(tick))
    return tracker, events


def summary(events: list[StepTransition]) -> list[tuple[str, str]]:
    return [(e.node_id, e.transition) for e in events]


def test_node_ids_keep_positions_of_malformed_steps() -> None:
    assert [n.node_id for n in StaticPipeline(CONTRACT).nodes] == ["a", "code-1", "m1", "t", "branch", "m2"]
    assert static_node_id({"type": "tool", "id": "  "}, 4) == "tool-4"
    assert StaticPipeline({"staticPipeline": {"substeps": "x"}}).nodes == ()
    assert StaticPipeline(None).nodes == ()


def test_namespace_resolution_exact_or_with_underscore_suffix() -> None:
    pipeline = StaticPipeline(CONTRACT)
    assert pipeline.resolve_namespace("t1") is not None
    ref = pipeline.resolve_namespace(" t1_run7 ")
    assert ref is not None and (ref.node_id, ref.artifact_table_namespace) == ("m1", "t1_run7")
    assert pipeline.resolve_namespace("t1x") is None
    assert pipeline.resolve_namespace("f2_a").node_id == "m2"  # type: ignore[union-attr]
    assert pipeline.resolve_namespace("") is None
    assert pipeline.resolve_namespace(None) is None


def test_steps_before_the_first_dataset_start_at_creation() -> None:
    tracker, events = make()
    tracker.mark_pre_dataset_steps_started()
    assert summary(events) == [("a", "started"), ("code-1", "started")]
    tracker.mark_pre_dataset_steps_started()
    assert len(events) == 2  # never twice


def test_without_a_dataset_every_step_is_pre_dataset() -> None:
    tracker, events = make(
        {"staticPipeline": {"substeps": [{"type": "code"}, {"type": "tool", "toolId": "z"}]}}
    )
    tracker.mark_pre_dataset_steps_started()
    assert summary(events) == [("code-0", "started"), ("tool-1", "started")]


def test_map_start_closes_pre_dataset_steps_and_keeps_the_first_start() -> None:
    tracker, events = make()
    tracker.mark_pre_dataset_steps_started()
    tracker.on_map_started("m1")
    tracker.on_map_started("m1")
    assert summary(events)[2:] == [("a", "completed"), ("code-1", "completed"), ("m1", "started")]


def test_settling_an_unstarted_map_starts_it_first_and_terminal_states_stay() -> None:
    tracker, events = make()
    tracker.on_map_completed("m2")
    tracker.on_map_failed("m2")
    tracker.on_map_started("m2")
    assert summary(events) == [("m2", "started"), ("m2", "completed")]
    assert tracker.state("m2") is StepState.COMPLETED


def test_tool_events_and_unknown_names_are_ignored() -> None:
    tracker, events = make()
    tracker.on_tool_called("nope")
    tracker.on_map_started("nope")
    assert events == []
    tracker.on_tool_called("x.y")
    tracker.on_tool_failed("x.y")
    tracker.on_tool_called("x.y")  # the only tool step with this id is settled
    assert summary(events) == [("t", "started"), ("t", "failed")]


def test_completed_run_completes_started_steps_and_leaves_branches_unexecuted() -> None:
    tracker, _ = make()
    tracker.mark_pre_dataset_steps_started()
    tracker.on_map_started("m1")
    tracker.on_tool_called("x.y")
    tracker.mark_all_terminal()
    assert tracker.states() == {
        "a": StepState.COMPLETED,
        "code-1": StepState.COMPLETED,
        "m1": StepState.COMPLETED,
        "t": StepState.COMPLETED,
        "branch": StepState.UNEXECUTED,
        "m2": StepState.UNEXECUTED,
    }


def test_failed_run_fails_started_steps_only() -> None:
    tracker, events = make()
    tracker.mark_pre_dataset_steps_started()
    tracker.on_map_started("m1")
    tracker.on_map_completed("m1")
    tracker.on_tool_called("x.y")
    tracker.mark_started_failed()
    states = tracker.states()
    assert states["m1"] is StepState.COMPLETED
    assert states["t"] is StepState.FAILED
    assert states["m2"] is StepState.UNEXECUTED
    times = [e.at for e in events]
    assert times == sorted(times)


def test_a_steps_state_is_read_from_its_node_progress() -> None:
    progress = {"m1": NodeProgress(started_at=1), "t": NodeProgress(started_at=1, completed_at=2)}
    progress["branch"] = NodeProgress(started_at=1, completed_at=2, node_io={"error": "boom"})
    events: list[StepTransition] = []
    tracker = StepLifecycleTracker(StaticPipeline(CONTRACT).nodes, progress, events.append, lambda: 5)
    assert tracker.state("m1") is StepState.STARTED
    assert tracker.state("t") is StepState.COMPLETED
    assert tracker.state("branch") is StepState.FAILED
    assert tracker.state("m2") is StepState.UNEXECUTED and tracker.state("nope") is None
    tracker.on_tool_called("x.y")  # settled already: nothing to start
    tracker.mark_started_failed()
    assert [(e.node_id, e.transition) for e in events] == [("m1", "failed")]


def test_every_transition_says_the_step_s_state_and_a_failure_its_reason() -> None:
    node = NodeProgress(node_io={"attempt": 2})
    started = StepTransition(node_id="m1", transition="started", at=1)
    assert transition_patch(started, None) == {"started_at": 1, "state": "running"}
    done = StepTransition(node_id="m1", transition="completed", at=2, reason="ignored")
    assert transition_patch(done, node) == {"completed_at": 2, "state": "completed"}
    failed = StepTransition(node_id="m1", transition="failed", at=3, reason="map failed")
    assert transition_patch(failed, node) == {
        "completed_at": 3,
        "state": "failed",
        "reason": "map failed",
        "node_io": {"attempt": 2, "error": "map failed"},
    }
    cancelled = StepTransition(node_id="m1", transition="cancelled", at=4, reason="run cancelled")
    assert transition_patch(cancelled, node) == {
        "completed_at": 4,
        "state": "cancelled",
        "reason": "run cancelled",
    }


def test_a_failed_tool_s_reason_carries_the_runner_s_error() -> None:
    tracker, events = make()
    tracker.on_tool_called("x.y")
    tracker.on_tool_failed("x.y", "HTTP 500 from the enrichment API")
    assert [(e.transition, e.reason) for e in events] == [
        ("started", None),
        ("failed", "tool x.y failed: HTTP 500 from the enrichment API"),
    ]
    tracker, events = make()
    tracker.on_map_started("m1")
    tracker.on_map_failed("m1", "   ")
    assert events[-1].reason == "map failed"


def test_the_run_s_end_settles_running_steps_by_its_outcome() -> None:
    for status, expected, reason in (
        ("completed", StepState.COMPLETED, None),
        ("failed", StepState.FAILED, "run failed: no result line"),
        ("cancelled", StepState.CANCELLED, "run cancelled: no result line"),
    ):
        tracker, events = make()
        tracker.on_map_started("m1")
        tracker.settle_open(status, "no result line")
        assert tracker.state("m1") is expected and events[-1].reason == reason
        # Never started: left to the ledger, which skips it.
        assert tracker.state("m2") is StepState.UNEXECUTED


def test_the_ledger_s_states_are_read_back_as_they_are() -> None:
    progress = {
        "m1": NodeProgress(started_at=1, completed_at=2, state="cancelled", reason="run cancelled"),
        "t": NodeProgress(state="skipped"),
        "branch": NodeProgress(started_at=1, completed_at=2, state="running"),
    }
    events: list[StepTransition] = []
    tracker = StepLifecycleTracker(StaticPipeline(CONTRACT).nodes, progress, events.append, lambda: 5)
    assert tracker.state("m1") is StepState.CANCELLED
    assert tracker.state("t") is StepState.SKIPPED
    # A state wins over a completion time.
    assert tracker.state("branch") is StepState.STARTED
