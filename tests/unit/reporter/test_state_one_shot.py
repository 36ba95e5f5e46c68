"""The reporter state's one-shot events: the newest observation per activity (by `observedAt`; one
without a time is the oldest), a bounded backlog whose dropped events are counted, and a failed
upload's events given back older than what arrived meanwhile."""

from __future__ import annotations

from typing import Any

from reporter.state import ProgressState


def state(limit: int = 10) -> ProgressState:
    return ProgressState(now_ms=lambda: 0, max_pending_one_shot=limit)


def observation(activity: str, at: object = None, **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"activityId": activity, **extra}
    if at is not None:
        record["observedAt"] = at
    return record


def pending(s: ProgressState) -> list[dict[str, Any]]:
    snap = s.snapshot()
    return snap.activity_observations


def test_the_newest_observation_of_an_activity_is_kept_and_a_tie_goes_to_the_later() -> None:
    s = state()
    s.add_activity_observation(observation("a", 5, n=1))
    s.add_activity_observation(observation("a", 3, n=2))  # older: ignored
    assert pending(s) == [observation("a", 5, n=1)]
    s.add_activity_observation(observation("a", 5, n=1))
    s.add_activity_observation(observation("a", 5.0, n=3))  # a tie: the later wins
    assert pending(s) == [observation("a", 5.0, n=3)]


def test_an_observation_without_a_time_is_older_than_any_with_one() -> None:
    s = state()
    s.add_activity_observation(observation("a", -1e300, n=1))
    s.add_activity_observation(observation("a", None, n=2))
    s.add_activity_observation(observation("a", "7", n=3))  # not a number: no time either
    assert pending(s) == [observation("a", -1e300, n=1)]
    s.add_activity_observation(observation("b", None, n=1))
    s.add_activity_observation(observation("b", -1e300, n=2))
    assert pending(s) == [observation("b", -1e300, n=2)]


def test_the_backlog_keeps_the_newest_activities_and_counts_each_one_dropped() -> None:
    s = state(limit=2)
    for activity in ("a", "b", "c", "d"):
        s.add_activity_observation(observation(activity, 1))
    assert s.pending_one_shot_count == 2
    snap = s.snapshot()
    assert [o["activityId"] for o in snap.activity_observations] == ["c", "d"]
    assert snap.dropped_one_shot_events == 2
    s.add_activity_observation(observation("e", 1))
    s.add_activity_observation(observation("f", 1))
    assert s.pending_one_shot_count == 2 and s.snapshot().dropped_one_shot_events == 0


def test_a_failed_uploads_observations_come_back_older_than_those_that_arrived_meanwhile() -> None:
    s = state()
    s.add_activity_observation(observation("a", 5, n="sent"))
    s.add_activity_observation(observation("b", 5, n="sent"))
    s.add_activity_observation(observation("c", 5, n="sent"))
    failed = s.snapshot()
    s.add_activity_observation(observation("a", 7, n="newer"))
    s.add_activity_observation(observation("b", 3, n="older"))
    s.add_activity_observation(observation("c", 5, n="tie"))
    s.add_activity_observation(observation("d", 1, n="new"))
    s.requeue(failed)
    assert [(o["activityId"], o["n"]) for o in pending(s)] == [
        ("a", "newer"),
        ("b", "sent"),  # the failed upload's was newer than what came after
        ("c", "tie"),  # a tie goes to the later
        ("d", "new"),
    ]


def test_requeued_observations_of_other_activities_go_before_the_new_ones() -> None:
    s = state()
    s.add_activity_observation(observation("x", 1))
    failed = s.snapshot()
    s.add_activity_observation(observation("y", 1))
    s.requeue(failed)
    assert [o["activityId"] for o in pending(s)] == ["x", "y"]


def test_every_write_marks_what_the_next_upload_carries_and_a_snapshot_makes_it_clean() -> None:
    s = state()
    assert not s.has_changes and not s.dirty and s.total_rows == 0
    s.append_log("  ")  # blank: nothing to carry
    assert not s.has_changes
    s.append_log("a line")
    assert s.dirty and s.has_changes and list(s.logs) == ["a line"]
    s.snapshot()
    assert not s.has_changes
    s.merge_row_counts("m", 1, 0, 2, None, None, None, None, None, None)
    assert s.dirty and s.has_changes
    s.snapshot()
    s.replace_node("m", s.nodes["m"])
    assert s.dirty and s.has_changes
    s.snapshot()
    s.restore_logs(["delivered"], 10)  # already delivered: nothing to upload
    assert not s.has_changes and list(s.logs)[-1] == "delivered" and s.log_total_count == 10


def test_a_failed_upload_of_progress_alone_is_given_back_to_go_again() -> None:
    """Nothing one-shot to give back: only the flag says the next upload must carry it again."""
    s = state()
    s.append_log("a line")
    failed = s.snapshot()
    assert not s.has_changes
    s.requeue(failed)
    assert s.has_changes and s.pending_one_shot_count == 0


def test_row_counts_stamp_the_node_with_the_clock() -> None:
    s = ProgressState(now_ms=lambda: 4_321)
    s.merge_row_counts("m", 1, 0, 2, None, None, None, None, None, None)
    assert s.nodes["m"].updated_at == 4_321


def test_a_log_line_is_kept_as_the_ledger_stores_it_under_the_states_own_line_bound() -> None:
    from dataclasses import replace

    from ledger.validate import DEFAULT_UPLOAD_BOUNDS, log_line

    bounds = replace(DEFAULT_UPLOAD_BOUNDS, log_line_bytes=256)
    s = ProgressState(now_ms=lambda: 0, bounds=bounds)
    s.append_log("x" * 1000)
    assert list(s.logs) == [log_line("x" * 1000, 256)] and len(s.logs[0]) < 1000


def test_a_new_observation_of_a_pending_activity_makes_it_the_newest_for_the_backlog() -> None:
    """The backlog drops the least recently observed activity first."""
    s = state(limit=2)
    s.add_activity_observation(observation("a", 1))
    s.add_activity_observation(observation("b", 1))
    s.add_activity_observation(observation("a", 2))
    s.add_activity_observation(observation("c", 1))
    assert [(o["activityId"], o["observedAt"]) for o in pending(s)] == [("a", 2), ("c", 1)]


def test_a_requeued_drop_count_adds_to_the_drops_since() -> None:
    s = state(limit=1)
    s.add_activity_observation(observation("a", 1))
    s.add_activity_observation(observation("b", 1))  # drops a
    failed = s.snapshot()
    assert failed.dropped_one_shot_events == 1
    s.add_lifecycle_event({"phase": "x"})
    s.add_lifecycle_event({"phase": "y"})  # drops x
    s.requeue(failed)
    assert s.snapshot().dropped_one_shot_events == 2  # the failed upload's one and the one since
