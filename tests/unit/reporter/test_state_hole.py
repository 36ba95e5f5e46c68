"""A hole in the live tail is held for `HOLE_HOLD_MS` from when it opened, on the state's clock
(epoch milliseconds: the hold is measured from the opening, not from zero), and while it is, the
uploads hold back the nodes that moved after the lines they hold back."""

from __future__ import annotations

from reporter.progress import NodeProgress
from reporter.state import HOLE_HOLD_MS, LIVE_LOG_TAIL_LIMIT, ProgressState

EPOCH_MS = 1_700_000_000_000


def test_a_hole_is_held_for_the_hold_time_from_when_it_opened() -> None:
    now = [EPOCH_MS]
    state = ProgressState(now_ms=lambda: now[0])
    for i in range(LIVE_LOG_TAIL_LIMIT + 1):
        state.append_log(f"line {i}")
    assert state.log_hole_after == 0
    now[0] = EPOCH_MS + HOLE_HOLD_MS - 1
    assert state.snapshot().live_log_total_count == 0
    now[0] = EPOCH_MS + HOLE_HOLD_MS
    assert state.snapshot().live_log_total_count == LIVE_LOG_TAIL_LIMIT + 1


def test_only_a_line_no_upload_carried_opens_a_hole_when_it_falls_out_of_the_tail() -> None:
    """Lines 1 … LIMIT were sent; as lines LIMIT+1 … 2·LIMIT come, 1 … LIMIT fall out: no hole.
    The next line pushes out line LIMIT+1, which no upload carried: the hole opens after LIMIT."""
    state = ProgressState(now_ms=lambda: EPOCH_MS)
    for i in range(1, LIVE_LOG_TAIL_LIMIT + 1):
        state.append_log(f"line {i}")
    assert state.snapshot().live_log_total_count == LIVE_LOG_TAIL_LIMIT  # all sent
    for i in range(LIVE_LOG_TAIL_LIMIT + 1, 2 * LIVE_LOG_TAIL_LIMIT + 1):
        state.append_log(f"line {i}")
        assert state.log_hole_after is None, i
    state.append_log(f"line {2 * LIVE_LOG_TAIL_LIMIT + 1}")
    assert state.log_hole_after == LIVE_LOG_TAIL_LIMIT


# -- the nodes that moved after the held lines -------------------------------------------------------


def _opened_after(state: ProgressState, sent: int) -> None:
    """`sent` lines carried by an upload, then enough more that the tail loses one no upload
    carried: a hole after line `sent`."""
    for i in range(sent):
        state.append_log(f"sent {i}")
    assert state.snapshot().live_log_total_count == sent
    for i in range(LIVE_LOG_TAIL_LIMIT + 1):
        state.append_log(f"held {i}")
    assert state.log_hole_after == sent


def test_a_held_upload_leaves_out_a_node_that_moved_after_the_lines_it_holds_back() -> None:
    """Sent, its transition would be stored before the held lines the result's logs fill later."""
    state = ProgressState(now_ms=lambda: EPOCH_MS)
    _opened_after(state, 3)
    state.set_node_progress("enrich", {"completed": 5})
    held = state.snapshot()
    assert (held.live_log_total_count, held.live_node_progress, held.step_positions) == (3, {}, {})
    whole = state.snapshot(whole_tail=True)
    assert whole.live_log_total_count == 3 + LIVE_LOG_TAIL_LIMIT + 1
    assert whole.live_node_progress["enrich"]["completed"] == 5
    assert whole.step_positions == {"enrich": {"progress": 3 + LIVE_LOG_TAIL_LIMIT + 1}}


def test_a_held_upload_leaves_out_a_node_with_any_transition_after_the_held_lines() -> None:
    """Its start followed a line that was sent, its progress one that is held: the node waits."""
    state = ProgressState(now_ms=lambda: EPOCH_MS)
    for i in range(3):
        state.append_log(f"sent {i}")
    state.mark_transition("enrich", "started")
    state.set_node_progress("enrich", {"started_at": EPOCH_MS})
    assert state.snapshot().step_positions == {"enrich": {"started": 3, "progress": 3}}
    for i in range(LIVE_LOG_TAIL_LIMIT + 1):
        state.append_log(f"held {i}")
    state.set_node_progress("enrich", {"completed": 5})
    assert state.snapshot().live_node_progress == {}


def test_a_held_upload_carries_the_nodes_that_moved_at_or_before_its_last_line() -> None:
    """A node that moved right after the last line sent (position = the hole's start), one that
    moved before, and one with no position at all (the ledger places it after the upload's lines)
    go out; only the one that moved after the held lines waits."""
    state = ProgressState(now_ms=lambda: EPOCH_MS)
    state.append_log("first")
    state.set_node_progress("before", {"completed": 1})
    state.append_log("second")
    state.set_node_progress("at", {"completed": 2})
    state.replace_node("unplaced", NodeProgress(completed=3))
    assert state.snapshot().live_log_total_count == 2
    for i in range(LIVE_LOG_TAIL_LIMIT + 1):
        state.append_log(f"held {i}")
    state.set_node_progress("after", {"completed": 4})
    held = state.snapshot()
    assert held.live_log_total_count == 2
    assert sorted(held.live_node_progress) == ["at", "before", "unplaced"]
    assert held.step_positions == {"before": {"progress": 1}, "at": {"progress": 2}}


def test_once_the_hold_ends_the_upload_carries_the_nodes_with_the_lines() -> None:
    now = [EPOCH_MS]
    state = ProgressState(now_ms=lambda: now[0])
    _opened_after(state, 0)
    state.set_node_progress("enrich", {"completed": 5})
    now[0] = EPOCH_MS + HOLE_HOLD_MS - 1
    assert state.snapshot().live_node_progress == {}
    now[0] = EPOCH_MS + HOLE_HOLD_MS
    released = state.snapshot()
    assert released.live_log_total_count == LIVE_LOG_TAIL_LIMIT + 1
    assert released.live_node_progress["enrich"]["completed"] == 5
    assert released.step_positions == {"enrich": {"progress": LIVE_LOG_TAIL_LIMIT + 1}}
