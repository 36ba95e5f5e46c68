"""Status-ingestion rules at their edges: a step completes once, a replay's count at its bound, the
answer's counts when the tail and a replay arrive together, and the look at an upload's order key
before the body is validated.

Each test names the rule it checks; with test_rules.py they are what the mutation run
(`python -m tests.mutation` on `ledger/ingest/upload.py` and `ledger/ingest/rules.py`) measures.
"""

from __future__ import annotations

from typing import Any

import pytest

from ledger import validate
from ledger.errors import InvalidInput, StaleAttempt
from ledger.ingest.rules import (
    IngestState,
    LogSource,
    diff_steps,
    fence_attempt,
    in_runner_order,
    place_logs,
    place_steps,
    plan_upload,
)
from ledger.ingest.upload import Interruption, UploadKey, parse_node, parse_upload, upload_key
from ledger.validate import INT32_MAX, INT64_MAX, LIVE_LOG_TAIL_LIMIT, MAX_EPOCH_MS, MAX_PIPELINE_STEPS


def _upload(**kw: Any) -> Any:
    kw.setdefault("status", "running")
    return parse_upload("r", kw)


# -- steps ---------------------------------------------------------------------------------------


def test_a_completed_step_completes_once_across_later_uploads() -> None:
    """`step.completed` is appended when `completed_at` first appears; later uploads that still carry
    it (every upload carries the whole snapshot) append no second one."""
    node = {"started_at": 1, "completed_at": 5, "completed": 3, "total": 3}
    first, _, snapshot = diff_steps({}, {"n": node}, "running")
    assert [e["type"] for e in first] == ["step.started", "step.progress", "step.completed"]
    again, changed, _ = diff_steps(snapshot, {"n": dict(node)}, "completed")
    assert again == [] and changed == []


def test_a_step_that_completes_later_gets_its_completion_then() -> None:
    """A node stored without `completed_at` completes in the upload that first carries it."""
    events, changed, _ = diff_steps(
        {"n": {"started_at": 1}}, {"n": {"started_at": 1, "completed_at": 4}}, "running"
    )
    assert events == [
        {
            "type": "step.completed",
            "node_id": "n",
            "state": "completed",
            "outcome": "completed",
            "completed_at": 4,
        }
    ]
    assert changed == ["n"]


def test_step_progress_carries_counts_and_texts_that_are_set() -> None:
    """`step.progress` names the node's counts and its message/namespace, only the ones it has."""
    events, _, _ = diff_steps(
        {},
        {"n": {"completed": 2, "total": 4, "message": "2 / 4", "artifact_table_namespace": "t_1"}},
        "running",
    )
    assert events == [
        {
            "type": "step.progress",
            "node_id": "n",
            "completed": 2,
            "total": 4,
            "message": "2 / 4",
            "artifact_table_namespace": "t_1",
        }
    ]


# -- terminal log replay -------------------------------------------------------------------------


@pytest.mark.parametrize("lines", [1, 2])
def test_replay_total_count_equal_to_its_lines_is_accepted(lines: int) -> None:
    """`total_count` counts the attempt's lines including the replay: equal to the replay's own lines
    (the replay is the whole log) is valid; one less is refused naming the field."""
    replay = {"lines": ["x"] * lines, "total_count": lines}
    assert parse_upload("r", {"status": "completed", "terminal_log_replay": replay}).terminal_log_replay
    with pytest.raises(InvalidInput) as refused:
        parse_upload(
            "r", {"status": "completed", "terminal_log_replay": {**replay, "total_count": lines - 1}}
        )
    assert refused.value.field == "terminal_log_replay.total_count"


def test_answer_counts_lines_and_gaps_of_the_tail_and_the_replay_together() -> None:
    """The answer's `logs_appended` and `log_gap` add up what the live tail and the terminal replay
    placed in one upload: tail positions 4-5 after 1 held (gap 2), then replay positions 8-9 (gap 2)."""
    state = IngestState(live_log_count=1)
    upload = _upload(
        status="completed",
        live_logs=["l4", "l5"],
        live_log_total_count=5,
        terminal_log_replay={"lines": ["r8", "r9"], "total_count": 9},
    )
    plan = plan_upload("r", state, upload)
    assert (plan.logs_appended, plan.log_gap, plan.state.live_log_count) == (4, 4, 9)
    gaps = [e for e in plan.events if e["type"] == "log.gap"]
    assert [(g["missing"], g["after_position"]) for g in gaps] == [(2, 1), (2, 5)]


def test_a_replay_already_absorbed_adds_nothing_to_the_answer_counts() -> None:
    """An exact replay absorbed whole (same attempt and lines as the last one) appends no line and
    reports no gap; the tail's own lines still count."""
    replay = {"lines": ["a", "b"], "dedupe_mode": "exact"}
    first = plan_upload("r", IngestState(), _upload(status="completed", terminal_log_replay=replay))
    again = plan_upload(
        "r",
        first.state,
        _upload(status="completed", live_logs=["c"], live_log_total_count=3, terminal_log_replay=replay),
    )
    assert (again.logs_appended, again.log_gap) == (1, 0)


# -- the upload's order key, read before validation ------------------------------------------------


def test_upload_key_reads_seq_attempt_and_heartbeat() -> None:
    """The key is `(producer_attempt, upload_seq)` and whether `last_checkpoint_at` is carried, read
    whatever the rest of the body holds."""
    body = {"run_id": "r", "upload_seq": 3, "producer_attempt": 2, "last_checkpoint_at": 0, "status": 7}
    key = upload_key("r", body)
    assert key == UploadKey(upload_seq=3, producer_attempt=2, last_checkpoint_at=0)
    assert key.heartbeat and key.places
    key = upload_key("r", {"upload_seq": 1.0})
    assert key == UploadKey(upload_seq=1)
    assert not key.heartbeat and key.places


@pytest.mark.parametrize(
    ("body", "refused"),
    [
        ([], None),
        ({}, None),
        ({"upload_seq": None}, None),
        ({"run_id": "other", "upload_seq": 1}, "run_id: 'other' does not match the run 'r' in the URL"),
        ({"upload_seq": 0}, "upload_seq: must be >= 1"),
        ({"upload_seq": "1"}, "upload_seq: must be an integer, got str"),
        ({"upload_seq": 1, "producer_attempt": -1}, "producer_attempt: must be >= 0"),
        (
            {"upload_seq": 1, "producer_attempt": INT32_MAX + 1},
            f"producer_attempt: must be <= {INT32_MAX}",
        ),
        ({"upload_seq": 1, "last_checkpoint_at": -1}, "last_checkpoint_at: must be >= 0"),
    ],
)
def test_upload_key_places_nothing_without_a_valid_seq_or_with_a_malformed_key_field(
    body: object, refused: str | None
) -> None:
    """The key places no upload (so full validation decides) when the body is not an object, names
    another run, has no `upload_seq` >= 1, or a key field is out of its bounds; the refusal it keeps
    is the one the full validation raises."""
    key = upload_key("r", body)
    assert not key.places
    kept = key.foreign_run_id or key.malformed
    assert (None if kept is None else str(kept)) == refused


def test_upload_key_holds_no_field_when_one_is_malformed_and_all_with_a_foreign_run_id() -> None:
    """A malformed key field leaves the key without fields (it places nothing); a foreign run id is
    refused first, and the fields read are kept."""
    for body in (
        {"upload_seq": 0, "producer_attempt": 1, "last_checkpoint_at": 1},
        {"upload_seq": 2, "producer_attempt": -1, "last_checkpoint_at": 1},
        {"upload_seq": 2, "producer_attempt": 1, "last_checkpoint_at": -1},
    ):
        key = upload_key("r", body)
        assert (key.upload_seq, key.producer_attempt, key.last_checkpoint_at) == (None, None, None), body
        assert key.malformed is not None and not key.heartbeat and not key.places
    key = upload_key("r", {"run_id": "s", "upload_seq": 2, "producer_attempt": 1, "last_checkpoint_at": 3})
    assert (key.upload_seq, key.producer_attempt, key.last_checkpoint_at, key.malformed) == (2, 1, 3, None)
    assert not key.places


@pytest.mark.parametrize(
    ("body", "refused"),
    [
        # The body's run id is checked right after the body itself, before any other field.
        (
            {"run_id": "s", "status": "done", "upload_seq": 0},
            "run_id: 's' does not match the run 'r' in the URL",
        ),
        # A key field comes after the status, the nodes, the logs, the lists and the replay ...
        (
            {"status": "done", "upload_seq": 0},
            "status: must be one of running, interrupted, completed, failed, cancelled, got 'done'",
        ),
        (
            {"status": "running", "live_logs": 3, "producer_attempt": -1},
            "live_logs: must be a list of strings, got int",
        ),
        # ... and before `dropped_one_shot_events`.
        ({"status": "running", "upload_seq": 0, "dropped_one_shot_events": -1}, "upload_seq: must be >= 1"),
        (
            {"status": "running", "last_checkpoint_at": -1, "dropped_one_shot_events": -1},
            "last_checkpoint_at: must be >= 0",
        ),
        ({"status": "running", "dropped_one_shot_events": -1}, "dropped_one_shot_events: must be >= 0"),
    ],
)
def test_parse_upload_names_the_first_bad_field_in_the_body_s_order(
    body: dict[str, Any], refused: str
) -> None:
    """The key read before the body does not change which bad field is named: the first of the
    body's order, as when every field was read in turn."""
    for key in (None, upload_key("r", body)):
        with pytest.raises(InvalidInput) as caught:
            parse_upload("r", body, key)
        assert str(caught.value) == refused


def test_parse_upload_takes_the_key_as_read() -> None:
    """The key's fields are the key's: not read from the body again."""
    key = UploadKey(upload_seq=7, producer_attempt=3, last_checkpoint_at=9)
    upload = parse_upload("r", {"status": "running", "upload_seq": 1}, key)
    assert (upload.upload_seq, upload.producer_attempt, upload.last_checkpoint_at) == (7, 3, 9)
    upload = parse_upload(
        "r", {"status": "running", "upload_seq": 1, "producer_attempt": 2, "last_checkpoint_at": 4}
    )
    assert (upload.upload_seq, upload.producer_attempt, upload.last_checkpoint_at) == (1, 2, 4)


def test_upload_key_bounds_are_the_ones_validation_applies() -> None:
    """At the bounds the key is read: `upload_seq` 1, attempt 0 and INT32_MAX, the body's own run."""
    key = upload_key("r", {"run_id": "r", "upload_seq": 1, "producer_attempt": 0})
    assert (key, key.places) == (UploadKey(upload_seq=1, producer_attempt=0), True)
    key = upload_key("r", {"upload_seq": 1, "producer_attempt": INT32_MAX})
    assert (key, key.places) == (UploadKey(upload_seq=1, producer_attempt=INT32_MAX), True)


# -- parsing -------------------------------------------------------------------------------------


def test_counts_and_attempts_start_at_zero() -> None:
    """0 is a valid attempt, log count, checkpoint time and drop count (only `upload_seq` starts at 1)."""
    upload = parse_upload(
        "r",
        {
            "status": "running",
            "producer_attempt": 0,
            "live_log_total_count": 0,
            "last_checkpoint_at": 0,
            "dropped_one_shot_events": 0,
        },
    )
    assert (upload.producer_attempt, upload.live_log_total_count, upload.last_checkpoint_at) == (0, 0, 0)


def test_a_replay_without_a_mode_or_with_an_empty_one_is_positional() -> None:
    """Absent, null or empty `dedupe_mode` means the default, positional."""
    for replay in (
        {"lines": ["x"]},
        {"lines": ["x"], "dedupe_mode": None},
        {"lines": ["x"], "dedupe_mode": ""},
    ):
        parsed = parse_upload("r", {"status": "completed", "terminal_log_replay": replay}).terminal_log_replay
        assert parsed is not None and parsed.dedupe_mode == "positional"


@pytest.mark.parametrize("name", ["dataset_lifecycle_events", "activity_observations"])
def test_a_one_shot_list_that_is_not_a_list_is_refused_naming_it(name: str) -> None:
    """The one-shot event lists must be lists; anything else is refused naming the field."""
    with pytest.raises(InvalidInput) as refused:
        parse_upload("r", {"status": "running", name: {"a": 1}})
    assert refused.value.field == name


def test_step_started_event_carries_the_start_time() -> None:
    """`step.started` names the node and when it started."""
    events, _, _ = diff_steps({}, {"n": {"started_at": 7}}, "running")
    assert events == [{"type": "step.started", "node_id": "n", "started_at": 7}]


# -- the whole plan ------------------------------------------------------------------------------


def test_a_stale_attempt_names_the_run() -> None:
    """The refusal of a stale attempt names the run, the refused attempt and the current one."""
    with pytest.raises(StaleAttempt) as refused:
        plan_upload("run-9", IngestState(producer_attempt=3), _upload(producer_attempt=2))
    assert (refused.value.run_id, refused.value.attempt, refused.value.current) == ("run-9", 2, 3)


def test_a_step_completing_in_a_failed_upload_fails() -> None:
    """The plan passes the upload's status to the step diff: a node that completes in a `failed`
    upload is recorded failed."""
    plan = plan_upload(
        "r", IngestState(), _upload(status="failed", live_node_progress={"n": {"completed_at": 5}})
    )
    assert [(e["type"], e["outcome"]) for e in plan.events if e["type"].startswith("step.")] == [
        ("step.failed", "failed")
    ]


def test_the_plan_stores_the_new_snapshot_and_watermarks() -> None:
    """The state to store holds the nodes after the upload and the activity watermarks it moved."""
    plan = plan_upload(
        "r",
        IngestState(live_node_progress={"a": {"completed": 1}}),
        _upload(
            live_node_progress={"b": {"completed": 2}},
            activity_observations=[{"activityId": "x", "observedAt": 4}],
        ),
    )
    assert plan.state.live_node_progress == {"a": {"completed": 1}, "b": {"completed": 2, "state": "pending"}}
    assert plan.state.activity_watermarks == {"x": 4}


def test_an_upload_without_a_replay_keeps_the_stored_replay_digest() -> None:
    """The digest of the last exact replay survives uploads without one, so that replay is still
    absorbed when it is sent again later."""
    replay = {"lines": ["a", "b"], "dedupe_mode": "exact"}
    first = plan_upload("r", IngestState(), _upload(status="completed", terminal_log_replay=replay))
    between = plan_upload("r", first.state, _upload(status="completed"))
    assert between.state.replay_digest == first.state.replay_digest
    again = plan_upload("r", between.state, _upload(status="completed", terminal_log_replay=replay))
    assert again.events == ()


def test_a_replay_gap_names_the_attempt() -> None:
    """A gap before the replay's lines names the producer attempt, as a gap before the tail does."""
    plan = plan_upload(
        "r",
        IngestState(producer_attempt=2),
        _upload(
            producer_attempt=2, status="completed", terminal_log_replay={"lines": ["z"], "total_count": 4}
        ),
    )
    assert [(e["missing"], e["producer_attempt"]) for e in plan.events if e["type"] == "log.gap"] == [(3, 2)]


def test_upload_key_heartbeat_has_no_upper_bound() -> None:
    """`last_checkpoint_at` is not stored, so no column bound applies: past the bigint range it is
    still a heartbeat."""
    key = upload_key("r", {"upload_seq": 1, "last_checkpoint_at": 2**63})
    assert key == UploadKey(upload_seq=1, last_checkpoint_at=2**63)
    assert key.heartbeat


def test_unstored_counters_have_no_upper_bound() -> None:
    """`last_checkpoint_at` and `dropped_one_shot_events` are not stored: past the bigint range they
    are still accepted."""
    upload = parse_upload(
        "r", {"status": "running", "last_checkpoint_at": 2**63, "dropped_one_shot_events": 2**63}
    )
    assert (upload.last_checkpoint_at, upload.dropped_one_shot_events) == (2**63, 2**63)


def test_a_replay_may_end_exactly_at_the_last_log_position() -> None:
    """The log position is a bigint: a replay whose last line lands on INT64_MAX is accepted, one
    that would land past it is refused naming the replay."""
    body = {
        "status": "completed",
        "live_log_total_count": INT64_MAX - 1,
        "terminal_log_replay": {"lines": ["x"]},
    }
    assert parse_upload("r", body).terminal_log_replay is not None
    with pytest.raises(InvalidInput) as refused:
        parse_upload("r", {**body, "live_log_total_count": INT64_MAX})
    assert refused.value.field == "terminal_log_replay"


# -- rules the mutation check asked for ----------------------------------------------------------


def test_an_interruption_may_say_its_signal_without_a_reason_and_its_reason_without_a_signal() -> None:
    """Both of an interruption's fields are optional plain text."""
    upload = _upload(status="interrupted", interruption={"signal": "SIGTERM"})
    assert upload.interruption == Interruption(reason=None, signal="SIGTERM")
    upload = _upload(status="interrupted", interruption={"reason": "worker stopped"})
    assert upload.interruption == Interruption(reason="worker stopped", signal=None)


@pytest.mark.parametrize(
    ("interruption", "refused"),
    [
        ({"reason": 5}, "interruption.reason: must be a string or null, got int"),
        ({"signal": 15}, "interruption.signal: must be a string or null, got int"),
        ([], "interruption: must be an object, got list"),
    ],
)
def test_an_interruption_field_that_is_not_text_is_refused_by_its_name(
    interruption: object, refused: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        _upload(status="interrupted", interruption=interruption)
    assert str(caught.value) == refused


def test_step_positions_that_are_not_an_object_are_refused_by_name() -> None:
    with pytest.raises(InvalidInput) as caught:
        _upload(step_positions=[])
    assert str(caught.value) == "step_positions: must be an object, got list"


def test_no_log_source_places_nothing_and_keeps_the_channel_s_count() -> None:
    """With nothing to place, the channel holds what it held: no line, no gap."""
    assert place_logs(5, [], 1) == ([], 0, 0, 5)


def test_a_line_and_a_gap_go_before_the_step_placed_after_that_position_whichever_group_comes_first() -> None:
    """The runner's order is decided by position and rank, not by the order the groups are given: a
    log line comes before the step transition that followed it, and a gap standing where a line
    went missing comes before a transition that followed that line."""
    lines, _, _, _ = place_logs(0, [LogSource(2, ["two"])], 1)  # line 1 lost: a gap, then line 2
    steps_after = place_steps(
        [
            {"type": "step.started", "node_id": "a"},
            {"type": "step.started", "node_id": "b"},
        ],
        {"a": {"started": 1}, "b": {"started": 2}},
        0,
    )
    expected = [
        {"type": "log.gap", "missing": 1, "after_position": 0, "producer_attempt": 1},
        {"type": "step.started", "node_id": "a"},
        {"type": "log", "line": "two"},
        {"type": "step.started", "node_id": "b"},
    ]
    assert in_runner_order(lines, steps_after) == expected
    assert in_runner_order(steps_after, lines) == expected


def test_a_step_failing_in_a_failed_upload_gives_the_run_s_error_as_its_reason() -> None:
    """A node completing in an upload whose status is `failed`, with no error of its own, failed
    for the run's reason: the upload's terminal error."""
    plan = plan_upload(
        "r",
        IngestState(),
        _upload(
            status="failed", error="disk full", live_node_progress={"n": {"started_at": 1, "completed_at": 2}}
        ),
    )
    failed = [event for event in plan.events if event["type"] == "step.failed"]
    assert failed == [
        {
            "type": "step.failed",
            "node_id": "n",
            "state": "failed",
            "outcome": "failed",
            "completed_at": 2,
            "reason": "run failed: disk full",
        }
    ]


@pytest.mark.parametrize(
    ("body", "refused"),
    [
        (
            {"live_node_progress": {"": {}}},
            "live_node_progress: node ids must be non-empty strings without NUL or lone surrogates",
        ),
        (
            {"live_node_progress": {"a\x00b": {}}},
            "live_node_progress: node ids must be non-empty strings without NUL or lone surrogates",
        ),
        (
            {"live_logs": ["x"] * (LIVE_LOG_TAIL_LIMIT + 1)},
            f"live_logs: holds {LIVE_LOG_TAIL_LIMIT + 1} lines; the tail is at most {LIVE_LOG_TAIL_LIMIT}",
        ),
        (
            {"live_logs": ["x", "y"], "live_log_total_count": 1},
            "live_log_total_count: 1 is smaller than the 2-line tail",
        ),
        (
            {"live_log_total_count": INT64_MAX, "terminal_log_replay": {"lines": ["z"]}},
            f"terminal_log_replay: would place lines beyond log position {INT64_MAX}",
        ),
    ],
)
def test_an_upload_s_node_ids_tail_and_replay_are_refused_in_words_a_person_reads(
    body: dict[str, Any], refused: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        _upload(**body)
    assert str(caught.value) == refused


def test_a_replay_ending_at_the_last_log_position_is_taken() -> None:
    """The bound itself: a replay whose last line lands on the last position the count can hold."""
    upload = _upload(live_log_total_count=INT64_MAX - 1, terminal_log_replay={"lines": ["z"]})
    assert upload.terminal_log_replay is not None


def test_a_node_s_plain_integers_within_their_bounds_are_taken_without_the_general_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hot path's shortcut: a count or a time that is a plain int from 0 up to its bound is what
    the general check (`validate.node_field`) would return, so it is taken as is; anything else still
    goes through the general check."""
    checked: list[str] = []
    real = validate.node_field

    def general(name: str, key: str, value: object) -> object:
        checked.append(key)
        return real(name, key, value)

    monkeypatch.setattr(validate, "node_field", general)
    at_bounds = {"total": 0, "completed": INT64_MAX, "started_at": 0, "completed_at": MAX_EPOCH_MS}
    assert parse_node("n", at_bounds) == at_bounds
    assert checked == []
    parse_node("n", {"total": 2.0, "message": "m"})
    assert checked == ["total", "message"]


def test_an_unknown_replay_mode_is_refused_naming_the_modes() -> None:
    with pytest.raises(InvalidInput) as caught:
        _upload(status="completed", terminal_log_replay={"lines": ["a"], "dedupe_mode": "fuzzy"})
    assert str(caught.value) == "terminal_log_replay.dedupe_mode: must be one of exact, positional"


def test_an_attempt_too_far_ahead_is_refused_saying_how_far_and_from_where() -> None:
    with pytest.raises(InvalidInput) as caught:
        fence_attempt("r", 1, 12)
    assert str(caught.value) == "producer_attempt: 12 is more than 10 above the run's current attempt 1"


def test_a_replay_count_below_its_lines_is_refused_in_words_a_person_reads() -> None:
    with pytest.raises(InvalidInput) as caught:
        _upload(status="completed", terminal_log_replay={"lines": ["a", "b"], "total_count": 1})
    assert str(caught.value) == "terminal_log_replay.total_count: is smaller than the number of lines"


def test_a_pipeline_longer_than_its_bound_is_refused_saying_both_lengths() -> None:
    steps = [f"s{n}" for n in range(MAX_PIPELINE_STEPS + 1)]
    with pytest.raises(InvalidInput) as caught:
        _upload(pipeline_steps=steps)
    assert str(caught.value) == (
        f"pipeline_steps: holds {MAX_PIPELINE_STEPS + 1} steps; at most {MAX_PIPELINE_STEPS}"
    )
    assert _upload(pipeline_steps=steps[:-1]).pipeline_steps == tuple(steps[:-1])
