"""`ledger report`: stdin JSON lines through the reporter, the exit codes, the warnings."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from ledger.cli import report as report_cli
from ledger.cli.app import cli
from ledger.errors import LedgerError, RunTerminal, StaleAttempt, Unauthorized
from reporter import HttpTransport, ProgressReporter, RetryPolicy, SimulatedRun
from tests.unit.reporter.fakes import FakeClock, FakeTransport

SIM = SimulatedRun(rows=300, fail_every=7, page_size=100)


async def lines_of(items: list[str]) -> AsyncIterator[str]:
    for item in items:
        yield item


def make(transport: FakeTransport) -> ProgressReporter:
    clock = FakeClock()
    return ProgressReporter(
        "run-cli",
        transport,
        contract=SIM.contract(),
        clock=clock.monotonic,
        sleep=clock.sleep,
        wall_clock_ms=clock.wall_ms,
    )


async def test_malformed_lines_are_reported_with_their_number_and_skipped() -> None:
    transport = FakeTransport()
    warnings: list[str] = []
    events = [json.dumps(e) for e in SIM.events()]
    stream = [events[0], "{not json", "", "[1, 2]", *events[1:]]
    code = await report_cli.report(make(transport), lines_of(stream), warnings.append)
    assert code == report_cli.EXIT_OK
    *skipped, summary = warnings
    assert [w.split(":")[0] for w in skipped] == ["line 2", "line 4"]
    assert summary.startswith("run run-cli completed: ") and summary.endswith("; 2 lines could not be used")
    final = transport.payloads[-1]
    assert final["status"] == "completed"
    assert final["live_node_progress"]["enrich"]["failed"] == SIM.failed_rows


async def test_end_of_input_without_a_result_reports_the_run_failed() -> None:
    transport = FakeTransport()
    transport.outcomes = [
        {"table_namespace": SIM.table_namespace, "completed": 10, "failed": 1, "total": 300}
    ]
    warnings: list[str] = []
    events = [json.dumps(e) for e in SIM.events() if e["type"] != "result"][:50]
    code = await report_cli.report(make(transport), lines_of(events), warnings.append)
    assert code == report_cli.EXIT_NO_RESULT
    assert any("no result line" in w for w in warnings)
    final = transport.payloads[-1]
    assert final["status"] == "failed"
    assert final["error"] == "the runner's output ended without a result line"
    assert report_cli.NO_RESULT_LINE in final["live_logs"]
    assert final["live_node_progress"]["enrich"]["completed"] == 10  # still reconciled from the sheets


async def test_stale_attempt_exit_code() -> None:
    transport = FakeTransport()
    transport.failures = [StaleAttempt("r", 1, 2, "stale producer attempt")] * 10
    warnings: list[str] = []
    code = await report_cli.report(
        make(transport), lines_of([json.dumps({"type": "result", "status": "completed"})]), warnings.append
    )
    assert code == report_cli.EXIT_STALE
    assert "newer attempt" in warnings[-1]


def test_the_command_pipes_stdin_to_the_ledger_over_http(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/sheets"):
            return httpx.Response(200, json={"outcomes": []})
        if request.url.path.endswith("/observations"):
            return httpx.Response(200, json={"observations": []})
        return httpx.Response(200, json={"duplicate": False})

    def transport_factory(base_url: str, token: str | None, **_: Any) -> HttpTransport:
        mock = httpx.MockTransport(handler)
        return HttpTransport(base_url, token, transport=mock, retry_policy=RetryPolicy(max_attempts=1))

    monkeypatch.setattr(report_cli, "HttpTransport", transport_factory)
    monkeypatch.setenv("LEDGER_URL", "http://ledger.test:9999/")
    monkeypatch.setenv("LEDGER_TOKEN", "secret")
    contract = tmp_path / "contract.json"
    contract.write_text(json.dumps(SIM.contract()))
    stdin = "\n".join(json.dumps(e) for e in SIM.events()) + "\n"
    result = CliRunner().invoke(
        cli,
        [
            "report",
            "--run-id",
            "r-9",
            "--contract",
            str(contract),
            "--attempt",
            "4",
            "--mode",
            "direct_worker",
        ],
        input=stdin,
    )
    assert result.exit_code == 0, result.output
    uploads = [json.loads(r.content) for r in seen if r.method == "POST"]
    assert {str(r.url.host) for r in seen} == {"ledger.test"}
    assert all(r.headers["Authorization"] == "Bearer secret" for r in seen)
    assert uploads[-1]["status"] == "completed" and uploads[-1]["producer_attempt"] == 4
    assert uploads[-1]["live_node_progress"]["enrich"]["completed"] == SIM.completed_rows
    # direct_worker mode: the worker's own line stayed out of the durable log
    assert all("sandbox ready" not in line for u in uploads for line in u["live_logs"])
    reads = [r.url.path for r in seen if r.method == "GET"]
    # The limits are asked once, before the first upload (this fake answers without a limit).
    assert reads.count("/v1/limits") == 1
    assert [path for path in reads if path != "/v1/limits"] == [
        "/v1/runs/r-9/sheets",
        "/v1/runs/r-9/observations",
    ]


def test_a_bad_contract_file_is_a_clear_error(tmp_path: Path) -> None:
    contract = tmp_path / "c.json"
    contract.write_text("{nope")
    result = CliRunner().invoke(cli, ["report", "--run-id", "r", "--contract", str(contract)], input="")
    assert result.exit_code == 2
    assert "cannot read the contract" in result.output


async def test_a_run_ended_by_someone_else_exits_4_naming_who_and_how() -> None:
    transport = FakeTransport()
    terminal = {"status": "failed", "error": "run watchdog: no progress; orchestrator presumed dead"}
    transport.failures = [RunTerminal("run run-cli had already ended as failed", "r", terminal)]
    warnings: list[str] = []
    result = json.dumps({"type": "result", "status": "completed"})
    code = await report_cli.report(make(transport), lines_of([result]), warnings.append)
    assert code == report_cli.EXIT_TERMINAL == 4
    assert "already ended as failed" in warnings[-1]
    assert transport.started == 1  # not retried


async def test_a_refused_final_upload_exits_5() -> None:
    transport = FakeTransport()
    transport.failures = [LedgerError("no")]
    warnings: list[str] = []
    result = json.dumps({"type": "result", "status": "completed"})
    code = await report_cli.report(make(transport), lines_of([result]), warnings.append)
    assert code == report_cli.EXIT_UPLOAD_FAILED == 5
    assert "final upload" in warnings[-1]


async def test_batches_of_one_attempt_continue_after_what_the_ledger_holds() -> None:
    transport = FakeTransport()
    events = [json.dumps(e) for e in SIM.events() if e["type"] != "result"]
    first = await report_cli.report(make(transport), lines_of(events[:20]), print, finalize=False)
    assert first == report_cli.EXIT_OK
    assert all(p["status"] == "running" for p in transport.payloads)
    last = transport.payloads[-1]
    transport.runs["run-cli"] = {
        "producer_attempt": 1,
        "last_upload_seq": last["upload_seq"],
        "live_log_count": last["live_log_total_count"],
        "live_node_progress": last["live_node_progress"],
        "terminal": None,
    }
    sent_before = len(transport.payloads)
    rest = [*events[20:], json.dumps({"type": "result", "status": "completed"})]
    second = await report_cli.report(make(transport), lines_of(rest), print, resume=True)
    assert second == report_cli.EXIT_OK
    later = transport.payloads[sent_before:]
    assert later[0]["upload_seq"] == last["upload_seq"] + 1
    assert later[-1]["status"] == "completed"
    # Positional logs: the second batch counts on from the first batch's lines.
    batch_lines = sum(1 for e in events[20:] if json.loads(e)["type"] == "log")
    assert later[-1]["live_log_total_count"] == last["live_log_total_count"] + batch_lines


async def endless(first: list[str], then: Callable[[], object] = lambda: None) -> AsyncIterator[str]:
    """A runner that writes `first`, then (`then()` once it is read) never writes nor ends."""
    for item in first:
        yield item
    then()
    await asyncio.Event().wait()


async def test_a_signal_stops_the_reading_and_leaves_the_run_interrupted_with_one_line() -> None:
    transport = FakeTransport()
    warnings: list[str] = []
    interrupted: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    line = json.dumps({"type": "log", "line": "working"})
    code = await report_cli.report(
        make(transport),
        endless([line], then=lambda: interrupted.set_result("SIGTERM")),
        warnings.append,
        interrupted=interrupted,
        resume_command="ledger report --run-id run-cli --resume",
    )
    assert code == report_cli.EXIT_REPORT_INTERRUPTED == 11
    assert warnings == [
        "interrupted (SIGTERM): run run-cli is left interrupted with what had arrived (1 log line); "
        "continue it with: ledger report --run-id run-cli --resume"
    ]
    last = transport.payloads[-1]
    assert last["status"] == "interrupted" and last["live_logs"] == ["working"]


async def test_a_refused_token_stops_the_reading_at_the_first_refusal() -> None:
    transport = FakeTransport()
    transport.failures = [Unauthorized("unknown token", status=401)]
    warnings: list[str] = []
    line = json.dumps({"type": "log", "line": "working"})
    code = await report_cli.report(make(transport), endless([line]), warnings.append)
    assert code == report_cli.EXIT_TOKEN == 10
    [said] = warnings
    assert said.startswith("the ledger service refused the API token (unknown token)")
    assert "LEDGER_TOKEN" in said


async def test_a_duplicate_on_an_interrupted_run_says_to_resume_it() -> None:
    transport = FakeTransport()
    transport.answers = [{"duplicate": True}]
    transport.runs["run-cli"] = {"status": "interrupted"}
    warnings: list[str] = []
    line = json.dumps({"type": "log", "line": "working"})
    code = await report_cli.report(
        make(transport),
        endless([line]),
        warnings.append,
        resume_command="ledger report --run-id run-cli --resume",
    )
    assert code == report_cli.EXIT_NEEDS_RESUME == 12
    assert warnings == [
        "run run-cli was interrupted and waits for a reporter that resumes it; "
        "continue it with: ledger report --run-id run-cli --resume"
    ]
