"""A step's state through merges: a patch that names a state keeps it, and a settled step whose
counts fall short of its total again is reopened, under way with no reason."""

from __future__ import annotations

from reporter.progress import NodeProgress, merge_patch


def test_a_patch_that_names_the_state_it_leaves_an_open_step_in_keeps_it() -> None:
    """The times say what an open step is now only when the patch names no state: one that does
    (settled or still open beside its times) is taken as it says."""
    for state in ("pending", "running"):
        for named, times in (
            ("failed", {"completed_at": 5}),
            ("running", {"completed_at": 5}),
            ("pending", {"started_at": 5}),
        ):
            node = NodeProgress(state=state)
            merge_patch(node, {"state": named, "reason": "as the runner said", **times}, now_ms=6)
            assert (node.state, node.reason) == (named, "as the runner said")


def test_an_end_without_a_state_leaves_the_state_to_the_times() -> None:
    node = NodeProgress(state="running", reason="waiting")
    merge_patch(node, {"completed_at": 5}, now_ms=6)
    assert (node.state, node.reason, node.completed_at) == (None, None, 5)


def test_a_settled_step_whose_counts_fall_short_of_its_total_again_is_reopened() -> None:
    for state in ("completed", "failed", "cancelled", "skipped"):
        node = NodeProgress(state=state, reason="it ended", completed=10, total=10, completed_at=5)
        merge_patch(node, {"total": 20}, now_ms=7)
        assert (node.state, node.reason, node.completed_at, node.updated_at) == ("running", None, None, 7)
