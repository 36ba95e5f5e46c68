"""The uploader's rules one at a time: merging, the trailing timer, resends, stopping, counters.

Each test names the rule it checks; with test_uploader.py they are what the mutation run
(`python -m tests.mutation reporter/uploader.py`) measures.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from ledger.errors import LedgerError, RunTerminal, StaleAttempt
from ledger.validate import MAX_PIPELINE_STEPS, UploadBounds
from reporter.state import ProgressState
from reporter.uploader import CoalescingUploader, FlushRequest, epoch_ms_now, pipeline_step_list
from tests.unit.reporter.fakes import FakeClock, FakeTransport, boom, settle
from tests.unit.reporter.test_uploader import make, touch


def test_epoch_ms_now_is_whole_milliseconds_of_the_wall_clock() -> None:
    """`updated_at` stamps are integer epoch milliseconds, read from the wall clock."""
    before = time.time_ns() // 1_000_000
    now = epoch_ms_now()
    after = time.time_ns() // 1_000_000
    assert type(now) is int
    assert before <= now <= after


def test_merging_pending_requests_follows_the_documented_rules() -> None:
    """A terminal status beats running, a replay once asked for is kept, and every caller's future
    is carried with its own `required` flag, in the order the callers came."""
    loop = asyncio.new_event_loop()
    try:
        a, b = loop.create_future(), loop.create_future()
        replay = {"lines": ["x"]}
        required_first = FlushRequest(status="completed", terminal_log_replay=replay, waiters=[(a, True)])
        best_effort = FlushRequest(waiters=[(b, False)])
        merged = required_first.merge(best_effort)
        assert (merged.status, merged.terminal_log_replay) == ("completed", replay)
        assert merged.waiters == [(a, True), (b, False)]
        merged = best_effort.merge(required_first)
        assert (merged.status, merged.terminal_log_replay) == ("completed", replay)
        assert merged.waiters == [(b, False), (a, True)]
    finally:
        loop.close()


# -- the trailing timer ----------------------------------------------------------------------------


class RecordingClock(FakeClock):
    def __init__(self) -> None:
        super().__init__()
        self.delays: list[float] = []

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)
        await super().sleep(delay)


async def test_the_trailing_timer_waits_out_the_rest_of_the_interval() -> None:
    """A change throttled 1.0 s into a 1.5 s interval is carried by a trailing flush 0.5 s later, in a
    `running` upload; the timer waits for no more and no less."""
    clock = RecordingClock()
    uploader, state, transport, _ = make(clock=clock)
    touch(state, 1)
    await uploader.flush()
    await clock.advance(1.0)
    touch(state, 2)
    await uploader.flush()
    await settle()
    assert clock.delays == [pytest.approx(0.5)]
    await clock.advance(0.49)
    assert len(transport.payloads) == 1
    await clock.advance(0.01)
    assert [p["live_node_progress"]["n"]["completed"] for p in transport.payloads] == [1, 2]
    assert transport.payloads[1]["status"] == "running"
    await uploader.aclose()


async def test_a_change_after_the_rows_moved_is_throttled_by_their_interval() -> None:
    """The interval is the one for the run's rows now: a change 0.5 s after a flush waits while the
    rows' interval runs, and goes at once when the rows moved to a shorter one that has run out."""
    uploader, state, transport, clock = make(interval=lambda rows: 1.5 if rows < 10 else 0.25)
    touch(state, 1)
    await uploader.flush()
    await clock.advance(0.5)
    touch(state, 2)
    uploader.schedule()
    await settle()
    assert len(transport.payloads) == 1  # 0.5 s into 1.5 s: held for the trailing flush
    state.note_total_rows(10)
    touch(state, 3)
    uploader.schedule()
    await settle()
    assert [p["live_node_progress"]["n"]["completed"] for p in transport.payloads] == [1, 3]
    await uploader.aclose()


async def test_one_trailing_timer_at_a_time_and_none_when_disabled() -> None:
    """However many flushes the throttle holds back, one timer is armed; with the trailing flush
    turned off, none is, and the change waits for the next flush."""
    uploader, state, transport, clock = make()
    touch(state, 1)
    await uploader.flush()
    for completed in (2, 3, 4):
        touch(state, completed)
        await uploader.flush()
        await settle()
    assert clock.sleepers == 1
    await uploader.aclose()

    uploader, state, transport, clock = make(trailing_flush=False)
    touch(state, 1)
    await uploader.flush()
    touch(state, 2)
    await uploader.flush()
    await settle()
    assert clock.sleepers == 0
    await clock.advance(10)
    assert len(transport.payloads) == 1


async def test_the_trailing_flush_respects_the_throttle_of_a_flush_made_meanwhile() -> None:
    """A forced flush made while the timer runs restarts the interval: when the timer fires, the
    change after it waits for the rest of that new interval instead of doubling up."""
    uploader, state, transport, clock = make()
    touch(state, 1)
    await uploader.flush()  # t = 0
    await clock.advance(1.0)
    touch(state, 2)
    await uploader.flush()  # throttled: timer for t = 1.5
    await settle()
    await clock.advance(0.2)
    await uploader.flush(force=True)  # t = 1.2, carries 2
    touch(state, 3)
    await clock.advance(0.3)  # t = 1.5: the timer fires inside the new interval
    assert len(transport.payloads) == 2
    await clock.advance(1.2)  # t = 2.7: the new interval is over
    assert [p["live_node_progress"]["n"]["completed"] for p in transport.payloads] == [1, 2, 3]
    await uploader.aclose()


async def test_a_forced_schedule_uploads_at_once_inside_the_interval() -> None:
    """`schedule(force=True)` is not throttled, even with a trailing timer armed."""
    uploader, state, transport, _ = make()
    touch(state, 1)
    uploader.schedule()
    await settle()
    touch(state, 2)
    uploader.schedule()  # throttled: arms the timer
    await settle()
    assert len(transport.payloads) == 1
    uploader.schedule(force=True)
    await settle()
    assert [p["live_node_progress"]["n"]["completed"] for p in transport.payloads] == [1, 2]
    await uploader.aclose()


# -- waiting and idling ----------------------------------------------------------------------------


async def test_a_flush_with_nothing_to_send_waits_for_the_upload_in_flight() -> None:
    """A caller whose flush is throttled or has nothing new returns once the upload in flight is done,
    not before (it may carry what the caller folded)."""
    uploader, state, transport, _ = make()
    transport.hold()
    touch(state, 1)
    first = asyncio.create_task(uploader.flush(force=True))
    await settle()
    nothing_new = asyncio.create_task(uploader.flush())
    await settle()
    assert not nothing_new.done()
    transport.release()
    await settle()
    assert first.done() and nothing_new.done()


async def test_a_flush_made_after_aclose_still_gets_a_trailing_timer() -> None:
    """`aclose` stops the trailing timer (even one that has not run yet) without disabling the
    uploader: a change throttled after it is still carried by a new timer."""
    uploader, state, transport, clock = make()
    touch(state, 1)
    await uploader.flush()
    touch(state, 2)
    await uploader.flush()  # throttled: a timer is armed, not yet running
    await uploader.aclose()
    touch(state, 3)
    await uploader.flush()
    await settle()
    await clock.advance(1.5)
    assert [p["live_node_progress"]["n"]["completed"] for p in transport.payloads] == [1, 3]
    await uploader.aclose()


async def test_a_flush_with_nothing_new_waits_while_the_attempt_is_checked() -> None:
    """A caller with nothing new to send returns once the upload in flight is done, even while that
    upload is still asking whether its attempt is current."""
    gate = asyncio.Event()

    async def is_current() -> bool:
        await gate.wait()
        return True

    uploader, _, transport, _ = make(is_current_attempt=is_current)
    forced = asyncio.create_task(uploader.flush(force=True))
    await settle()
    nothing_new = asyncio.create_task(uploader.flush())
    await settle()
    assert not nothing_new.done()
    gate.set()
    await settle()
    assert forced.done() and nothing_new.done()
    assert len(transport.payloads) == 1


async def test_aclose_waits_for_the_upload_in_flight_and_a_later_flush_still_lands() -> None:
    """`aclose` does not cancel the upload in flight; it stops the trailing timer, and a flush made
    after it is throttled and carried by a new timer as before."""
    uploader, state, transport, clock = make()
    transport.hold()
    touch(state, 1)
    flushing = asyncio.create_task(uploader.flush(force=True))
    await settle()
    closing = asyncio.create_task(uploader.aclose())
    await settle()
    assert not closing.done()
    transport.release()
    await asyncio.gather(flushing, closing)
    assert len(transport.payloads) == 1
    touch(state, 2)
    await uploader.flush()  # inside the interval of the first upload
    await settle()
    await clock.advance(1.5)
    assert [p["live_node_progress"]["n"]["completed"] for p in transport.payloads] == [1, 2]
    await uploader.aclose()


# -- resends ---------------------------------------------------------------------------------------


async def test_an_unacked_upload_is_resent_by_a_flush_with_nothing_new() -> None:
    """An upload whose outcome is unknown is sent again by the next flush, even a best-effort one with
    no new change."""
    uploader, state, transport, clock = make()
    transport.failures.append(boom())
    touch(state)
    await uploader.flush()
    assert transport.payloads == [] and uploader.has_unacked
    await clock.advance(1.5)
    await uploader.flush()
    assert [p["upload_seq"] for p in transport.payloads] == [1]
    assert not uploader.has_unacked


async def test_a_resend_covers_a_request_only_with_the_replay_it_carried() -> None:
    """The resent upload answers a request that asks for the same replay, or for none; a request
    for another replay gets an upload of its own that carries it."""
    replay = {"lines": ["a"], "dedupe_mode": "positional", "total_count": 1}
    for again, uploads in ((replay, 1), (None, 1), ({"lines": ["b"], "dedupe_mode": "positional"}, 2)):
        uploader, state, transport, _ = make()
        transport.failures.append(boom())
        touch(state)
        await uploader.flush(force=True, status="completed", terminal_log_replay=replay)
        await uploader.flush(force=True, status="completed", terminal_log_replay=again)
        assert len(transport.payloads) == uploads, again
        assert transport.payloads[-1]["terminal_log_replay"] == (again or replay)


async def test_after_a_resend_the_next_upload_is_new() -> None:
    """Once the resend is acknowledged, the next change goes out under the next `upload_seq`."""
    uploader, state, transport, _ = make()
    transport.failures.append(boom())
    touch(state, 1)
    await uploader.flush(force=True)
    await uploader.flush(force=True)  # the resend, covering the request
    touch(state, 2)
    await uploader.flush(force=True)
    assert [p["upload_seq"] for p in transport.payloads] == [1, 2]
    assert transport.payloads[1]["live_node_progress"]["n"]["completed"] == 2


async def test_uploads_made_and_failed_uploads_count_each_outcome() -> None:
    """`uploads_made` counts acknowledged uploads (a resend included); `failed_uploads` counts uploads
    that failed or that the ledger refused."""
    uploader, state, transport, _ = make()
    touch(state, 1)
    await uploader.flush(force=True)  # lands
    transport.failures.extend([boom(), LedgerError("no"), LedgerError("no again")])
    touch(state, 2)
    await uploader.flush(force=True)  # failed: unknown outcome
    await uploader.flush(force=True)  # its resend is refused
    touch(state, 3)
    await uploader.flush(force=True)  # refused
    assert (uploader.uploads_made, uploader.failed_uploads) == (1, 3)
    touch(state, 4)
    transport.failures.append(boom())
    await uploader.flush(force=True)  # failed
    await uploader.flush(force=True)  # the resend lands
    touch(state, 5)
    await uploader.flush(force=True)  # lands
    assert (uploader.uploads_made, uploader.failed_uploads) == (3, 4)


# -- stopping --------------------------------------------------------------------------------------


async def test_a_request_pending_when_the_uploader_stops_gets_the_stop_reason() -> None:
    """A required caller waiting behind the upload that found the attempt stale is rejected with that
    reason; a best-effort caller returns normally; nothing more is sent."""
    uploader, state, transport, _ = make()
    transport.hold()
    stale = StaleAttempt("r", 1, 2, "stale producer attempt 3")
    transport.failures.append(stale)
    touch(state, 1)
    first = asyncio.create_task(uploader.flush(force=True))
    await settle()
    touch(state, 2)
    required = asyncio.create_task(uploader.flush(force=True, status="completed", required=True))
    best_effort = asyncio.create_task(uploader.flush(force=True))
    await settle()
    transport.release()
    results = await asyncio.gather(first, required, best_effort, return_exceptions=True)
    assert results[0] is None and results[1] is stale and results[2] is None
    assert transport.started == 1


async def test_a_request_pending_behind_a_cancelled_upload_is_still_sent() -> None:
    """Nobody awaits the pump, but the loop may cancel it (at shutdown): the callers of the cancelled
    upload are cancelled, and a request pending behind it goes out with a new pump."""
    uploader, state, transport, _ = make()
    transport.hold()
    touch(state, 1)
    first = asyncio.create_task(uploader.flush(force=True))
    await settle()
    touch(state, 2)
    second = asyncio.create_task(uploader.flush(force=True))
    await settle()
    [pump] = [t for t in asyncio.all_tasks() if t.get_name() == "reporter-upload-r1"]
    pump.cancel()
    await settle()
    assert first.cancelled() and not second.done()
    transport.release()
    await settle()
    assert second.done() and second.exception() is None
    assert transport.payloads[-1]["live_node_progress"]["n"]["completed"] == 2


async def test_an_uploader_made_without_an_attempt_speaks_for_attempt_1() -> None:
    """Attempts are numbered from 1; the uploader's default is the reporter's, the first attempt."""
    state = ProgressState(now_ms=lambda: 0)
    transport = FakeTransport()
    uploader = CoalescingUploader(run_id="r1", state=state, transport=transport)
    touch(state)
    await uploader.flush(force=True)
    assert transport.payloads[0]["producer_attempt"] == 1


# -- what a request carries ------------------------------------------------------------------------


def test_a_merged_request_keeps_the_terminal_requests_error() -> None:
    """The run's error goes with its terminal status: merged with a running request, before or
    after it, the terminal request's error is kept."""
    failed = FlushRequest(status="failed", error="the map failed")
    assert failed.merge(FlushRequest()).error == "the map failed"
    assert FlushRequest().merge(failed).error == "the map failed"
    assert FlushRequest(status="completed").merge(FlushRequest(error="stray")).error is None


async def test_an_upload_carries_the_error_only_with_a_terminal_status() -> None:
    uploader, state, transport, _ = make()
    touch(state, 1)
    await uploader.flush(force=True, error="not yet")  # a running upload says no error
    touch(state, 2)
    await uploader.flush(force=True, status="completed", required=True)  # ended without one
    touch(state, 3)
    await uploader.flush(force=True, status="failed", required=True, error="boom")
    assert ["error" in p for p in transport.payloads] == [False, False, True]
    assert transport.payloads[2]["error"] == "boom"


async def test_a_refused_upload_gives_back_its_activity_observations_and_its_drop_count() -> None:
    """A refused upload wrote nothing: the observations it carried and the count of one-shot events
    dropped before it go out with the next upload, and a refused upload that dropped nothing adds
    no drop count."""
    uploader, state, transport, _ = make(max_pending_one_shot=2)
    for i in range(3):
        state.add_lifecycle_event({"id": i})  # one more than is kept: the oldest is dropped
    state.add_activity_observation({"activityId": "a", "observedAt": 1, "v": "seen"})
    transport.failures.append(LedgerError("refused"))
    await uploader.flush(force=True)
    await uploader.flush(force=True)
    [payload] = transport.payloads
    assert payload["dropped_one_shot_events"] == 1
    assert [e["id"] for e in payload["dataset_lifecycle_events"]] == [1, 2]
    assert [o["v"] for o in payload["activity_observations"]] == ["seen"]
    transport.failures.append(LedgerError("refused"))
    state.add_lifecycle_event({"id": "x"})
    await uploader.flush(force=True)
    await uploader.flush(force=True)
    assert "dropped_one_shot_events" not in transport.payloads[-1]
    assert [e["id"] for e in transport.payloads[-1]["dataset_lifecycle_events"]] == ["x"]


async def test_a_run_ended_by_someone_else_is_named_in_the_error() -> None:
    uploader, state, transport, _ = make()
    transport.answers.append({"terminal": {"status": "cancelled", "error": None}})
    touch(state)
    with pytest.raises(RunTerminal) as info:
        await uploader.flush(force=True, required=True)
    assert info.value.run_id == "r1" and str(info.value).startswith("run r1 had already ended")


async def test_an_uploader_stopped_without_a_reason_refuses_required_flushes_as_stale() -> None:
    """Stopped from outside with no refusal to give (the reporter's own stop), a required flush
    fails as the attempt's being stale, naming the run and the attempt."""
    uploader, state, transport, _ = make()
    uploader.stopped = True
    touch(state)
    with pytest.raises(StaleAttempt) as info:
        await uploader.flush(force=True, required=True)
    assert (info.value.run_id, info.value.attempt, info.value.current) == ("r1", 3, 3)
    assert str(info.value) == "reporter for run 'r1' was stopped"
    assert transport.payloads == []


async def test_stopping_is_logged_once_naming_the_run_and_why(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="reporter.uploader")
    uploader, state, transport, _ = make()
    transport.failures.append(StaleAttempt("r1", 3, 4))
    touch(state)
    await uploader.flush(force=True)
    uploader2, state2, transport2, _ = make()
    transport2.answers.append({"terminal": {"status": "failed", "error": "watchdog"}})
    touch(state2)
    await uploader2.flush(force=True)
    stops = [r for r in caplog.records if r.name == "reporter.uploader"]
    assert [r.levelno for r in stops] == [logging.INFO, logging.INFO]
    assert stops[0].getMessage() == "run r1: stale producer attempt 3, reporter stops"
    assert stops[1].getMessage() == "run r1: reporter stops: run r1 had already ended as failed: watchdog"


# -- the contract's steps --------------------------------------------------------------------------


def test_the_pipeline_steps_keep_valid_ids_once_each_in_order() -> None:
    assert pipeline_step_list(["load", "", "  ", "map", "load", 7, "tool-3"]) == ["load", "map", "tool-3"]  # type: ignore[list-item]


@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_the_pipeline_steps_stop_at_their_limit(extra: int) -> None:
    ids = [f"s{i}" for i in range(MAX_PIPELINE_STEPS + extra)]
    assert pipeline_step_list(ids) == ids[:MAX_PIPELINE_STEPS]


# -- the sanitizer -----------------------------------------------------------------------------------


async def test_the_uploader_checks_values_against_the_states_bounds() -> None:
    """A state made for a smaller body limit bounds the values of every upload from the first on."""
    bounds = UploadBounds.for_body_limit(8_192)
    state = ProgressState(now_ms=lambda: 0, bounds=bounds)
    transport = FakeTransport()
    uploader = CoalescingUploader(run_id="r1", state=state, transport=transport, trailing_flush=False)
    output = "o" * (bounds.value_bytes + 1)  # far within the default bound
    state.set_node_progress(
        "n", {"started_at": 1, "node_io": {"inputs": {}, "outputs": output, "error": None}}
    )
    await uploader.flush(force=True, required=True)
    assert "outputs" not in transport.payloads[0]["live_node_progress"]["n"]["node_io"]
    assert uploader.sanitizer.counts["node I/O value"] == 1
