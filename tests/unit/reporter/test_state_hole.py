"""A hole in the live tail is held for `HOLE_HOLD_MS` from when it opened, on the state's clock
(epoch milliseconds: the hold is measured from the opening, not from zero)."""

from __future__ import annotations

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
