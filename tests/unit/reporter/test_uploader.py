"""The coalescing single-flight uploader: merging, throttling, failures, fencing, cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ledger.errors import DuplicateUpload, LedgerError, LedgerUnavailable, RunTerminal, StaleAttempt
from reporter.state import ProgressState
from reporter.uploader import CoalescingUploader, interval_for_total_rows
from tests.unit.reporter.fakes import FakeClock, FakeTransport, boom, settle


def make(
    clock: FakeClock | None = None, transport: FakeTransport | None = None, **kwargs: Any
) -> tuple[CoalescingUploader, ProgressState, FakeTransport, FakeClock]:
    clock = clock or FakeClock()
    transport = transport or FakeTransport()
    state = ProgressState(now_ms=clock.wall_ms, max_pending_one_shot=kwargs.pop("max_pending_one_shot", 100))
    uploader = CoalescingUploader(
        run_id="r1",
        state=state,
        transport=transport,
        producer_attempt=3,
        clock=clock.monotonic,
        sleep=clock.sleep,
        wall_clock_ms=clock.wall_ms,
        **kwargs,
    )
    return uploader, state, transport, clock


def touch(state: ProgressState, completed: int = 1) -> None:
    state.set_node_progress("n", {"completed": completed})


@pytest.mark.parametrize(
    ("rows", "seconds"),
    [
        (0, 1.5),
        (9_999, 1.5),
        (10_000, 8.0),
        (99_999, 8.0),
        (100_000, 15.0),
        (999_999, 15.0),
        (1_000_000, 30.0),
    ],
)
async def test_throttle_boundaries(rows: int, seconds: float) -> None:
    assert interval_for_total_rows(rows) == seconds
    uploader, state, transport, clock = make(trailing_flush=False)
    state.note_total_rows(rows)
    touch(state, 1)
    await uploader.flush()
    touch(state, 2)
    await clock.advance(seconds - 0.001)
    await uploader.flush()
    assert len(transport.payloads) == 1  # still inside the interval
    await clock.advance(0.001)
    await uploader.flush()
    assert len(transport.payloads) == 2
    assert transport.payloads[-1]["live_node_progress"]["n"]["completed"] == 2


async def test_forced_flush_bypasses_the_interval_and_clean_best_effort_sends_nothing() -> None:
    uploader, state, transport, _ = make()
    touch(state)
    await uploader.flush()
    await uploader.flush()  # nothing changed
    assert len(transport.payloads) == 1
    await uploader.flush(force=True)  # forced: even without changes, even inside the interval
    assert len(transport.payloads) == 2


async def test_payload_shape_and_upload_seq() -> None:
    uploader, state, transport, clock = make(initial_upload_seq=4)
    touch(state, 7)
    state.append_log("hello")
    state.add_lifecycle_event({"type": "dataset.lifecycle", "phase": "created"})
    await uploader.flush(force=True)
    assert transport.payloads == [
        {
            "run_id": "r1",
            "upload_seq": 5,
            "status": "running",
            "producer_attempt": 3,
            "live_node_progress": {"n": {"completed": 7, "updated_at": clock.wall_ms()}},
            "live_logs": ["hello"],
            "live_log_total_count": 1,
            "dataset_lifecycle_events": [{"type": "dataset.lifecycle", "phase": "created"}],
            "activity_observations": [],
            "terminal_log_replay": None,
            "last_checkpoint_at": clock.wall_ms(),
            # Where the node last changed on the log: after no line yet.
            "step_positions": {"n": {"progress": 0}},
        }
    ]


async def test_single_flight_and_merging_of_pending_requests() -> None:
    uploader, state, transport, _ = make()
    transport.hold()
    touch(state, 1)
    first = asyncio.create_task(uploader.flush(force=True))
    await settle()
    assert transport.in_flight == 1
    touch(state, 2)
    replay = {"lines": ["x"], "dedupe_mode": "positional", "total_count": 1}
    waiters = [
        asyncio.create_task(
            uploader.flush(force=True, status="completed", required=True, terminal_log_replay=replay)
        ),
        asyncio.create_task(uploader.flush(force=True, status="running")),  # terminal status still wins
        asyncio.create_task(uploader.flush(force=True)),  # replay is kept
    ]
    await settle()
    assert transport.started == 1  # the others wait as one pending request
    touch(state, 3)  # folded after the merge: the pending upload still carries it
    transport.release()
    await asyncio.gather(first, *waiters)
    assert transport.max_in_flight == 1
    assert [p["upload_seq"] for p in transport.payloads] == [1, 2]
    merged = transport.payloads[1]
    assert merged["status"] == "completed"
    assert merged["terminal_log_replay"] == replay
    assert merged["live_node_progress"]["n"]["completed"] == 3


async def test_every_waiter_resolves_only_after_the_merged_upload() -> None:
    uploader, state, transport, _ = make()
    transport.hold()
    touch(state)
    first = asyncio.create_task(uploader.flush(force=True))
    await settle()
    second = asyncio.create_task(uploader.flush(force=True))
    transport.release()
    transport.hold()  # hold the merged upload
    await settle()
    assert first.done() and not second.done()
    transport.release()
    await second
    assert len(transport.payloads) == 2


async def test_an_upload_of_unknown_outcome_is_resent_as_is_before_anything_newer() -> None:
    uploader, state, transport, _ = make()
    transport.failures.append(boom())
    state.add_lifecycle_event({"id": "e1"})
    state.add_activity_observation({"activityId": "a", "observedAt": 5, "v": "failed-upload"})
    await uploader.flush(force=True)  # best effort: returns normally
    assert transport.payloads == [] and uploader.failed_uploads == 1 and uploader.has_unacked
    state.add_lifecycle_event({"id": "e2"})
    state.add_activity_observation({"activityId": "a", "observedAt": 4, "v": "older"})
    state.add_activity_observation({"activityId": "b", "observedAt": 1, "v": "b"})
    await uploader.flush(force=True)
    # The lost upload again under its own seq (the ledger absorbs it if it had applied it), then
    # the newer events in an upload of their own: each one-shot event is in exactly one upload_seq.
    assert [p["upload_seq"] for p in transport.payloads] == [1, 2]
    assert [[e["id"] for e in p["dataset_lifecycle_events"]] for p in transport.payloads] == [["e1"], ["e2"]]
    activities = [[o["v"] for o in p["activity_observations"]] for p in transport.payloads]
    assert activities == [["failed-upload"], ["older", "b"]]
    assert not uploader.has_unacked


async def test_a_refused_upload_gives_its_one_shot_events_back_and_is_not_resent() -> None:
    uploader, state, transport, _ = make()
    transport.failures.append(LedgerError("nope"))
    state.add_lifecycle_event({"id": "e1"})
    await uploader.flush(force=True)
    assert not uploader.has_unacked and uploader.failed_uploads == 1
    state.add_lifecycle_event({"id": "e2"})
    await uploader.flush(force=True)
    assert [p["upload_seq"] for p in transport.payloads] == [2]  # a refused upload's seq is not reused
    assert [e["id"] for e in transport.payloads[0]["dataset_lifecycle_events"]] == ["e1", "e2"]


async def test_a_duplicate_answer_to_a_first_delivery_is_an_error_and_stops() -> None:
    uploader, state, transport, _ = make()
    transport.answers.append({"duplicate": True})
    touch(state)
    with pytest.raises(DuplicateUpload, match="another reporter"):
        await uploader.flush(force=True, required=True)
    assert uploader.stopped
    touch(state, 2)
    with pytest.raises(DuplicateUpload):
        await uploader.flush(force=True, required=True)
    assert len(transport.payloads) == 1


async def test_a_duplicate_answer_to_a_resend_or_a_transport_redelivery_is_its_own() -> None:
    uploader, state, transport, _ = make()
    transport.failures.append(boom("answer lost"))
    touch(state)
    await uploader.flush(force=True)
    transport.answers.extend([{"duplicate": True}, {"duplicate": True, "redelivered": True}])
    touch(state, 2)
    await uploader.flush(force=True, required=True)  # the resend (dup) and the new upload (redelivered)
    assert not uploader.stopped
    assert [p["upload_seq"] for p in transport.payloads] == [1, 2]


async def test_a_resend_that_already_carries_the_request_is_not_followed_by_a_repeat() -> None:
    uploader, state, transport, _ = make()
    transport.failures.append(boom("answer lost"))
    touch(state)
    with pytest.raises(LedgerUnavailable):
        await uploader.flush(force=True, status="completed", required=True)
    await uploader.flush(force=True, status="completed", required=True)
    assert [(p["upload_seq"], p["status"]) for p in transport.payloads] == [(1, "completed")]


async def test_a_running_request_made_while_the_final_upload_is_retried_is_not_sent_after_it() -> None:
    # The transport retries the final upload for as long as the deadline allows; a trailing flush
    # meanwhile must not land a running upload after the run's end (the ledger would refuse it).
    uploader, state, transport, _ = make()
    assert uploader.ended is False
    transport.hold()
    touch(state)
    final = asyncio.ensure_future(uploader.flush(force=True, status="completed", required=True))
    await settle()
    touch(state, 2)
    later = asyncio.ensure_future(uploader.flush(force=True))  # a running request, waited for
    await settle()
    transport.release()
    await final
    await later  # settled without an upload, and without a failure
    assert uploader.ended is True and uploader.failed_uploads == 0
    await uploader.flush(force=True, status="failed", required=True)  # a terminal one is still sent
    assert [(p["upload_seq"], p["status"]) for p in transport.payloads] == [(1, "completed"), (2, "failed")]


async def test_a_run_ended_by_someone_else_stops_the_uploader() -> None:
    uploader, state, transport, _ = make()
    transport.failures.append(RunTerminal("run r1 was already ended as failed", "r", {"status": "failed"}))
    touch(state)
    with pytest.raises(RunTerminal):
        await uploader.flush(force=True, required=True)
    assert uploader.stopped
    with pytest.raises(RunTerminal, match="already ended"):
        await uploader.flush(force=True, required=True)


async def test_junk_is_repaired_or_dropped_before_upload_and_counted() -> None:
    uploader, state, transport, _ = make()
    state.append_log("bad \x00 byte")
    state.add_lifecycle_event({"nested": "\x00"})
    state.add_lifecycle_event({"ok": 1})
    state.add_activity_observation({"activityId": "a", "observedAt": "2026-11-30T00:00:00Z"})
    state.set_node_progress("n", {"completed": 2**70, "message": "m\ud800", "node_io": {"error": "e\x00"}})
    state.set_node_progress("bad\x00id", {"completed": 1})
    await uploader.flush(force=True, required=True)
    payload = transport.payloads[0]
    assert payload["live_logs"] == ["bad \ufffd byte"]
    assert payload["dataset_lifecycle_events"] == [{"ok": 1}]
    assert payload["activity_observations"] == []
    assert "bad\x00id" not in payload["live_node_progress"]
    node = payload["live_node_progress"]["n"]
    assert (
        "completed" not in node and node["message"] == "m\ufffd" and node["node_io"] == {"error": "e\ufffd"}
    )
    assert uploader.sanitizer.counts == {
        "dataset lifecycle event": 1,
        "activity observation": 1,
        "node progress field": 1,
        "node": 1,
    }


async def test_required_callers_are_rejected_best_effort_callers_are_not() -> None:
    uploader, state, transport, _ = make()
    transport.hold()
    transport.failures.append(boom("nope"))
    touch(state)
    required = asyncio.create_task(uploader.flush(force=True, required=True))
    best_effort = asyncio.create_task(uploader.flush(force=True))
    await settle()
    transport.release()
    await settle()
    # The required caller's upload failed; the best-effort one went out with the next upload.
    results = await asyncio.gather(required, best_effort, return_exceptions=True)
    assert isinstance(results[0], LedgerUnavailable) and str(results[0]) == "nope"
    assert results[1] is None
    transport.failures.append(boom("again"))
    with pytest.raises(LedgerUnavailable, match="again"):
        await uploader.flush(force=True, status="failed", required=True)


@pytest.mark.parametrize("required_first", [True, False])
async def test_merged_required_and_best_effort_waiters_in_one_failed_upload(required_first: bool) -> None:
    """A required flush merged with a best-effort one, before or after it, keeps its flag: the
    merged upload's failure rejects the required caller and resolves the best-effort ones."""
    uploader, state, transport, _ = make()
    transport.hold()
    touch(state)
    blocker = asyncio.create_task(uploader.flush(force=True))
    await settle()
    first = asyncio.create_task(uploader.flush(force=True, required=required_first))
    second = asyncio.create_task(uploader.flush(force=True, required=not required_first))
    transport.fail_calls[2] = boom("merged")  # the merged upload fails
    transport.release()
    results = await asyncio.gather(blocker, first, second, return_exceptions=True)
    required, best_effort = (results[1], results[2]) if required_first else (results[2], results[1])
    assert transport.started == 2  # the two flushes were one upload
    assert results[0] is None and best_effort is None
    assert isinstance(required, LedgerUnavailable) and str(required) == "merged"


async def test_one_shot_backlog_is_bounded_and_the_drop_count_is_reported_once() -> None:
    uploader, state, transport, _ = make(max_pending_one_shot=3)
    transport.failures.extend([boom(), boom()])
    state.add_lifecycle_event({"id": 0})
    await uploader.flush(force=True)  # fails: 0 waits in the unacked upload
    for i in range(1, 5):
        state.add_lifecycle_event({"id": i})  # 4 pending > 3: the oldest (1) dropped
    await uploader.flush(force=True)  # the resend fails again
    state.add_lifecycle_event({"id": 5})  # 1 more dropped (2)
    await uploader.flush(force=True)
    assert [[e["id"] for e in p["dataset_lifecycle_events"]] for p in transport.payloads] == [[0], [3, 4, 5]]
    assert "dropped_one_shot_events" not in transport.payloads[0]
    assert transport.payloads[1]["dropped_one_shot_events"] == 2
    await uploader.flush(force=True)
    assert "dropped_one_shot_events" not in transport.payloads[-1]


async def test_fenced_attempt_uploads_nothing_and_resolves_waiters() -> None:
    current = {"value": False}

    async def is_current() -> bool:
        return current["value"]

    uploader, state, transport, _ = make(is_current_attempt=is_current)
    touch(state)
    await uploader.flush(force=True, status="completed", required=True)
    assert transport.started == 0 and uploader.upload_seq == 0
    current["value"] = True
    await uploader.flush(force=True)
    assert [p["upload_seq"] for p in transport.payloads] == [1]


async def test_a_fence_set_in_the_same_turn_applies_before_any_upload() -> None:
    current = {"value": True}
    uploader, state, transport, _ = make(is_current_attempt=lambda: current["value"])
    touch(state)
    uploader.schedule(force=True)
    current["value"] = False  # same turn: the pump has not started yet
    await settle()
    assert transport.started == 0


async def test_cancelling_one_waiter_does_not_cancel_the_shared_upload() -> None:
    uploader, state, transport, _ = make()
    transport.hold()
    touch(state)
    first = asyncio.create_task(uploader.flush(force=True))
    await settle()
    touch(state, 2)
    a = asyncio.create_task(uploader.flush(force=True))
    b = asyncio.create_task(uploader.flush(force=True, required=True))
    await settle()
    a.cancel()
    first.cancel()
    await settle()
    transport.release()
    await b
    assert a.cancelled() and first.cancelled()
    assert len(transport.payloads) == 2
    assert transport.payloads[1]["live_node_progress"]["n"]["completed"] == 2


async def test_stale_attempt_stops_the_uploader() -> None:
    uploader, state, transport, _ = make()
    transport.failures.append(StaleAttempt("r", 1, 2, "stale producer attempt 3"))
    state.add_lifecycle_event({"id": 1})
    with pytest.raises(StaleAttempt):
        await uploader.flush(force=True, required=True)
    assert uploader.stopped
    touch(state)
    await uploader.flush(force=True)
    with pytest.raises(StaleAttempt):
        await uploader.flush(force=True, status="completed", required=True)
    assert transport.started == 1
    assert state.pending_one_shot_count == 0  # a stale attempt's events are not re-queued


async def test_trailing_flush_lands_changes_left_behind_by_the_throttle() -> None:
    uploader, state, transport, clock = make()
    touch(state, 1)
    uploader.schedule()
    await settle()
    touch(state, 2)
    uploader.schedule()  # throttled: arms one trailing timer
    touch(state, 3)
    uploader.schedule()
    await settle()
    assert len(transport.payloads) == 1 and clock.sleepers == 1
    await clock.advance(1.49)
    assert len(transport.payloads) == 1
    await clock.advance(0.01)
    assert len(transport.payloads) == 2
    assert transport.payloads[1]["live_node_progress"]["n"]["completed"] == 3
    await uploader.aclose()


async def test_schedule_without_a_running_loop_is_a_no_op() -> None:
    uploader, state, transport, _ = make()
    touch(state)
    await asyncio.to_thread(uploader.schedule, True)
    await settle()
    assert transport.started == 0 and state.has_changes
