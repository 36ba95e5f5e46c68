"""What the client commands show for the service's JSON (pure rendering, no service)."""

from __future__ import annotations

import io

from rich.console import Console, RenderableType

from ledger.cli import render

NOW = 1_700_000_000_000


def text_of(renderable: RenderableType, width: int = 140) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    console.print(renderable)
    out = console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue()


def test_durations_read_naturally() -> None:
    assert [render.duration(ms) for ms in (0, 999, 1000, 59_999, 60_000, 245_000)] == [
        "0ms",
        "999ms",
        "1s",
        "59s",
        "1m 00s",
        "4m 05s",
    ]
    assert render.duration(2 * 3_600_000 + 7 * 60_000) == "2h 07m"
    assert render.duration(3 * 86_400_000 + 4 * 3_600_000) == "3d 04h"
    assert render.duration(None) == "-" and render.duration("x") == "-" and render.duration(True) == "-"
    # Clock skew between client and server must not print a negative age.
    assert render.duration(-5) == "0ms"


def test_run_row_shows_status_age_last_event_steps_and_rows() -> None:
    run = {
        "run_id": "run-1",
        "status": "running",
        "age_ms": 125_000,
        "created_at": NOW - 125_000,
        "updated_at": NOW - 3_000,
        "last_seq": 1234,
        "last_event_type": "step.progress",
        "terminal_status": None,
        "steps_total": 4,
        "steps_done": 2,
        "rows_completed": 4001,
        "rows_failed": 12,
        "rows_total": 5001,
    }
    assert render.run_row(run, NOW) == (
        "run-1",
        "running",
        "2m 05s",
        "#1,234 step.progress, 3s ago",
        "2/4 done",
        "4,001 / 5,001 (12 failed)",
        "",
    )


def test_run_row_counts_steps_by_state_and_says_why_the_run_ended() -> None:
    run = {
        "run_id": "r",
        "terminal_status": "failed",
        "terminal_error": "the runner's output ended without a result line",
        "steps_total": 4,
        "steps_done": 1,
        "steps_failed": 1,
        "steps_cancelled": 0,
        "steps_skipped": 2,
    }
    row = render.run_row(run, NOW)
    assert row[4] == "1/4 done (1 failed, 2 skipped)"
    assert row[6] == "the runner's output ended without a result line"
    long = render.run_row({**run, "terminal_error": "x" * 500}, NOW)[6]
    assert len(long) == 80 and long.endswith("…")


def test_run_row_prefers_the_terminal_status_and_copes_with_missing_fields() -> None:
    row = render.run_row({"run_id": "r", "status": "running", "terminal_status": "failed"}, NOW)
    assert row == ("r", "failed", "-", "#-", "-/- done", "- / -", "")
    # Without age_ms the age comes from created_at and the caller's clock.
    assert render.run_row({"run_id": "r", "created_at": NOW - 61_000}, NOW)[2] == "1m 01s"


def test_runs_table_has_the_columns_and_one_line_per_run() -> None:
    runs = [
        {"run_id": f"run-{i}", "status": "running", "age_ms": 1000 * i, "rows_completed": i, "rows_total": 10}
        for i in range(3)
    ]
    out = text_of(render.runs_table(runs, NOW))
    for column in render.RUNS_COLUMNS:
        assert column in out
    assert "3 run(s)" in out
    assert [line for line in out.splitlines() if "run-" in line][1].count("1 / 10") == 1


def test_runs_table_never_cuts_a_run_id_on_a_narrow_terminal() -> None:
    long_id = "demo-20261129-154633-51dbff"
    runs = [{"run_id": long_id, "status": "completed", "rows_completed": 3959, "rows_total": 6000}]
    out = text_of(render.runs_table(runs, NOW), width=60)
    assert long_id in out
    assert "completed" in out


def test_steps_are_ordered_by_start_with_unstarted_last_and_states_derived() -> None:
    progress = {
        "tool-3": {"started_at": NOW - 1000},
        "dataset-1": {"started_at": NOW - 5000, "completed": 700, "failed": 50, "total": 1000},
        "code-0": {"started_at": NOW - 9000, "completed_at": NOW - 8000},
        "code-4": {},
        "junk": "not an object",
    }
    steps = render.steps(progress)
    assert [s.node_id for s in steps] == ["code-0", "dataset-1", "tool-3", "code-4", "junk"]
    assert [s.state for s in steps] == ["completed", "running", "running", "pending", "pending"]
    mapped = steps[1]
    assert (mapped.processed, mapped.fraction()) == (750, 0.75)
    assert render.step_counts(mapped) == "700 / 1,000 (50 failed)"
    assert render.step_counts(steps[2]) == "running"
    assert render.steps(None) == [] and render.steps([1, 2]) == []


def test_a_step_shows_the_state_and_reason_the_ledger_gives_in_pipeline_order() -> None:
    """Never "done" from a completion time: a failed map with a completion time is failed."""
    progress = {
        "notify": {"position": 2, "state": "skipped", "reason": "the run ended before this step started"},
        "enrich": {
            "position": 1,
            "started_at": 5,
            "completed_at": 9,
            "completed": 400,
            "failed": 2,
            "total": 1000,
            "state": "failed",
            "reason": "run failed: no result line",
        },
        "load": {"position": 0, "started_at": 1, "completed_at": 2, "state": "completed"},
    }
    steps = render.steps(progress)
    assert [(s.node_id, s.state, s.reason) for s in steps] == [
        ("load", "completed", None),
        ("enrich", "failed", "run failed: no result line"),
        ("notify", "skipped", "the run ended before this step started"),
    ]
    console = Console(width=200, record=True)
    console.print(render.run_detail({"run_id": "r", "live_node_progress": progress}, NOW))
    text = console.export_text()
    enrich = next(line for line in text.splitlines() if "enrich" in line)
    assert "failed" in enrich and "run failed: no result line" in enrich and "done" not in enrich


def test_settlement_events_show_the_state_and_the_reason() -> None:
    line = render.event_summary(
        {
            "type": "step.failed",
            "node_id": "enrich",
            "state": "failed",
            "outcome": "failed",
            "reason": "map failed",
        }
    )
    assert line == "enrich · failed · map failed"
    # An older event (outcome only) shows its outcome, not "completed".
    old = {"type": "step.completed", "node_id": "m", "outcome": "failed", "error": "boom"}
    assert render.event_summary(old) == "m · failed · boom"


def test_step_bar_fills_by_rows_processed_and_full_for_finished_uncounted_steps() -> None:
    steps = render.steps(
        {
            "map": {"started_at": 1, "completed": 300, "failed": 100, "total": 1000},
            "over": {"started_at": 2, "completed": 1500, "total": 1000},
            "done": {"started_at": 3, "completed_at": 4},
            "waiting": {},
        }
    )
    bars = {s.node_id: render.step_bar(s) for s in steps}
    assert bars["map"].completed == 400 and bars["map"].total == 1000
    assert bars["over"].completed == 1000
    assert bars["done"].completed == 1000
    assert bars["waiting"].completed == 0


def test_run_detail_shows_each_step_with_counts_and_the_terminal_state() -> None:
    run = {
        "run_id": "run-9",
        "play_name": "enrich",
        "status": "completed",
        "created_at": NOW - 60_000,
        "updated_at": NOW - 1_000,
        "last_seq": 42,
        "terminal": {"status": "completed", "total_rows": 5000, "duration_ms": 12_500, "error": None},
        "live_node_progress": {
            "dataset-1": {
                "started_at": NOW - 50_000,
                "completed_at": NOW - 2_000,
                "completed": 4900,
                "failed": 100,
                "total": 5000,
                "message": "5,000 / 5,000 rows processed",
            }
        },
    }
    out = text_of(render.run_detail(run, NOW))
    assert "run-9" in out and "enrich" in out
    assert "completed · 5,000 rows · 12s" in out
    assert "4,900 / 5,000 (100 failed)" in out
    assert "5,000 / 5,000 rows processed" in out
    assert "#42, 1s ago" in out


def test_terminal_line_for_a_failed_and_a_live_run() -> None:
    failed = {"terminal": {"status": "failed", "error": "run watchdog: no progress"}}
    assert render.terminal_line(failed) == "failed: run watchdog: no progress"
    assert render.terminal_line({"status": "running", "terminal": None}) == "running (not terminal)"


def test_event_lines_summarise_each_type() -> None:
    ts = NOW + 123
    assert (
        render.event_line({"seq": 1, "type": "log", "ts": ts, "line": "hello"}) == "#1 22:13:20.123 log hello"
    )
    step = {"seq": 2, "type": "step.progress", "ts": ts, "node_id": "map-2", "completed": 10, "total": 50}
    assert render.event_summary(step) == "map-2 · 10 / 50"
    terminal = {"seq": 3, "type": "terminal", "ts": ts, "status": "failed", "error": "boom", "total_rows": 7}
    assert render.event_summary(terminal) == "failed · 7 rows · boom"
    assert render.event_summary({"type": "log.gap", "missing": 1500}) == "1,500 log line(s) not kept"
    assert render.event_summary({"type": "status", "status": "running"}) == "running"
    interrupted = {
        "type": "reporter.interrupted",
        "reason": "the reporter was interrupted (SIGTERM)",
        "signal": "SIGTERM",
    }
    assert render.event_summary(interrupted) == "the reporter was interrupted (SIGTERM)"
    assert render.event_summary({"type": "reporter.interrupted", "signal": "SIGINT"}) == (
        "the reporter was interrupted (SIGINT)"
    )
    assert render.event_summary({"type": "reporter.resumed", "status": "completed"}) == (
        "a reporter resumed the run (completed)"
    )
    unknown = {"seq": 4, "type": "something.new", "ts": ts, "phase": "created"}
    assert render.event_summary(unknown) == '{"phase": "created"}'


def test_pool_view_lists_counts_and_entries_newest_ready_first() -> None:
    entries = [
        {
            "id": "old",
            "state": "ready",
            "ready_at": NOW - 300_000,
            "created_at": NOW - 400_000,
            "expires_at": NOW + 60_000,
        },
        {
            "id": "warm",
            "state": "warming",
            "ready_at": None,
            "created_at": NOW - 5_000,
            "expires_at": NOW + 475_000,
        },
        {
            "id": "new",
            "state": "ready",
            "ready_at": NOW - 10_000,
            "created_at": NOW - 20_000,
            "expires_at": NOW + 460_000,
        },
    ]
    out = text_of(render.pool_view("default", "v7", {"available": 2, "warming": 1}, entries, NOW))
    assert "pool default, version v7: 2 available, 1 warming" in out
    ids = [word for line in out.splitlines() for word in line.split() if word in ("old", "warm", "new")]
    assert ids == ["new", "old", "warm"]
    assert "5m 00s" in out and "7m 55s" in out
    assert "no entries" in text_of(render.pool_view("p", "v", {"available": 0, "warming": 0}, [], NOW))


def test_pass_through_events_show_their_namespace_or_activity() -> None:
    lifecycle = {
        "type": "dataset.lifecycle",
        "event": {"type": "dataset.lifecycle", "tableNamespace": "leads_r1", "phase": "created"},
    }
    assert render.event_summary(lifecycle) == "leads_r1 created"
    flat = {"type": "dataset.lifecycle", "table_namespace": "t", "phase": "dropped"}
    assert render.event_summary(flat) == "t dropped"
    activity = {
        "type": "activity.observed",
        "activity_id": "notify-1",
        "observation": {"activityId": "notify-1", "state": "sent"},
    }
    assert render.event_summary(activity) == "notify-1 sent"
