"""What a flush request asks of the upload it is carried by: which requests take the whole live
tail past a hole, which of two merged requests of the same rank speaks for the run, and how many
413s one upload may cost before the uploader stops."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from ledger.errors import PayloadTooLarge
from ledger.validate import encode_body
from reporter.state import LIVE_LOG_TAIL_LIMIT, ProgressState
from reporter.uploader import MAX_REFUSED_AS_TOO_LARGE, FlushRequest, UploadCannotFit
from tests.unit.reporter.fakes import FakeTransport
from tests.unit.reporter.test_upload_size import LimitedTransport
from tests.unit.reporter.test_uploader import make

TERMINAL = ("completed", "failed", "cancelled")


def with_a_hole(state: ProgressState) -> None:
    """A live tail that lost its first line before any upload carried it."""
    for i in range(LIVE_LOG_TAIL_LIMIT + 1):
        state.append_log(f"line {i}")
    assert state.log_hole_after == 0


# -- the whole tail --------------------------------------------------------------------------------


async def test_a_running_upload_holds_back_the_lines_past_a_hole() -> None:
    uploader, state, transport, _ = make()
    with_a_hole(state)
    await uploader.flush(force=True)
    assert (transport.payloads[-1]["live_logs"], transport.payloads[-1]["live_log_total_count"]) == ([], 0)


async def test_a_best_effort_upload_nobody_waits_for_holds_back_the_lines_past_a_hole() -> None:
    uploader, state, transport, _ = make()
    with_a_hole(state)
    uploader.schedule(force=True)
    await uploader.aclose()  # waits for the upload in flight
    assert [(p["live_logs"], p["live_log_total_count"]) for p in transport.payloads] == [([], 0)]


@pytest.mark.parametrize(
    "request_",
    [
        {"whole_tail": True},  # the last upload of a batch
        {"status": "interrupted", "interruption": {"reason": "SIGTERM"}},
        *({"status": status} for status in TERMINAL),
        {"terminal_log_replay": {"lines": ["line 0"], "dedupe_mode": "positional", "total_count": 1}},
    ],
)
async def test_the_last_upload_of_a_batch_or_a_run_carries_the_whole_tail_past_a_hole(
    request_: dict[str, Any],
) -> None:
    """A batch-ending, interrupted or terminal upload, or one with the result's log replay, is the
    last chance to carry the tail: it takes every line past the hole."""
    uploader, state, transport, _ = make()
    with_a_hole(state)
    await uploader.flush(force=True, **request_)
    body = transport.payloads[-1]
    assert body["live_log_total_count"] == LIVE_LOG_TAIL_LIMIT + 1
    assert body["live_logs"][0] == "line 1" and len(body["live_logs"]) == LIVE_LOG_TAIL_LIMIT


# -- merging requests of the same rank -------------------------------------------------------------


@pytest.mark.parametrize(("first", "then"), list(itertools.product(TERMINAL, TERMINAL)))
def test_of_two_terminal_requests_the_later_one_speaks_for_the_run(first: str, then: str) -> None:
    earlier = FlushRequest(status=first, error=f"{first} first")  # type: ignore[arg-type]
    later = FlushRequest(status=then, error=f"{then} then")  # type: ignore[arg-type]
    merged = earlier.merge(later)
    assert (merged.status, merged.error) == (then, f"{then} then")


def test_of_two_interrupted_requests_the_later_ones_reason_is_kept() -> None:
    earlier = FlushRequest(status="interrupted", interruption={"reason": "SIGINT"})
    later = FlushRequest(status="interrupted", interruption={"reason": "SIGTERM"})
    assert earlier.merge(later).interruption == {"reason": "SIGTERM"}


def test_a_terminal_request_beats_an_interrupted_one_either_way() -> None:
    for status in TERMINAL:
        terminal = FlushRequest(status=status)  # type: ignore[arg-type]
        interrupted = FlushRequest(status="interrupted", interruption={"reason": "SIGTERM"})
        assert terminal.merge(interrupted).status == status
        assert interrupted.merge(terminal).status == status


# -- the bound on 413s -----------------------------------------------------------------------------


class Shrinking(FakeTransport):
    """Refuses every body, each time naming a limit one byte below the body it refused: each 413
    teaches a smaller limit, never one below any useful body."""

    def __init__(self) -> None:
        super().__init__()
        self.named: list[int] = []

    async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.started += 1
        self.named.append(len(encode_body(payload)) - 1)
        raise PayloadTooLarge("too large", self.named[-1])


async def test_one_upload_costs_at_most_the_bounded_number_of_413s_then_the_uploader_says_so() -> None:
    transport = Shrinking()
    uploader, state, _, _ = make(transport=transport)
    for i in range(30):
        state.append_log(f"line {i} " + "x" * 200)
    async with asyncio.timeout(60):
        with pytest.raises(UploadCannotFit) as refused:
            await uploader.flush(force=True, status="completed", required=True)
    assert transport.started == MAX_REFUSED_AS_TOO_LARGE + 1
    assert str(refused.value).startswith(
        f"the service refused {MAX_REFUSED_AS_TOO_LARGE + 1} upload(s) of run r1 as too large, the last of "
    )
    assert uploader.stopped


async def test_the_last_413_names_the_limit_it_taught() -> None:
    """The error that stops the uploader carries the smallest limit a 413 named, as the 413 did."""
    transport = Shrinking()
    uploader, state, _, _ = make(transport=transport)
    for i in range(30):
        state.append_log(f"line {i} " + "x" * 200)
    with pytest.raises(UploadCannotFit) as refused:
        await uploader.flush(force=True, status="completed", required=True)
    assert refused.value.max_body_bytes == transport.named[-1]


# -- an upload at the limit ------------------------------------------------------------------------


async def fixed_part_size() -> int:
    """The bytes of an upload that is nothing but its fixed part (no split can shrink it)."""
    uploader, _, transport, _ = make()
    await uploader.flush(force=True, status="completed", required=True)
    return len(encode_body(transport.payloads[-1]))


async def test_an_upload_exactly_at_the_body_limit_is_sent() -> None:
    size = await fixed_part_size()
    transport = LimitedTransport(advertised=size, enforced=size)
    uploader, _, _, _ = make(transport=transport)
    await uploader.flush(force=True, status="completed", required=True)
    assert [len(encode_body(p)) for p in transport.payloads] == [size]
    assert uploader.upload_seq == 1


async def test_an_upload_one_byte_past_the_limit_in_any_split_is_never_sent_and_takes_no_number() -> None:
    size = await fixed_part_size()
    transport = LimitedTransport(advertised=size - 1, enforced=size - 1)
    uploader, _, _, _ = make(transport=transport)
    with pytest.raises(UploadCannotFit) as cannot:
        await uploader.flush(force=True, status="completed", required=True)
    assert str(cannot.value) == (
        f"an upload of run r1 cannot fit the service's body limit of {size - 1} bytes in any "
        f"split (its smallest part takes {size} bytes)"
    )
    assert cannot.value.max_body_bytes == size - 1
    assert transport.payloads == [] and transport.refused == []
    assert uploader.upload_seq == 0  # no upload was made: the next number is still 1


# -- what the body says of the run's end -----------------------------------------------------------


async def test_an_interrupted_upload_carries_its_reason_and_no_error() -> None:
    uploader, _, transport, _ = make()
    await uploader.flush(
        force=True, status="interrupted", error="not an end", interruption={"reason": "SIGTERM"}
    )
    body = transport.payloads[-1]
    assert body["interruption"] == {"reason": "SIGTERM"} and "error" not in body


async def test_a_running_upload_carries_no_interruption() -> None:
    uploader, _, transport, _ = make()
    await uploader.flush(force=True, interruption={"reason": "SIGTERM"})
    assert "interruption" not in transport.payloads[-1]


async def test_an_interrupted_upload_without_a_reason_says_none() -> None:
    uploader, _, transport, _ = make()
    await uploader.flush(force=True, status="interrupted")
    assert "interruption" not in transport.payloads[-1]


# -- the flags a caller reads ----------------------------------------------------------------------


async def test_an_uploader_closed_in_time_was_not_halted_and_cancelled_nothing() -> None:
    """`ledger report` asks the ledger again only after a request was cancelled in flight."""
    uploader, state, transport, _ = make(pipeline_steps=["load"])
    assert uploader.pipeline_steps_landed is False  # the step list goes with the first upload
    state.append_log("x")
    await uploader.flush(force=True)
    await uploader.aclose(timeout_s=10.0)
    assert transport.payloads[0]["pipeline_steps"] == ["load"]
    assert uploader.pipeline_steps_landed is True
    assert uploader.halted is False and uploader.cancelled_in_flight is False
