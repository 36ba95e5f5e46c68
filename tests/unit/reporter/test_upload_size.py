"""The uploader against the service's body limit: it learns the limit, splits what does not fit,
keeps every part until it lands, adopts a smaller limit from a 413, and bounds the live tail."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from ledger.errors import DuplicateUpload, LedgerUnavailable, PayloadTooLarge, RunTerminal
from ledger.validate import (
    DEFAULT_UPLOAD_BOUNDS,
    LIVE_LOG_TAIL_LIMIT,
    MAX_BODY_BYTES,
    UploadBounds,
    encode_body,
)
from reporter.state import ProgressState
from reporter.uploader import CoalescingUploader, UploadCannotFit
from tests.unit.reporter.fakes import FakeClock, FakeTransport, boom


class LimitedTransport(FakeTransport):
    """A fake that advertises a body limit and answers 413 (naming `enforced`) to bigger bodies."""

    def __init__(self, advertised: int | None, enforced: int) -> None:
        super().__init__()
        self.advertised = advertised
        self.enforced = enforced
        self.limit_reads = 0
        self.refused: list[int] = []

    async def body_limit(self) -> int | None:
        self.limit_reads += 1
        return self.advertised

    async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
        size = len(encode_body(payload))
        if size > self.enforced:
            self.refused.append(size)
            raise PayloadTooLarge("too large", self.enforced)
        return await super().upload(payload)


def make(transport: FakeTransport) -> tuple[CoalescingUploader, ProgressState]:
    clock = FakeClock()
    state = ProgressState(now_ms=clock.wall_ms)
    uploader = CoalescingUploader(
        run_id="r1",
        state=state,
        transport=transport,
        clock=clock.monotonic,
        sleep=clock.sleep,
        wall_clock_ms=clock.wall_ms,
        trailing_flush=False,
    )
    return uploader, state


def lines_of(payloads: list[dict[str, Any]]) -> list[str]:
    return [line for p in payloads for line in p["live_logs"]]


def fill(state: ProgressState, count: int, width: int = 500) -> list[str]:
    lines = [f"{i:04d} " + "w" * width for i in range(count)]
    for line in lines:
        state.append_log(line)
    return lines


async def test_the_advertised_limit_is_learned_once_and_every_upload_stays_under_it() -> None:
    transport = LimitedTransport(advertised=8_192, enforced=8_192)
    uploader, state = make(transport)
    lines = fill(state, 25)  # about 12.6 KB: two bodies, within the tail's bound (16 KiB) at this limit
    await uploader.flush(force=True, status="completed", required=True)
    parts = list(transport.payloads)
    await uploader.flush(force=True)
    assert transport.limit_reads == 1 and transport.refused == []
    assert uploader.bounds == UploadBounds.for_body_limit(8_192)
    assert all(len(encode_body(p)) <= 8_192 for p in transport.payloads)
    assert len(parts) > 1 and lines_of(parts) == lines  # the parts carry every line once
    assert [p["upload_seq"] for p in transport.payloads] == list(range(1, len(transport.payloads) + 1))
    assert [p["status"] for p in parts] == ["running"] * (len(parts) - 1) + ["completed"]


async def test_a_413_naming_a_smaller_limit_splits_again_what_was_not_applied() -> None:
    transport = LimitedTransport(advertised=None, enforced=6_000)  # it says nothing until refusing
    uploader, state = make(transport)
    lines = fill(state, 30, width=300)  # 9 KB of lines within this limit's line and tail bounds
    await uploader.flush(force=True, status="failed", required=True)
    assert len(transport.refused) == 1  # once: every part after it was cut under the limit it named
    assert uploader.bounds.max_body_bytes == 6_000
    assert all(len(encode_body(p)) <= 6_000 for p in transport.payloads)
    assert lines_of(transport.payloads) == lines
    # Numbered on from the refused one (nothing of a 413 is applied): no gap, no repeat.
    assert [p["upload_seq"] for p in transport.payloads] == list(range(1, len(transport.payloads) + 1))
    assert transport.payloads[-1]["status"] == "failed"


async def test_a_fault_in_the_middle_of_a_split_keeps_the_rest_and_sends_it_in_order() -> None:
    transport = LimitedTransport(advertised=8_192, enforced=8_192)
    uploader, state = make(transport)
    lines = fill(state, 25)
    transport.fail_calls[2] = boom()  # the second part's answer is lost
    await uploader.flush(force=True, status="completed")  # best effort: the fault is swallowed
    assert uploader.has_unacked and len(transport.payloads) == 1
    await uploader.flush(force=True, status="completed", required=True)
    sent = transport.payloads
    assert lines_of(sent) == lines and sent[-1]["status"] == "completed"
    assert [p["upload_seq"] for p in sent] == list(range(1, len(sent) + 1))
    assert not uploader.has_unacked


async def test_an_answer_naming_the_runs_end_stops_the_reporter_whoever_ended_it() -> None:
    transport = FakeTransport()
    uploader, state = make(transport)
    terminal = {"status": "completed", "error": None}
    transport.answers.append({"duplicate": True, "terminal": terminal})
    state.append_log("again")
    with pytest.raises(RunTerminal, match="already ended as completed") as info:
        await uploader.flush(force=True, required=True)
    assert info.value.terminal == terminal and uploader.stopped
    # Absorbed (changed nothing) is the same: the run had ended before this upload.
    transport2 = FakeTransport()
    uploader2, state2 = make(transport2)
    transport2.answers.append({"duplicate": False, "terminal": {"status": "failed", "error": "watchdog"}})
    state2.append_log("late")
    with pytest.raises(RunTerminal, match="had already ended as failed: watchdog"):
        await uploader2.flush(force=True, required=True)


async def test_a_duplicate_of_a_live_run_is_still_another_reporters_upload() -> None:
    transport = FakeTransport()
    uploader, state = make(transport)
    transport.answers.append({"duplicate": True})
    state.append_log("x")
    with pytest.raises(DuplicateUpload):
        await uploader.flush(force=True, required=True)


@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_the_live_tail_is_bounded_in_bytes_at_its_bound(extra: int) -> None:
    bounds = UploadBounds(log_tail_bytes=10_000)
    state = ProgressState(now_ms=lambda: 0, bounds=bounds)
    fill(state, 9, width=995)  # nine lines of 1,000 bytes
    state.append_log("z" * (1_000 + extra))
    assert state.log_bytes == sum(len(line.encode()) for line in state.logs)
    assert len(state.logs) == (10 if extra <= 0 else 9)  # past the bound, the oldest line goes
    assert state.log_total_count == 10


def test_the_live_tail_is_still_bounded_in_lines_and_truncates_long_lines() -> None:
    state = ProgressState(now_ms=lambda: 0)
    for i in range(LIVE_LOG_TAIL_LIMIT + 1):
        state.append_log(f"line {i}")
    assert len(state.logs) == LIVE_LOG_TAIL_LIMIT and state.logs[0] == "line 1"
    state.append_log("v" * (DEFAULT_UPLOAD_BOUNDS.log_line_bytes * 2))
    assert len(state.logs[-1].encode()) <= DEFAULT_UPLOAD_BOUNDS.log_line_bytes
    assert "bytes cut" in state.logs[-1]


async def test_a_node_output_too_big_for_an_upload_is_dropped_and_counted() -> None:
    transport = FakeTransport()
    uploader, state = make(transport)
    big = "o" * (DEFAULT_UPLOAD_BOUNDS.value_bytes + 1)
    state.set_node_progress(
        "n", {"started_at": 1, "node_io": {"inputs": {"a": 1}, "outputs": big, "error": None}}
    )
    await uploader.flush(force=True, required=True)
    [payload] = transport.payloads
    assert payload["live_node_progress"]["n"]["node_io"] == {"inputs": {"a": 1}, "error": None}
    assert uploader.sanitizer.counts["node I/O value"] == 1


def test_a_long_line_the_live_tail_carried_is_not_replayed_again() -> None:
    from reporter.replay import build_terminal_replay

    stamp = "[2026-01-01T00:00:00.000Z] "
    long_line = stamp + "k" * (DEFAULT_UPLOAD_BOUNDS.log_line_bytes * 2)
    state = ProgressState(now_ms=lambda: 0)
    state.append_log(long_line)
    replay = build_terminal_replay(
        [long_line, stamp + "after"],
        mode="direct_worker",
        live_logs=state.logs,
        live_log_total_count=state.log_total_count,
    )
    assert replay is not None and replay["lines"] == [stamp + "after"]


async def test_a_413_naming_no_limit_halves_the_refused_body_until_it_fits() -> None:
    class Proxy(LimitedTransport):
        async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
            try:
                return await super().upload(payload)
            except PayloadTooLarge as exc:
                raise PayloadTooLarge(str(exc), None) from None  # a proxy's 413 says no number

    transport = Proxy(advertised=None, enforced=7_000)
    uploader, state = make(transport)
    lines = fill(state, 40, width=300)  # 12 KB
    await uploader.flush(force=True, status="completed", required=True)
    assert transport.refused and uploader.bounds.max_body_bytes <= 7_000
    assert lines_of(transport.payloads) == lines and transport.payloads[-1]["status"] == "completed"


async def test_a_413_below_any_useful_body_stops_the_uploader_saying_why() -> None:
    transport = LimitedTransport(advertised=None, enforced=1_000)
    uploader, state = make(transport)
    fill(state, 3)
    with pytest.raises(UploadCannotFit, match="as too large"):
        await uploader.flush(force=True, status="completed", required=True)
    assert uploader.stopped
    sent = len(transport.refused) + len(transport.payloads)
    with pytest.raises(UploadCannotFit):  # no request more: the uploader stopped
        await uploader.flush(force=True, status="completed", required=True)
    assert len(transport.refused) + len(transport.payloads) == sent


async def test_a_line_too_big_for_a_body_of_its_own_is_shortened_and_counted() -> None:
    """A line within the line bound that still cannot fit a body beside the rest of the upload (here
    a long step list, and control characters that take six bytes each in JSON) is shortened, and
    each one counted."""
    transport = LimitedTransport(advertised=8_192, enforced=8_192)
    clock = FakeClock()
    state = ProgressState(now_ms=clock.wall_ms)
    uploader = CoalescingUploader(
        run_id="r1",
        state=state,
        transport=transport,
        clock=clock.monotonic,
        sleep=clock.sleep,
        wall_clock_ms=clock.wall_ms,
        trailing_flush=False,
        pipeline_steps=["s" * 1_900],
    )
    state.append_log("\x01" * 500)
    state.append_log("\x02" * 500)
    await uploader.flush(force=True, status="completed", required=True, error="\x03" * 500)
    assert transport.refused == [] and all(len(encode_body(p)) <= 8_192 for p in transport.payloads)
    assert [len(line) < 500 and "bytes cut" in line for line in lines_of(transport.payloads)] == [True, True]
    assert uploader.sanitizer.counts["oversized log line"] == 2


async def test_a_413_naming_the_limit_in_use_halves_the_refused_body() -> None:
    """A 413 that names no smaller limit than the one the uploader keeps to (a stale figure) is read
    as naming none: the next limit is half the refused body, in whole bytes."""

    class Stale(LimitedTransport):
        async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
            try:
                return await super().upload(payload)
            except PayloadTooLarge as exc:
                raise PayloadTooLarge(str(exc), self.advertised) from None

    transport = Stale(advertised=16_384, enforced=12_000)
    uploader, state = make(transport)
    lines = fill(state, 60, width=400)  # about 24 KB: the first body is near 16 KiB
    await uploader.flush(force=True, status="completed", required=True)
    [refused] = transport.refused
    assert refused > 12_000
    assert uploader.bounds.max_body_bytes == refused // 2
    assert type(uploader.bounds.max_body_bytes) is int
    assert lines_of(transport.payloads) == lines and transport.payloads[-1]["status"] == "completed"


@pytest.mark.parametrize("limit", [4_095, 4_096, 4_097])
async def test_a_413_naming_a_limit_below_four_kib_is_not_split_for(limit: int) -> None:
    """Splitting goes down to bodies of 4 KiB; a 413 naming less refuses the upload."""
    transport = LimitedTransport(advertised=None, enforced=limit)
    uploader, state = make(transport)
    lines = fill(state, 40, width=100)  # about 4.5 KB
    if limit < 4_096:
        with pytest.raises(PayloadTooLarge):
            await uploader.flush(force=True, status="completed", required=True)
        assert transport.payloads == []
        return
    await uploader.flush(force=True, status="completed", required=True)
    assert uploader.bounds.max_body_bytes == limit
    assert lines_of(transport.payloads) == lines


@pytest.mark.parametrize(("advertised", "adopted"), [(-1, False), (0, False), (1, True), (8_192, True)])
async def test_only_a_positive_advertised_limit_is_adopted(advertised: int, adopted: bool) -> None:
    uploader, _ = make(LimitedTransport(advertised=advertised, enforced=MAX_BODY_BYTES))
    await uploader.learn_body_limit()
    expected = UploadBounds.for_body_limit(advertised) if adopted else DEFAULT_UPLOAD_BOUNDS
    assert uploader.bounds == expected


async def test_a_limit_that_cannot_be_read_leaves_the_default_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Mute(LimitedTransport):
        async def body_limit(self) -> int | None:
            raise boom("no limits today")

    uploader, _ = make(Mute(advertised=None, enforced=MAX_BODY_BYTES))
    await uploader.learn_body_limit()
    assert uploader.bounds == DEFAULT_UPLOAD_BOUNDS
    [record] = [r for r in caplog.records if r.name == "reporter.uploader"]
    assert record.levelno == logging.WARNING
    assert (
        record.getMessage() == "run r1: cannot read the service's limits (no limits today); using the default"
    )


async def test_a_final_upload_split_again_and_interrupted_is_finished_by_its_resend() -> None:
    """The parts a 413 re-split keep the replay their request carried: when the answer to one of
    them is lost, the same final flush again only resends what is left, with no second final
    upload."""
    transport = LimitedTransport(advertised=None, enforced=6_000)
    uploader, state = make(transport)
    lines = fill(state, 30, width=300)
    replay = {"lines": ["[t] done"], "total_count": 1}
    transport.fail_calls[2] = boom()  # the second part that gets through: its answer is lost
    with pytest.raises(LedgerUnavailable):
        await uploader.flush(force=True, status="completed", required=True, terminal_log_replay=replay)
    assert uploader.has_unacked
    await uploader.flush(force=True, status="completed", required=True, terminal_log_replay=replay)
    assert not uploader.has_unacked
    assert [p["status"] for p in transport.payloads].count("completed") == 1
    assert lines_of(transport.payloads) == lines
