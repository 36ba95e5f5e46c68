"""The pure status-ingestion rules: validation, fencing, positional logs, step diffs, activity."""

from __future__ import annotations

import re
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.errors import InvalidInput, StaleAttempt
from ledger.ingest.rules import (
    IngestState,
    LogSource,
    diff_steps,
    fence_attempt,
    is_late_duplicate,
    newer_activities,
    place_logs,
    plan_upload,
    replay_digest,
)
from ledger.ingest.upload import Interruption, LogReplay, StatusUpload, parse_upload, replay_end
from ledger.validate import MAX_LOG_LINE_BYTES, MAX_PIPELINE_STEPS

# -- validation ----------------------------------------------------------------------------------


def test_parse_minimal_upload_defaults() -> None:
    upload = parse_upload("r1", {"status": "running"})
    assert upload == StatusUpload(status="running")


def test_parse_full_upload_keeps_known_fields_and_ignores_unknown() -> None:
    body = {
        "run_id": "r1",
        "upload_seq": 3,
        "status": "completed",
        "producer_attempt": 2,
        "live_node_progress": {
            "n1": {"completed": 5.0, "total": 10, "started_at": 1000, "message": "5 / 10", "shiny": 1}
        },
        "live_logs": ["a", "b"],
        "live_log_total_count": 7,
        "dataset_lifecycle_events": [{"type": "dataset.lifecycle", "tableNamespace": "t"}],
        "activity_observations": [{"activityId": "x", "observedAt": 5}],
        "terminal_log_replay": {"lines": ["z"], "dedupe_mode": "exact"},
        "last_checkpoint_at": 99,
        "dropped_one_shot_events": 2,
        "from_the_future": {"anything": True},
    }
    upload = parse_upload("r1", body)
    assert upload.upload_seq == 3
    assert upload.producer_attempt == 2
    # Integral floats become ints; unknown node fields are dropped.
    assert upload.live_node_progress == {
        "n1": {"completed": 5, "total": 10, "started_at": 1000, "message": "5 / 10"}
    }
    assert upload.live_logs == ("a", "b")
    assert upload.live_log_total_count == 7
    assert upload.terminal_log_replay == LogReplay(lines=("z",), dedupe_mode="exact")
    assert upload.dropped_one_shot_events == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"),
        ({"status": "done"}, "status"),
        ({}, "status"),
        ({"status": "running", "run_id": "other"}, "run_id"),
        ({"status": "running", "upload_seq": 0}, "upload_seq"),
        ({"status": "running", "upload_seq": "1"}, "upload_seq"),
        ({"status": "running", "producer_attempt": -1}, "producer_attempt"),
        ({"status": "running", "producer_attempt": True}, "producer_attempt"),
        ({"status": "running", "live_node_progress": []}, "live_node_progress"),
        ({"status": "running", "live_node_progress": {"n": 3}}, "live_node_progress.n"),
        (
            {"status": "running", "live_node_progress": {"n": {"completed": -1}}},
            "live_node_progress.n.completed",
        ),
        ({"status": "running", "live_node_progress": {"n": {"total": 1.5}}}, "live_node_progress.n.total"),
        ({"status": "running", "live_node_progress": {"n": {"message": 3}}}, "live_node_progress.n.message"),
        (
            {"status": "running", "live_node_progress": {"n": {"node_io": "x"}}},
            "live_node_progress.n.node_io",
        ),
        (
            {"status": "running", "live_node_progress": {"n": {"started_at": "now"}}},
            "live_node_progress.n.started_at",
        ),
        ({"status": "running", "live_node_progress": {" ": {}}}, "live_node_progress"),
        ({"status": "running", "live_logs": "a"}, "live_logs"),
        ({"status": "running", "live_logs": ["a", 3]}, "live_logs[1]"),
        ({"status": "running", "live_logs": ["x"] * 1001, "live_log_total_count": 2000}, "live_logs"),
        ({"status": "running", "live_logs": ["a", "b"], "live_log_total_count": 1}, "live_log_total_count"),
        ({"status": "running", "live_log_total_count": -3}, "live_log_total_count"),
        ({"status": "running", "dataset_lifecycle_events": [1]}, "dataset_lifecycle_events[0]"),
        (
            {"status": "running", "activity_observations": [{"observedAt": 1}]},
            "activity_observations[0].activityId",
        ),
        (
            {"status": "running", "activity_observations": [{"activityId": "a", "observedAt": "x"}]},
            "activity_observations[0].observedAt",
        ),
        ({"status": "running", "terminal_log_replay": []}, "terminal_log_replay"),
        ({"status": "running", "terminal_log_replay": {"lines": [1]}}, "terminal_log_replay.lines[0]"),
        (
            {"status": "running", "terminal_log_replay": {"lines": [], "dedupe_mode": "fuzzy"}},
            "terminal_log_replay.dedupe_mode",
        ),
        (
            {"status": "running", "terminal_log_replay": {"lines": ["a", "b"], "total_count": 1}},
            "terminal_log_replay.total_count",
        ),
        ({"status": "running", "last_checkpoint_at": "yesterday"}, "last_checkpoint_at"),
        ({"status": "running", "dropped_one_shot_events": -1}, "dropped_one_shot_events"),
        ({"status": "running", "live_logs": [7]}, "live_logs[0]"),
        ({"status": "running", "live_node_progress": {"n\x00": {}}}, "live_node_progress"),
        (
            {"status": "running", "live_node_progress": {"n": {"node_io": {"x": float("nan")}}}},
            "live_node_progress.n.node_io",
        ),
        ({"status": "running", "dataset_lifecycle_events": [{"k": "\x00"}]}, "dataset_lifecycle_events[0]"),
    ],
)
def test_parse_rejects_bad_fields_by_name(body: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        parse_upload("r1", body)
    assert exc.value.field == field


def test_total_count_defaults_to_tail_length() -> None:
    assert parse_upload("r", {"status": "running", "live_logs": ["a", "b"]}).live_log_total_count == 2


def test_exactly_1000_lines_is_allowed() -> None:
    upload = parse_upload("r", {"status": "running", "live_logs": ["x"] * 1000, "live_log_total_count": 1000})
    assert len(upload.live_logs) == 1000


# -- fence and order -----------------------------------------------------------------------------


def test_fence_attempt() -> None:
    assert fence_attempt("r", 2, None) == (2, False)
    assert fence_attempt("r", 2, 2) == (2, False)
    assert fence_attempt("r", 2, 3) == (3, True)
    with pytest.raises(StaleAttempt) as exc:
        fence_attempt("r", 2, 1)
    assert (exc.value.attempt, exc.value.current) == (1, 2)


def test_an_attempt_may_jump_at_most_the_step_ahead() -> None:
    assert fence_attempt("r", 0, 10) == (10, True)
    assert fence_attempt("r", 2, 12, max_step=10) == (12, True)
    assert fence_attempt("r", 2, 3, max_step=1) == (3, True)
    for current, uploaded, step in ((0, 11, 10), (2, 13, 10), (2, 4, 1), (0, 2**31 - 1, 10)):
        with pytest.raises(InvalidInput) as exc:
            fence_attempt("r", current, uploaded, max_step=step)
        assert exc.value.field == "producer_attempt"
    with pytest.raises(InvalidInput):
        plan_upload("r", IngestState(producer_attempt=1), _upload(producer_attempt=5), max_attempt_step=3)
    plan = plan_upload("r", IngestState(producer_attempt=1), _upload(producer_attempt=4), max_attempt_step=3)
    assert plan.state.producer_attempt == 4


def test_late_duplicate() -> None:
    assert not is_late_duplicate(0, None)
    assert not is_late_duplicate(5, None)
    assert not is_late_duplicate(0, 1)
    assert is_late_duplicate(3, 3)
    assert is_late_duplicate(3, 2)
    assert not is_late_duplicate(3, 4)


# -- positional logs -----------------------------------------------------------------------------


def positional_slice(delivered: int, lines: list[str] | tuple[str, ...], end: int) -> Any:
    """One source placed on a channel holding `delivered`: (lines appended, missing, new count)."""
    placed, appended, missing, count = place_logs(delivered, [LogSource(end - len(lines) + 1, lines)], 1)
    logs = tuple(event["line"] for _, _, event in placed if event["type"] == "log")
    assert len(logs) == appended
    return SimpleNamespace(lines=logs, missing=missing, delivered=count)


def test_positional_slice_cases() -> None:
    # Nothing held yet, the whole log in the tail.
    assert positional_slice(0, ["a", "b"], 2) == positional_slice(0, ("a", "b"), 2)
    s = positional_slice(0, ["a", "b"], 2)
    assert (s.lines, s.missing, s.delivered) == (("a", "b"), 0, 2)
    # Overlap: positions 2..4 in the tail, 3 held → only 4.
    s = positional_slice(3, ["b", "c", "d"], 4)
    assert (s.lines, s.missing, s.delivered) == (("d",), 0, 4)
    # A retransmission adds nothing.
    s = positional_slice(4, ["b", "c", "d"], 4)
    assert (s.lines, s.missing, s.delivered) == ((), 0, 4)
    # The tail starts beyond what is held: a gap.
    s = positional_slice(2, ["x", "y"], 10)
    assert (s.lines, s.missing, s.delivered) == (("x", "y"), 6, 10)
    # An older total never moves the count back.
    s = positional_slice(10, ["a"], 3)
    assert (s.lines, s.missing, s.delivered) == ((), 0, 10)
    # An empty tail with a higher count is all gap.
    s = positional_slice(1, [], 5)
    assert (s.lines, s.missing, s.delivered) == ((), 4, 5)


@settings(max_examples=60, deadline=None)
@given(
    log_len=st.integers(min_value=0, max_value=60),
    deliveries=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12)), max_size=15),
)
def test_positional_slices_reconstruct_the_log(log_len: int, deliveries: list[tuple[int, int]]) -> None:
    """Any order of tails of one growing log yields each position exactly once, as a line or a gap."""
    log = [f"line-{i + 1}" for i in range(log_len)]
    delivered = 0
    out: list[str | None] = []
    for end_raw, tail_len in deliveries:
        end = min(end_raw, log_len)
        tail = log[max(0, end - tail_len) : end]
        placed = positional_slice(delivered, tail, end)
        out.extend([None] * placed.missing)
        out.extend(placed.lines)
        delivered = placed.delivered
        assert delivered == len(out)
    assert len(out) == max([0, *(min(e, log_len) for e, _ in deliveries)])
    for position, line in enumerate(out):
        assert line is None or line == log[position]


def test_replay_end() -> None:
    assert replay_end(LogReplay(("a", "b"), "exact"), 50) == 2
    assert replay_end(LogReplay(("a", "b"), "positional"), 50) == 52
    assert replay_end(LogReplay(("a", "b"), "exact", total_count=9), 50) == 9


def test_replay_digest_binds_attempt_and_lines() -> None:
    assert replay_digest(1, ["a"]) == replay_digest(1, ("a",))
    assert replay_digest(1, ["a"]) != replay_digest(2, ["a"])
    assert replay_digest(1, ["a", "b"]) != replay_digest(1, ["ab"])


# -- steps ---------------------------------------------------------------------------------------


def _types(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["node_id"]) for e in events]


def test_step_events_for_a_new_node_in_order() -> None:
    events, changed, snap = diff_steps(
        {}, {"n": {"started_at": 1, "completed": 2, "total": 4, "completed_at": 9, "message": "m"}}, "running"
    )
    assert _types(events) == [("step.started", "n"), ("step.progress", "n"), ("step.completed", "n")]
    assert events[1] == {"type": "step.progress", "node_id": "n", "completed": 2, "total": 4, "message": "m"}
    assert events[2]["outcome"] == "completed"
    assert changed == ["n"]
    assert snap["n"]["completed_at"] == 9


def test_identical_reupload_makes_no_step_events() -> None:
    node = {"started_at": 1, "completed": 2, "total": 4, "updated_at": 5}
    _, _, snap = diff_steps({}, {"n": node}, "running")
    events, changed, snap2 = diff_steps(snap, {"n": dict(node, updated_at=6, message="new")}, "running")
    assert events == [] and changed == []
    # The snapshot still takes the new non-count fields.
    assert snap2["n"]["message"] == "new"


def test_only_counts_changes_make_progress() -> None:
    stored = {"n": {"started_at": 1, "completed": 2, "total": 4}}
    events, _, _ = diff_steps(stored, {"n": {"started_at": 1, "completed": 3, "total": 4}}, "running")
    assert _types(events) == [("step.progress", "n")]
    events, _, _ = diff_steps(
        stored, {"n": {"started_at": 1, "completed": 2, "total": 4, "active_rows": 1}}, "running"
    )
    assert _types(events) == [("step.progress", "n")]
    # A different started_at on an already started node is not a new start.
    events, _, _ = diff_steps(stored, {"n": {"started_at": 7, "completed": 2, "total": 4}}, "running")
    assert events == []


def test_settled_outcomes() -> None:
    stored = {"n": {"started_at": 1}}
    events, _, snap = diff_steps(stored, {"n": {"started_at": 1, "completed_at": 5}}, "running")
    assert events == [
        {
            "type": "step.completed",
            "node_id": "n",
            "state": "completed",
            "outcome": "completed",
            "completed_at": 5,
        }
    ]
    assert snap["n"]["state"] == "completed" and "reason" not in snap["n"]
    events, _, snap = diff_steps(
        stored, {"n": {"started_at": 1, "completed_at": 5, "node_io": {"error": "boom"}}}, "running"
    )
    assert events[0]["type"] == "step.failed" and events[0]["error"] == "boom"
    # The step's own error is its reason.
    assert events[0]["reason"] == snap["n"]["reason"] == "boom"
    events, _, snap = diff_steps(stored, {"n": {"started_at": 1, "completed_at": 5}}, "failed")
    assert (events[0]["type"], events[0]["outcome"]) == ("step.failed", "failed") and "error" not in events[0]
    assert snap["n"]["reason"] == "run failed"
    events, _, snap = diff_steps(stored, {"n": {"started_at": 1, "completed_at": 5}}, "failed", "no result")
    assert events[0]["reason"] == snap["n"]["reason"] == "run failed: no result"
    # node_io without an error (a completed docflow node) is a success.
    events, _, _ = diff_steps(stored, {"n": {"completed_at": 5, "node_io": {"error": None}}}, "completed")
    assert events[0]["outcome"] == "completed"


def test_an_explicit_state_wins_over_the_fields() -> None:
    node = {"started_at": 1, "completed_at": 5, "state": "cancelled", "reason": "asked to stop"}
    events, _, snap = diff_steps({"n": {"started_at": 1}}, {"n": node}, "running")
    assert events[0] == {
        "type": "step.cancelled",
        "node_id": "n",
        "state": "cancelled",
        "outcome": "cancelled",
        "completed_at": 5,
        "reason": "asked to stop",
    }
    assert snap["n"] == node
    # A step the reporter says is running is running, whatever its completion time says.
    events, _, snap = diff_steps({}, {"n": {"completed_at": 5, "state": "running"}}, "failed")
    assert events == [] and snap["n"]["state"] == "running"


def test_a_state_settled_already_is_not_announced_again() -> None:
    stored = {"n": {"started_at": 1, "state": "failed", "reason": "map failed"}}
    events, changed, _ = diff_steps(
        stored, {"n": {"started_at": 1, "state": "failed", "reason": "x"}}, "running"
    )
    assert events == [] and changed == []


def test_reopened_step_completes_again() -> None:
    stored = {"n": {"started_at": 1, "completed_at": 5}}
    events, _, snap = diff_steps(stored, {"n": {"started_at": 1}}, "running")
    assert events == [] and "completed_at" not in snap["n"]
    events, _, _ = diff_steps(snap, {"n": {"started_at": 1, "completed_at": 8}}, "running")
    assert _types(events) == [("step.completed", "n")]


def test_missing_nodes_are_kept_in_the_snapshot() -> None:
    _, _, snap = diff_steps({"a": {"completed": 1}}, {"b": {"completed": 2}}, "running")
    assert snap == {"a": {"completed": 1}, "b": {"completed": 2, "state": "pending"}}


# -- activity ------------------------------------------------------------------------------------


def test_newest_activity_wins() -> None:
    obs = [
        {"activityId": "a", "observedAt": 5, "state": "x"},
        {"activityId": "a", "observedAt": 3},
        {"activityId": "b", "observedAt": 1},
        {"activityId": "a", "observedAt": 5},
        {"activityId": "a", "observedAt": 6},
    ]
    events, marks = newer_activities({"b": 2}, obs)
    assert [(e["activity_id"], e["observed_at"]) for e in events] == [("a", 5), ("a", 6)]
    assert events[0]["observation"] == {"activityId": "a", "observedAt": 5, "state": "x"}
    assert marks == {"a": 6, "b": 2}


# -- the whole plan ------------------------------------------------------------------------------


def _upload(**kw: Any) -> StatusUpload:
    kw.setdefault("status", "running")
    return parse_upload("r", kw)


def test_stale_attempt_is_refused() -> None:
    with pytest.raises(StaleAttempt):
        plan_upload("r", IngestState(producer_attempt=3), _upload(producer_attempt=2))


def test_newer_attempt_gets_its_own_channel() -> None:
    state = IngestState(producer_attempt=1, last_upload_seq=9, live_log_count=40)
    plan = plan_upload(
        "r", state, _upload(producer_attempt=2, upload_seq=1, live_logs=["x"], live_log_total_count=1)
    )
    assert not plan.duplicate
    assert plan.events == ({"type": "log", "line": "x"},)
    assert (plan.state.producer_attempt, plan.state.last_upload_seq, plan.state.live_log_count) == (2, 1, 1)


def test_late_duplicate_changes_nothing() -> None:
    state = IngestState(producer_attempt=1, last_upload_seq=4, live_log_count=3)
    plan = plan_upload("r", state, _upload(producer_attempt=1, upload_seq=4, live_logs=["a"] * 9))
    assert plan.duplicate and plan.events == () and plan.state == state


def test_upload_without_seq_keeps_the_counter() -> None:
    plan = plan_upload("r", IngestState(last_upload_seq=4), _upload(live_logs=["a"]))
    assert not plan.duplicate and plan.state.last_upload_seq == 4


def test_gap_event_precedes_the_tail() -> None:
    plan = plan_upload(
        "r", IngestState(live_log_count=2), _upload(live_logs=["l9", "l10"], live_log_total_count=10)
    )
    assert plan.events[0] == {"type": "log.gap", "missing": 6, "after_position": 2, "producer_attempt": 0}
    assert [e["line"] for e in plan.events[1:]] == ["l9", "l10"]
    assert (plan.log_gap, plan.logs_appended, plan.state.live_log_count) == (6, 2, 10)


def test_event_order_within_an_upload() -> None:
    plan = plan_upload(
        "r",
        IngestState(),
        _upload(
            status="completed",
            live_logs=["a"],
            live_node_progress={"n": {"started_at": 1}},
            dataset_lifecycle_events=[{"phase": "created"}],
            activity_observations=[{"activityId": "x", "observedAt": 1}],
            terminal_log_replay={"lines": ["z"]},
        ),
    )
    assert [e["type"] for e in plan.events] == [
        "log",
        "step.started",
        "log",
        "dataset.lifecycle",
        "activity.observed",
        "step.completed",  # the completed run settles the step it leaves running, last
    ]
    assert plan.events[3] == {"type": "dataset.lifecycle", "event": {"phase": "created"}}
    assert plan.steps_changed == ("n",)


def test_step_transitions_go_after_the_log_line_they_followed() -> None:
    # The runner wrote: a, (n starts), b, c, (n completes, m starts), d.
    upload = _upload(
        status="running",
        live_logs=["a", "b", "c", "d"],
        live_node_progress={"n": {"started_at": 1, "completed_at": 2}, "m": {"started_at": 3}},
        step_positions={"n": {"started": 1, "settled": 3}, "m": {"started": 3}},
    )
    assert upload == _upload(**_UPLOAD_ORDER_BODY)
    plan = plan_upload("r", IngestState(), upload)
    assert [(e["type"], e.get("line") or e.get("node_id")) for e in plan.events] == [
        ("log", "a"),
        ("step.started", "n"),
        ("log", "b"),
        ("log", "c"),
        ("step.completed", "n"),
        ("step.started", "m"),
        ("log", "d"),
    ]
    # The same upload again (a lost answer, resent under a new number) finds nothing new.
    again = plan_upload("r", plan.state, _upload(**{**_UPLOAD_ORDER_BODY, "upload_seq": 2}))
    assert [e["type"] for e in again.events] == []


_UPLOAD_ORDER_BODY: dict[str, Any] = {
    "status": "running",
    "live_logs": ["a", "b", "c", "d"],
    "live_node_progress": {"n": {"started_at": 1, "completed_at": 2}, "m": {"started_at": 3}},
    "step_positions": {"n": {"started": 1, "settled": 3}, "m": {"started": 3}},
}


def test_a_transition_before_the_lines_already_held_goes_first_and_a_nodes_events_keep_their_order() -> None:
    upload = _upload(
        status="running",
        live_logs=["c", "d"],
        live_log_total_count=4,
        live_node_progress={"n": {"started_at": 1, "completed": 5, "completed_at": 2}},
        step_positions={"n": {"started": 1, "progress": 4, "settled": 2}},
    )
    plan = plan_upload("r", IngestState(live_log_count=2), upload)
    assert [e["type"] for e in plan.events] == [
        "step.started",
        "log",
        "log",
        "step.progress",
        "step.completed",
    ]


def test_a_transition_after_lines_the_replay_fills_goes_after_them() -> None:
    """The uploads of a reporter whose live tail lost lines 2 … 4: a running one held back at line
    1 (neither the lines past it nor the step that completed after line 4), then the run's end with
    the tail's last lines (5, 6) and the result's logs (1 … 6) filling the hole."""
    held = plan_upload(
        "r",
        IngestState(),
        _upload(
            upload_seq=1,
            live_logs=["a"],
            live_log_total_count=1,
            live_node_progress={"n": {"started_at": 1}},
            step_positions={"n": {"started": 1}},
        ),
    )
    end = plan_upload(
        "r",
        held.state,
        _upload(
            upload_seq=2,
            status="completed",
            live_logs=["e", "f"],
            live_log_total_count=6,
            live_node_progress={"n": {"started_at": 1, "completed_at": 2}},
            step_positions={"n": {"started": 1, "settled": 4}},
            terminal_log_replay={"lines": ["a", "b", "c", "d", "e", "f"], "total_count": 6},
        ),
    )
    assert [e.get("line", e["type"]) for e in (*held.events, *end.events)] == [
        "a",
        "step.started",
        "b",
        "c",
        "d",
        "step.completed",
        "e",
        "f",
    ]
    assert end.log_gap == 0


def test_transitions_without_positions_follow_the_live_lines_and_precede_the_replay() -> None:
    upload = _upload(
        status="completed",
        live_logs=["a"],
        live_node_progress={"n": {"started_at": 1}},
        terminal_log_replay={"lines": ["z"]},
    )
    plan = plan_upload("r", IngestState(), upload)
    # The run's end then settles the step it leaves running, last.
    assert [e.get("line", e["type"]) for e in plan.events] == ["a", "step.started", "z", "step.completed"]


def test_the_replay_fills_what_the_live_tail_lost_and_no_gap_is_left() -> None:
    log = [f"line {i}" for i in range(1, 5001)]
    # The tail held only the last 1,000 of 5,000 lines; the result carries all of them.
    upload = _upload(
        status="completed",
        live_logs=log[-1000:],
        live_log_total_count=5000,
        terminal_log_replay={"lines": log, "total_count": 5000},
    )
    plan = plan_upload("r", IngestState(live_log_count=10), upload)
    assert [e["line"] for e in plan.events] == log[10:]
    assert (plan.logs_appended, plan.log_gap, plan.state.live_log_count) == (4990, 0, 5000)


def test_positions_neither_the_tail_nor_the_replay_carry_are_each_one_gap() -> None:
    upload = _upload(
        status="completed",
        live_logs=["p9", "p10"],
        live_log_total_count=10,
        terminal_log_replay={"lines": ["p3", "p4"], "total_count": 4},
    )
    plan = plan_upload("r", IngestState(live_log_count=1), upload)
    assert [(e["type"], e.get("missing") or e.get("line")) for e in plan.events] == [
        ("log.gap", 1),
        ("log", "p3"),
        ("log", "p4"),
        ("log.gap", 4),
        ("log", "p9"),
        ("log", "p10"),
    ]
    assert (plan.log_gap, plan.logs_appended) == (5, 4)


def test_an_interrupted_upload_records_the_interruption_once_and_a_later_upload_the_resume() -> None:
    interrupted = _upload(
        status="interrupted",
        live_logs=["a"],
        interruption={"reason": "the reporter was interrupted (SIGTERM)", "signal": "SIGTERM"},
    )
    plan = plan_upload("r", IngestState(), interrupted)
    assert [e["type"] for e in plan.events] == ["log", "reporter.interrupted"]
    assert plan.events[-1] == {
        "type": "reporter.interrupted",
        "reason": "the reporter was interrupted (SIGTERM)",
        "signal": "SIGTERM",
    }
    assert plan.state.status == "interrupted"
    again = plan_upload("r", plan.state, _upload(status="interrupted", upload_seq=2, live_logs=["a"]))
    assert again.events == ()
    resumed = plan_upload(
        "r",
        again.state,
        _upload(status="completed", upload_seq=3, live_logs=["a", "b"], live_log_total_count=2),
    )
    assert [e["type"] for e in resumed.events] == ["reporter.resumed", "log"]
    assert resumed.events[0] == {"type": "reporter.resumed", "status": "completed"}
    # An ended run keeps its status whatever is uploaded to it.
    assert (
        plan_upload("r", replace(IngestState(), status="failed"), _upload(status="running")).state.status
        == "failed"
    )


def test_parse_interruption_and_step_positions() -> None:
    upload = parse_upload(
        "r",
        {
            "status": "interrupted",
            "interruption": {"reason": "bad \x00 byte", "signal": None},
            "step_positions": {"n": {"started": 3, "progress": None}},
        },
    )
    assert upload.interruption == Interruption(reason="bad \ufffd byte", signal=None)
    assert upload.step_positions == {"n": {"started": 3}}
    for body, field in (
        ({"interruption": "x"}, "interruption"),
        ({"interruption": {"reason": 3}}, "interruption.reason"),
        ({"step_positions": {"n": {"started": -1}}}, "step_positions.n.started"),
        ({"step_positions": {"n": 3}}, "step_positions.n"),
        ({"step_positions": {"": {}}}, "step_positions"),
    ):
        with pytest.raises(InvalidInput) as caught:
            parse_upload("r", {"status": "running", **body})
        assert caught.value.field == field


def test_positional_replay_continues_after_live_count() -> None:
    state = IngestState(live_log_count=2)
    upload = _upload(
        live_logs=["a", "b"], live_log_total_count=2, terminal_log_replay={"lines": ["r1", "r2"]}
    )
    plan = plan_upload("r", state, upload)
    assert [e["line"] for e in plan.events] == ["r1", "r2"]
    assert plan.state.live_log_count == 4
    # A retransmission of the same upload (no upload_seq) appends nothing.
    again = plan_upload("r", plan.state, upload)
    assert again.events == () and again.state == plan.state


def test_exact_replay_sits_at_offset_zero_and_absorbs_retransmission() -> None:
    # The live stream delivered 2 of 4 lines; the replay is the complete attempt buffer.
    state = IngestState(producer_attempt=1, live_log_count=2)
    upload = _upload(
        producer_attempt=1, terminal_log_replay={"lines": ["a", "b", "c", "d"], "dedupe_mode": "exact"}
    )
    plan = plan_upload("r", state, upload)
    assert [e["line"] for e in plan.events] == ["c", "d"]
    assert plan.state.replay_digest == replay_digest(1, ["a", "b", "c", "d"])
    again = plan_upload("r", plan.state, upload)
    assert again.events == () and again.state == plan.state
    # A different replay is not absorbed whole: its new positions are appended.
    longer = _upload(
        producer_attempt=1, terminal_log_replay={"lines": ["a", "b", "c", "d", "e"], "dedupe_mode": "exact"}
    )
    more = plan_upload("r", plan.state, longer)
    assert [e["line"] for e in more.events] == ["e"]


def test_exact_replay_absorbed_even_when_the_channel_was_reset() -> None:
    # Same digest, channel count lower than the replay (e.g. count not advanced by a replay with
    # an explicit total_count): exact mode must still absorb the retransmission.
    replay = {"lines": ["a", "b"], "dedupe_mode": "exact"}
    state = IngestState(producer_attempt=0, live_log_count=0, replay_digest=replay_digest(0, ["a", "b"]))
    plan = plan_upload("r", state, _upload(terminal_log_replay=replay))
    assert plan.events == ()
    # Positional mode does not use the digest: the lines go on the channel.
    plan = plan_upload("r", state, _upload(terminal_log_replay={"lines": ["a", "b"]}))
    assert [e["line"] for e in plan.events] == ["a", "b"]


# A model of a reporter: cumulative snapshots of one attempt.
_node_ids = st.sampled_from(["n1", "n2", "n3"])


@st.composite
def _upload_sequences(draw: st.DrawFn) -> list[dict[str, Any]]:
    uploads: list[dict[str, Any]] = []
    total = 0
    nodes: dict[str, dict[str, Any]] = {}
    for seq in range(1, draw(st.integers(1, 8)) + 1):
        total += draw(st.integers(0, 30))
        tail = [f"line-{i}" for i in range(max(1, total - 10) if total else 1, total + 1)] if total else []
        for node_id in draw(st.lists(_node_ids, max_size=2)):
            node = dict(nodes.get(node_id, {}))
            node.setdefault("started_at", seq)
            node["completed"] = node.get("completed", 0) + draw(st.integers(0, 3))
            if draw(st.booleans()):
                node["completed_at"] = seq
            nodes[node_id] = node
        uploads.append(
            {
                "status": "running",
                "upload_seq": seq,
                "producer_attempt": 1,
                "live_logs": tail,
                "live_log_total_count": total,
                "live_node_progress": {k: dict(v) for k, v in nodes.items()},
                "dataset_lifecycle_events": [{"seq": seq}] if draw(st.booleans()) else [],
                "activity_observations": [{"activityId": "a", "observedAt": seq}]
                if draw(st.booleans())
                else [],
            }
        )
    uploads[-1]["status"] = "completed"
    return uploads


def _deliver(uploads: list[dict[str, Any]]) -> tuple[IngestState, list[dict[str, Any]]]:
    state = IngestState()
    events: list[dict[str, Any]] = []
    for body in uploads:
        plan = plan_upload("r", state, parse_upload("r", body))
        state = plan.state
        events.extend(plan.events)
    return state, events


@settings(max_examples=50, deadline=None)
@given(uploads=_upload_sequences(), data=st.data())
def test_redelivery_is_idempotent(uploads: list[dict[str, Any]], data: st.DataObject) -> None:
    expected = _deliver(uploads)
    schedule: list[dict[str, Any]] = []
    for i, body in enumerate(uploads):
        schedule.append(body)
        for _ in range(data.draw(st.integers(0, 2))):
            schedule.append(uploads[data.draw(st.integers(0, i))])
    assert _deliver(schedule) == expected


def test_free_text_is_repaired_not_refused() -> None:
    upload = parse_upload(
        "r",
        {
            "status": "running",
            "live_logs": ["bad \x00 byte", "lone \ud800"],
            "live_node_progress": {"n": {"message": "m\x00"}},
            "terminal_log_replay": {"lines": ["r\udfff"]},
        },
    )
    assert upload.live_logs == ("bad \ufffd byte", "lone \ufffd")
    assert upload.live_node_progress["n"]["message"] == "m\ufffd"
    assert upload.terminal_log_replay is not None and upload.terminal_log_replay.lines == ("r\ufffd",)


def test_json_nested_deeper_than_a_stored_value_may_is_refused_naming_the_field() -> None:
    deep: Any = 1
    for _ in range(61):
        deep = [deep]
    with pytest.raises(InvalidInput, match="nests deeper than 59") as exc:
        parse_upload("r", {"status": "running", "dataset_lifecycle_events": [{"d": deep}]})
    assert exc.value.field == "dataset_lifecycle_events[0]"


# -- the pipeline's steps ------------------------------------------------------------------------


def test_pipeline_steps_show_every_step_pending_in_pipeline_order() -> None:
    started = {"started_at": 5, "completed": 1}
    upload = _upload(pipeline_steps=["load", "map", "notify"], live_node_progress={"map": started})
    plan = plan_upload("r", IngestState(), upload)
    assert plan.state.live_node_progress == {
        "load": {"position": 0, "state": "pending"},
        "map": {**started, "state": "running", "position": 1},
        "notify": {"position": 2, "state": "pending"},
    }
    # Only the step that reported makes events; a pending step is no news.
    assert [e["type"] for e in plan.events] == ["step.started", "step.progress"]
    assert plan.steps_changed == ("map",)


def test_a_replaced_node_keeps_its_position_and_a_node_cannot_set_one() -> None:
    state = IngestState(live_node_progress={"load": {"position": 0}, "map": {"position": 1}})
    nodes = {"load": {"completed": 3, "position": 9}}
    assert plan_upload(
        "r", state, _upload(pipeline_steps=["load", "map"], live_node_progress=nodes)
    ).state.live_node_progress == {
        "load": {"completed": 3, "state": "pending", "position": 0},
        "map": {"position": 1},
    }
    # Without the list too: the uploaded node's own `position` is ignored, the stored one kept.
    alone = plan_upload("r", state, _upload(live_node_progress={"map": {"completed": 1, "position": 0}}))
    assert alone.state.live_node_progress == {
        "load": {"position": 0},
        "map": {"completed": 1, "state": "pending", "position": 1},
    }


@pytest.mark.parametrize(
    ("steps", "field", "problem"),
    [
        ("load", "pipeline_steps", "must be"),
        (["load", ""], "pipeline_steps[1]", ""),
        (["load", 3], "pipeline_steps[1]", ""),
        (["load", "map", "load"], "pipeline_steps", "names step 'load' twice"),
        (["load", "map", "map"], "pipeline_steps", "names step 'map' twice"),
    ],
)
def test_bad_pipeline_steps_are_refused_by_name(steps: Any, field: str, problem: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(problem) if problem else None) as refused:
        _upload(pipeline_steps=steps)
    assert refused.value.field == field


# -- the run's error -------------------------------------------------------------------------------


def test_the_runs_error_is_free_text_repaired_and_bounded() -> None:
    """Like a log line: unstorable characters repaired, an over-long one cut to a line's bound,
    absent or null none; only a value that is not text is refused, by name."""
    assert _upload(status="failed", error="bad \x00 byte").error == "bad \ufffd byte"
    long = _upload(status="failed", error="e" * (MAX_LOG_LINE_BYTES + 1)).error
    assert long is not None and long.startswith("eee") and len(long.encode()) <= MAX_LOG_LINE_BYTES
    assert _upload(status="failed").error is None
    assert _upload(status="failed", error=None).error is None
    with pytest.raises(InvalidInput) as refused:
        _upload(status="failed", error=42)
    assert refused.value.field == "error"


@pytest.mark.parametrize("count", [MAX_PIPELINE_STEPS - 1, MAX_PIPELINE_STEPS, MAX_PIPELINE_STEPS + 1])
def test_pipeline_steps_at_most_the_limit(count: int) -> None:
    steps = [f"s{i}" for i in range(count)]
    if count > MAX_PIPELINE_STEPS:
        with pytest.raises(InvalidInput, match="pipeline_steps"):
            _upload(pipeline_steps=steps)
    else:
        assert _upload(pipeline_steps=steps).pipeline_steps == tuple(steps)
