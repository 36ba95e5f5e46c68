"""What a hostile runner's input does to the reporter: lines nested past any stack, step lists past
the body limit, uploads no split can fit, a final upload that outlasts the deadline. Each ends on
time with the truth and a line that says why."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ledger.cli import report as report_cli
from ledger.errors import PayloadTooLarge
from ledger.validate import MAX_BODY_BYTES, encode_body
from reporter import ProgressReporter
from reporter import uploader as uploader_module
from reporter.lines import MAX_LINE_DEPTH, decode_line
from reporter.state import ProgressState
from reporter.uploader import MAX_REFUSED_AS_TOO_LARGE, CoalescingUploader, UploadCannotFit
from tests.unit.reporter.fakes import FakeClock, FakeTransport
from tests.unit.reporter.test_upload_size import LimitedTransport


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# -- any line decodes to a value or a reason ------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_LINE_DEPTH - 1, MAX_LINE_DEPTH])
def test_a_line_up_to_the_depth_bound_decodes(depth: int) -> None:
    value, problem = decode_line(nested(depth))
    assert problem is None and isinstance(value, list)


@pytest.mark.parametrize("depth", [MAX_LINE_DEPTH + 1, 990, 1_000, 100_000])
def test_a_line_past_the_depth_bound_is_junk_with_its_reason(depth: int) -> None:
    assert decode_line(nested(depth)) == (None, f"nests deeper than {MAX_LINE_DEPTH} levels")


def test_a_line_with_many_brackets_but_little_depth_decodes() -> None:
    wide = json.dumps({"type": "log", "line": "x", "rows": [[i] for i in range(5_000)]})
    value, problem = decode_line(wide)
    assert problem is None and isinstance(value, dict)


@pytest.mark.parametrize("text", ["{", "[1, 2", "NaN", '{"a": 1e999999}'])
def test_a_line_that_is_not_json_says_so(text: str) -> None:
    value, problem = decode_line(text)
    if problem is None:  # Python reads NaN and huge floats; the protocol checks have the last word
        return
    assert value is None and problem.startswith("not JSON")


async def lines_of(items: list[str]) -> AsyncIterator[str]:
    for item in items:
        yield item


def make_reporter(transport: FakeTransport, contract: object = None) -> ProgressReporter:
    clock = FakeClock()
    return ProgressReporter(
        "run-hostile", transport, contract=contract, clock=clock.monotonic, sleep=clock.sleep
    )


async def test_a_deep_line_is_skipped_with_its_reason_and_the_run_ends() -> None:
    transport = FakeTransport()
    warnings: list[str] = []
    stream = [
        json.dumps({"type": "log", "line": "before"}),
        '{"type": "log", "line": "deep", "x": ' + nested(100_000) + "}",
        json.dumps({"type": "log", "line": "after"}),
        json.dumps({"type": "result", "status": "completed"}),
    ]
    code = await report_cli.report(make_reporter(transport), lines_of(stream), warnings.append)
    assert code == report_cli.EXIT_OK
    assert warnings == [
        f"line 2: nests deeper than {MAX_LINE_DEPTH} levels; skipped",
        "run run-hostile completed: no steps; 1 line could not be used",
    ]
    # The skipped line is no line of the log: the channel holds the two around it (an upload may
    # carry a line again; the ledger places each by its position).
    assert all("deep" not in p["live_logs"] for p in transport.payloads)
    last = transport.payloads[-1]
    assert last["live_log_total_count"] == 2 and last["live_logs"] == ["before", "after"]
    assert last["status"] == "completed"


# -- every loop obeys the deadline ----------------------------------------------------------------


def make_uploader(transport: FakeTransport, **options: Any) -> CoalescingUploader:
    clock = FakeClock()
    return CoalescingUploader(
        state=ProgressState(now_ms=clock.wall_ms),
        transport=transport,
        clock=clock.monotonic,
        sleep=clock.sleep,
        wall_clock_ms=clock.wall_ms,
        trailing_flush=False,
        **{"run_id": "r1", **options},
    )


async def test_a_step_list_past_the_body_limit_is_bounded_and_sent_once() -> None:
    # Every upload repeated 1.1 MB of step ids: each was refused, halved and sent again, forever.
    steps = [f"{i:04d}" + "s" * 1_100 for i in range(1_000)]
    transport = LimitedTransport(advertised=None, enforced=MAX_BODY_BYTES)
    uploader = make_uploader(transport, pipeline_steps=steps)
    async with asyncio.timeout(30):
        await uploader.flush(force=True)
        await uploader.flush(force=True, status="completed", required=True)
    assert transport.refused == []
    first, *later = transport.payloads
    listed = first["pipeline_steps"]
    assert listed == steps[: len(listed)] and 0 < len(listed) < len(steps)
    assert len(encode_body(listed)) <= uploader.bounds.value_bytes
    assert later and all("pipeline_steps" not in payload for payload in later)
    assert uploader.sanitizer.counts["pipeline step"] == len(steps) - len(listed)


async def test_a_step_too_long_for_any_upload_is_left_out_of_the_list() -> None:
    transport = LimitedTransport(advertised=None, enforced=MAX_BODY_BYTES)
    uploader = make_uploader(transport, pipeline_steps=["s" * 2_000_000, "after"])
    await uploader.flush(force=True, status="completed", required=True)
    assert [p.get("pipeline_steps") for p in transport.payloads] == [["after"]]


async def test_413s_that_teach_nothing_stop_the_uploader_after_a_bounded_number_of_requests() -> None:
    class Refusing(FakeTransport):
        async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
            self.started += 1
            raise PayloadTooLarge("a proxy refuses it", None)

    transport = Refusing()
    uploader = make_uploader(transport)
    uploader.state.append_log("x" * 5_000)
    with pytest.raises(UploadCannotFit, match="refused"):
        await uploader.flush(force=True, status="completed", required=True)
    assert transport.started <= MAX_REFUSED_AS_TOO_LARGE + 1
    asked = transport.started
    with pytest.raises(UploadCannotFit):
        await uploader.flush(force=True, status="completed", required=True)
    assert transport.started == asked and uploader.stopped


async def test_an_upload_whose_fixed_part_fits_no_body_is_never_sent() -> None:
    transport = LimitedTransport(advertised=600, enforced=600)
    uploader = make_uploader(transport, run_id="r" * 512)
    uploader.state.append_log("x")
    with pytest.raises(UploadCannotFit, match="cannot fit the service's body limit of 600 bytes"):
        await uploader.flush(force=True, status="completed", required=True)
    assert transport.payloads == [] and transport.refused == []


async def test_closing_after_its_time_starts_no_request_and_cancels_the_one_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(uploader_module, "IN_FLIGHT_WAIT_S", 0.01)
    transport = FakeTransport()
    transport.hold()
    uploader = make_uploader(transport)
    uploader.state.append_log("x")
    flushing = asyncio.ensure_future(uploader.flush(force=True))
    await asyncio.sleep(0)
    uploader.state.append_log("y")
    uploader.schedule(force=True)  # pending behind the one in flight
    await uploader.aclose(timeout_s=0.01)
    assert uploader.halted and uploader.cancelled_in_flight
    assert transport.started == 1 and transport.payloads == []
    flushing.cancel()


# -- the exit code is what the ledger holds --------------------------------------------------------


class Recording(FakeTransport):
    """Holds uploads at its gate; a terminal upload that lands ends the run in `runs`."""

    async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
        answer = await super().upload(payload)
        if payload["status"] != "running":
            self.runs[payload["run_id"]] = {"terminal": {"status": payload["status"]}}
        return answer


async def test_a_final_upload_that_lands_after_the_deadline_exits_0() -> None:
    # It used to say "the final upload … failed: " (no reason) and exit 5; then the run completed.
    transport = Recording()
    transport.hold()
    warnings: list[str] = []
    reporter = make_reporter(transport)

    async def release_later() -> None:
        await asyncio.sleep(0.3)
        transport.release()

    releasing = asyncio.ensure_future(release_later())
    stream = [json.dumps({"type": "result", "status": "completed"})]
    code = await report_cli.report(reporter, lines_of(stream), warnings.append, deadline_s=0.05)
    await releasing
    assert code == report_cli.EXIT_OK, warnings
    assert transport.runs["run-hostile"]["terminal"]["status"] == "completed"


async def test_a_final_upload_with_no_answer_exits_5_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(uploader_module, "IN_FLIGHT_WAIT_S", 0.05)
    monkeypatch.setattr(report_cli, "TRUTH_WAIT_S", 0.2)
    transport = Recording()
    transport.hold()
    warnings: list[str] = []
    stream = [json.dumps({"type": "result", "status": "completed"})]
    code = await report_cli.report(
        make_reporter(transport), lines_of(stream), warnings.append, deadline_s=0.05
    )
    assert code == report_cli.EXIT_UPLOAD_FAILED
    [line] = warnings
    assert line.startswith("the final upload for run run-hostile failed: ")
    assert "deadline (0.05 s, --deadline) passed" in line
    assert "run-hostile" not in transport.runs
