"""The ProgressReporter end to end over a fake transport: finalize, reconciliation order, replay."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ledger.errors import LedgerError, LedgerUnavailable, StaleAttempt
from reporter import ProgressReporter, SimulatedRun, StepState
from tests.unit.reporter.fakes import FakeClock, FakeTransport, boom, settle

SIM = SimulatedRun(rows=1_000, fail_every=10, page_size=250)
T = "[2026-01-01T00:00:00.000Z] "


def make(
    transport: FakeTransport | None = None, *, skip_waits: bool = False, **kwargs: Any
) -> tuple[ProgressReporter, FakeTransport]:
    clock = FakeClock()
    transport = transport or FakeTransport()
    kwargs.setdefault("contract", SIM.contract())

    async def skip(seconds: float) -> None:
        # The time passes at once: retries within a deadline are counted, never waited for.
        clock.now += seconds
        await asyncio.sleep(0)

    reporter = ProgressReporter(
        "run-1",
        transport,
        clock=clock.monotonic,
        sleep=skip if skip_waits else clock.sleep,
        wall_clock_ms=clock.wall_ms,
        **kwargs,
    )
    return reporter, transport


def feed(reporter: ProgressReporter, run: SimulatedRun = SIM) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for event in run.events():
        if event["type"] == "result":
            result = event
        else:
            reporter.on_runner_event(event)
    return result


def map_frame(result: dict[str, Any], **counts: int) -> dict[str, Any]:
    frame = result["checkpoint"]["mapFrames"]["enrich"]
    frame.update(counts)
    return result


async def test_a_simulated_run_ends_with_the_truth_and_terminal_status() -> None:
    reporter, transport = make()
    result = feed(reporter)
    await reporter.finalize(result)
    await reporter.aclose()
    final = transport.payloads[-1]
    assert final["status"] == "completed"
    enrich = final["live_node_progress"]["enrich"]
    assert (enrich["completed"], enrich["failed"], enrich["total"]) == (900, 100, 1000)
    # Processed: the completed rows and the failed ones.
    assert enrich["message"] == "1,000 / 1,000 rows processed"
    assert "completed_at" in enrich
    assert reporter.step_states() == {
        "load": StepState.COMPLETED,
        "enrich": StepState.COMPLETED,
        "notify": StepState.COMPLETED,
        "on_error": StepState.UNEXECUTED,
    }
    assert "on_error" not in final["live_node_progress"]
    assert [p["upload_seq"] for p in transport.payloads] == list(range(1, len(transport.payloads) + 1))
    assert transport.max_in_flight == 1
    lifecycle = [e for p in transport.payloads for e in p["dataset_lifecycle_events"]]
    assert len(lifecycle) == 1
    replay = final["terminal_log_replay"]
    assert replay["dedupe_mode"] == "positional" and replay["total_count"] == len(result["logs"])


async def test_sheet_outcomes_win_over_the_checkpoint_which_wins_over_live_counters() -> None:
    reporter, transport = make()
    result = map_frame(feed(reporter), completedRowsCount=800, failedRowsCount=150, totalRows=1000)
    transport.outcomes = [
        {"table_namespace": SIM.table_namespace, "completed": 910, "failed": 90, "total": 1000}
    ]
    await reporter.load_terminal_truth()
    await reporter.finalize(result)
    enrich = transport.payloads[-1]["live_node_progress"]["enrich"]
    assert (enrich["completed"], enrich["failed"]) == (910, 90)

    reporter2, transport2 = make()
    result2 = map_frame(feed(reporter2), completedRowsCount=800, failedRowsCount=150, totalRows=1000)
    await reporter2.finalize(result2)  # no sheet outcomes: the checkpoint is the truth
    enrich2 = transport2.payloads[-1]["live_node_progress"]["enrich"]
    assert (enrich2["completed"], enrich2["failed"], enrich2["waiting_rows"]) == (800, 150, 0)
    await reporter.aclose()
    await reporter2.aclose()


async def test_a_zero_event_run_with_sheet_outcomes_still_ends_with_real_map_progress() -> None:
    reporter, transport = make()
    transport.outcomes = [{"table_namespace": "leads_x", "completed": 40, "failed": 2, "total": 42}]
    await reporter.load_terminal_truth()
    await reporter.finalize({"type": "result", "status": "completed", "logs": []})
    [final] = transport.payloads
    enrich = final["live_node_progress"]["enrich"]
    assert (enrich["completed"], enrich["failed"], enrich["total"]) == (40, 2, 42)
    assert enrich["artifact_table_namespace"] == "leads_x"
    assert "started_at" in enrich and "completed_at" in enrich
    assert final["terminal_log_replay"] is None


async def test_suspended_result_keeps_live_counters() -> None:
    reporter, transport = make()
    reporter.on_runner_event(
        {
            "type": "execution_event",
            "event": {
                "type": "map.progress",
                "mapNodeId": "enrich",
                "totalRows": 10,
                "completedRows": 3,
                "failedRows": 0,
            },
        }
    )
    transport.outcomes = [{"table_namespace": "leads", "completed": 9, "failed": 0, "total": 10}]
    await reporter.load_terminal_truth()
    await reporter.finalize({"status": "suspended", "checkpoint": {"mapFrames": {}}})
    final = transport.payloads[-1]
    assert final["status"] == "running"
    assert final["live_node_progress"]["enrich"]["completed"] == 3


async def test_failed_result_fails_started_steps_in_a_failed_final_upload() -> None:
    run = SimulatedRun(rows=100, fail_every=0, page_size=100, fail_run=True)
    reporter, transport = make(contract=run.contract())
    result = feed(reporter, run)
    await reporter.finalize(result)
    final = transport.payloads[-1]
    assert final["status"] == "failed"
    assert reporter.step_states()["notify"] is StepState.FAILED
    assert final["live_node_progress"]["notify"]["node_io"]["error"] == "tool slack.post failed"
    # The map finished before the run failed: its completion lands in a running upload first
    # (the ledger reads a completion first seen in a failed upload as a failed step).
    first = next(p for p in transport.payloads if "completed_at" in p["live_node_progress"].get("enrich", {}))
    assert first["status"] == "running"


async def test_durable_observations_fold_in_only_when_at_least_as_recent() -> None:
    reporter, transport = make()
    reporter.on_runner_event(
        {
            "type": "execution_event",
            "event": {
                "type": "docflow.node.completed",
                "nodeId": "doc",
                "attempt": 2,
                "invocationId": "doc:4",
                "outputs": "live",
                "at": 5,
            },
        }
    )
    transport.observations = [
        {
            "node_id": "doc",
            "attempt": 1,
            "invocation_seq": 9,
            "status": "completed",
            "outputs": "older attempt",
        },
        {
            "node_id": "gone",
            "attempt": 0,
            "invocation_seq": 0,
            "status": "completed",
            "outputs": "only durable",
            "settled_at": 8,
        },
    ]
    await reporter.load_terminal_truth()
    await reporter.finalize({"status": "completed"})
    nodes = transport.payloads[-1]["live_node_progress"]
    assert nodes["doc"]["node_io"]["outputs"] == "live"
    assert nodes["gone"]["node_io"]["outputs"] == "only durable" and nodes["gone"]["completed_at"] == 8


async def test_direct_worker_replay_drops_lines_the_live_stream_carried() -> None:
    reporter, transport = make(mode="direct_worker", initial_live_log_total_count=50)
    for line in [T + "a", T + "a", "host noise"]:
        reporter.on_runner_event({"type": "log", "line": line, "source": "runner"})
    reporter.on_runner_event({"type": "log", "line": "sandbox up", "source": "worker"})
    await reporter.finalize(
        {"status": "completed", "logs": [T + "a", T + "a", T + "a", "host noise", T + "b"]}
    )
    final = transport.payloads[-1]
    assert final["live_log_total_count"] == 53
    assert final["terminal_log_replay"] == {
        "lines": [T + "a", T + "b"],
        "dedupe_mode": "positional",
        "total_count": 55,
    }


async def test_replay_all_and_skip() -> None:
    reporter, transport = make(mode="direct_worker")
    reporter.on_runner_event({"type": "log", "line": T + "a"})
    await reporter.finalize({"status": "running", "logs": [T + "a"]}, replay_all_terminal_logs=True)
    assert transport.payloads[-1]["terminal_log_replay"]["dedupe_mode"] == "exact"
    await reporter.finalize({"status": "completed", "logs": [T + "z"]}, skip_terminal_log_replay=True)
    assert transport.payloads[-1]["terminal_log_replay"] is None


async def test_every_finalize_outlasts_faults_until_its_deadline_and_only_a_terminal_one_raises() -> None:
    reporter, transport = make(skip_waits=True)
    transport.failures.extend(boom("down") for _ in range(10_000))
    await reporter.finalize(None, deadline_s=1.0)  # status running: gives up quietly at the deadline
    assert transport.payloads == [] and transport.started > 1
    transport.failures.clear()
    transport.failures.extend([boom("still down"), boom("and again")])
    await reporter.finalize({"status": "completed"})
    # The lost running upload is resent under its seq, then the terminal one: nothing doubled.
    assert [(p["upload_seq"], p["status"]) for p in transport.payloads] == [(1, "running"), (2, "completed")]


async def test_a_running_finalize_after_a_lost_answer_sends_that_upload_again() -> None:
    reporter, transport = make(skip_waits=True)
    reporter.on_runner_event({"type": "log", "line": "last words"})
    transport.failures.append(boom("answer lost"))
    await reporter.finalize({"status": "suspended"})
    assert [(p["upload_seq"], p["live_logs"]) for p in transport.payloads] == [(1, ["last words"])]


async def test_a_terminal_finalize_raises_once_the_deadline_passes() -> None:
    reporter, transport = make(skip_waits=True)
    transport.failures.extend(boom("down") for _ in range(10_000))
    with pytest.raises(LedgerUnavailable, match="down"):
        await reporter.finalize({"status": "completed"}, deadline_s=1.0)


async def test_a_refusal_of_the_final_upload_raises_at_once() -> None:
    reporter, transport = make(skip_waits=True)
    transport.failures.append(LedgerError("no"))
    with pytest.raises(LedgerError):
        await reporter.finalize({"status": "completed"})
    assert transport.started == 1


async def test_finalize_deadline_raises_but_does_not_cancel_the_upload() -> None:
    reporter, transport = make()
    transport.hold()
    with pytest.raises(TimeoutError):
        await reporter.finalize({"status": "completed"}, deadline_s=0)
    assert transport.in_flight == 1
    transport.release()
    await settle()
    assert transport.payloads[-1]["status"] == "completed"
    await reporter.aclose()


async def test_stale_attempt_stops_the_reporter() -> None:
    reporter, transport = make()
    transport.failures.append(StaleAttempt("r", 1, 2, "stale producer attempt"))
    await reporter.flush(force=True)
    assert reporter.stopped
    with pytest.raises(StaleAttempt):
        await reporter.finalize({"status": "completed"})
    assert transport.payloads == []


async def test_events_fed_outside_an_event_loop_are_sent_by_the_next_flush() -> None:
    reporter, transport = make()
    await settle()  # the construction's own upload (pre-dataset steps started)
    before = transport.started
    await asyncio.to_thread(reporter.on_runner_event, {"type": "log", "line": "from a thread"})
    await settle()
    assert transport.started == before
    await reporter.flush(force=True)
    assert transport.payloads[-1]["live_logs"] == ["from a thread"]


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mode"):
        ProgressReporter("r", FakeTransport(), mode="loud")  # type: ignore[arg-type]


async def test_the_first_upload_names_the_contracts_steps_in_pipeline_order_and_no_later_one() -> None:
    # The ledger keeps them once an upload carrying them has landed: they need not travel again.
    contract = {
        "staticPipeline": {
            "substeps": [
                {"type": "code", "id": "load"},
                {"type": "code", "id": "load"},  # repeated: sent once
                {"type": "dataset", "id": "map", "tableNamespace": "leads"},
                {"type": "tool", "toolId": "slack.post"},
                {
                    "type": "code",
                    "id": "   ",
                },  # blank: the ledger would refuse it, the step gets a made-up id
            ]
        }
    }
    reporter, transport = make(contract=contract)
    await reporter.flush(force=True)
    reporter.on_runner_event({"type": "log", "line": "x"})
    await reporter.finalize({"type": "result", "status": "completed"})
    first, *later = transport.payloads
    assert first["pipeline_steps"] == ["load", "map", "tool-3", "code-4"]
    assert later and all("pipeline_steps" not in payload for payload in later)


async def test_without_a_contract_no_step_list_is_sent() -> None:
    reporter, transport = make(contract=None)
    await reporter.flush(force=True)
    assert "pipeline_steps" not in transport.payloads[0]
