"""The step lifecycle over the static pipeline."""

from __future__ import annotations

from reporter.lifecycle import StepLifecycleTracker, StepState, StepTransition
from reporter.pipeline import StaticPipeline, static_node_id
from reporter.progress import NodeProgress

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
        if event.transition == "started":
            node.started_at = event.at
        else:
            node.completed_at = event.at
            node.node_io = {"error": event.reason} if event.transition == "failed" else None

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
