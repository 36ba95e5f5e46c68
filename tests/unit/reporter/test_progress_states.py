"""A step's state through merges: a patch that names a state keeps it, and a settled step whose
counts fall short of its total again is reopened, under way with no reason."""

from __future__ import annotations

from reporter.progress import NodeProgress, merge_patch


def test_a_patch_that_names_the_state_it_ends_an_open_step_in_keeps_it() -> None:
    for state in ("pending", "running"):
        node = NodeProgress(state=state)
        merge_patch(node, {"state": "failed", "reason": "tool failed", "completed_at": 5}, now_ms=6)
        assert (node.state, node.reason, node.completed_at) == ("failed", "tool failed", 5)


def test_an_end_without_a_state_leaves_the_state_to_the_times() -> None:
    node = NodeProgress(state="running", reason="waiting")
    merge_patch(node, {"completed_at": 5}, now_ms=6)
    assert (node.state, node.reason, node.completed_at) == (None, None, 5)


def test_a_settled_step_whose_counts_fall_short_of_its_total_again_is_reopened() -> None:
    for state in ("completed", "failed", "cancelled", "skipped"):
        node = NodeProgress(state=state, reason="it ended", completed=10, total=10, completed_at=5)
        merge_patch(node, {"total": 20}, now_ms=7)
        assert (node.state, node.reason, node.completed_at, node.updated_at) == ("running", None, None, 7)
