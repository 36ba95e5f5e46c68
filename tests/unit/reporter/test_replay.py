"""The terminal log replay per mode, and its multiset dedupe."""

from __future__ import annotations

from reporter.replay import build_terminal_replay, drop_live_lines

T1 = "[2026-01-01T00:00:01.000Z] "
T2 = "[2026-01-01T00:00:02.500Z] "


def test_progress_reporter_mode_replays_everything_positionally_from_position_one() -> None:
    replay = build_terminal_replay(
        ["  a  ", "", "b", 7, T1 + "c"], mode="progress_reporter", live_logs=["a"], live_log_total_count=1
    )
    assert replay == {"lines": ["a", "b", T1 + "c"], "dedupe_mode": "positional", "total_count": 3}


def test_direct_worker_keeps_only_stamped_lines_not_already_seen_live() -> None:
    replay = build_terminal_replay(
        [T2 + "hello", "unstamped worker line", T2 + "new", T1 + "[perf] x"],
        mode="direct_worker",
        live_logs=[T1 + "hello", "[perf] x"],
        live_log_total_count=10,
    )
    assert replay == {"lines": [T2 + "new"], "dedupe_mode": "positional", "total_count": 11}


def test_repeated_identical_lines_are_compared_as_a_multiset() -> None:
    live = [T1 + "tick", T1 + "tick", "tick"]
    result = [T2 + "tick"] * 5 + [T2 + "tock"]
    assert drop_live_lines(result, live) == [T2 + "tick", T2 + "tick", T2 + "tock"]


def test_nothing_new_gives_no_replay() -> None:
    assert (
        build_terminal_replay([T1 + "a"], mode="direct_worker", live_logs=[T2 + "a"], live_log_total_count=4)
        is None
    )
    assert build_terminal_replay([], mode="progress_reporter", live_logs=[], live_log_total_count=0) is None


def test_replay_all_uses_exact_dedupe_and_keeps_repeats() -> None:
    replay = build_terminal_replay(
        [T1 + "a", T1 + "a", "plain"],
        mode="direct_worker",
        live_logs=[T1 + "a"],
        live_log_total_count=9,
        replay_all=True,
    )
    assert replay == {"lines": [T1 + "a", T1 + "a"], "dedupe_mode": "exact", "total_count": 2}
