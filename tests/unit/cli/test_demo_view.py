"""The demo's plan (what the simulated worker does) and its live view, without a service."""

from __future__ import annotations

import io
from collections import Counter
from itertools import pairwise

import pytest
from rich.console import Console

from ledger.cli.demo import command as demo
from ledger.cli.demo.scenario import DemoPlan, Pacer, restamped
from ledger.cli.demo.view import DemoView


def map_frames(plan: DemoPlan) -> list[dict[str, object]]:
    frames = []
    for event in plan.live_events():
        inner = event.get("event")
        if isinstance(inner, dict) and str(inner.get("type", "")).startswith("map."):
            frames.append(inner)
    return frames


def test_plan_has_three_steps_before_the_dataset_then_a_tool_and_an_untaken_branch() -> None:
    plan = DemoPlan()
    assert plan.step_order() == ["load", "validate", "dedupe", "enrich", "notify", "on_error"]
    kinds = [s["type"] for s in plan.contract()["staticPipeline"]["substeps"]]
    assert kinds == ["code", "code", "code", "dataset", "tool", "code"]
    assert plan.map_node_id() == "enrich"


def test_live_events_carry_every_row_and_end_with_the_result() -> None:
    plan = DemoPlan(rows=5_000)
    events = list(plan.live_events())
    frames = map_frames(plan)
    assert {"map.started", "map.completed"} <= {str(f["type"]) for f in frames}
    assert Counter(e["type"] for e in events)["row_update"] == 5_000
    assert events[-1]["type"] == "result"
    frame = events[-1]["checkpoint"]["mapFrames"]["enrich"]
    assert frame["completedRowsCount"] + frame["failedRowsCount"] == 5_000


def test_every_source_of_the_map_counts_agrees() -> None:
    # One story: the last live frame, the checkpoint and the sheet say the same counts, so the demo
    # never shows a number go down or three totals.
    plan = DemoPlan(rows=6_000, fail_every=97)
    last = map_frames(plan)[-1]
    frame = list(plan.live_events())[-1]["checkpoint"]["mapFrames"]["enrich"]
    statuses = Counter(r["status"] for r in plan.sheet_rows())
    expected = plan.expected()
    assert (expected["completed"], expected["failed"], expected["total"]) == (5_939, 61, 6_000)
    assert (last["completedRows"], last["failedRows"]) == (5_939, 61)
    assert (frame["completedRowsCount"], frame["failedRowsCount"]) == (5_939, 61)
    assert statuses == {"completed": 5_939, "failed": 61}
    assert len({r["row_key"] for r in plan.sheet_rows()}) == 6_000


def test_map_counts_never_go_down_in_the_live_frames() -> None:
    seen = [
        (int(str(f["completedRows"])), int(str(f["failedRows"]))) for f in map_frames(DemoPlan(rows=2_000))
    ]
    assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in pairwise(seen))


def test_log_lines_are_stamped_when_written() -> None:
    line = {"type": "log", "line": "[2026-01-01T00:00:00.000Z] Starting map over 3 items", "source": "runner"}
    stamped = restamped(line, now=lambda: 1_800_000_000.25)
    assert stamped == {**line, "line": "[2027-01-15T08:00:00.250Z] Starting map over 3 items"}
    assert line["line"].startswith("[2026-01-01")  # the event itself is left as it was
    for untouched in (
        {"type": "log", "line": "no stamp"},
        {"type": "log", "line": "[unterminated"},
        {"type": "row_update", "line": "[x] y"},
    ):
        assert restamped(untouched, now=lambda: 0.0) is untouched
    assert all(
        not str(e.get("line", "")).startswith("[2026-01-01")
        for e in map(restamped, DemoPlan(rows=200).live_events())
    )


async def test_pacer_sleeps_only_when_ahead_and_in_slices() -> None:
    now = [0.0]
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    pacer = Pacer(1000.0, clock=lambda: now[0], sleep=sleep)
    for _ in range(1000):
        await pacer.row()
    assert all(s >= 0.02 for s in sleeps)
    assert 0.97 <= now[0] <= 1.0
    assert len(sleeps) <= 50
    # A slow worker (behind schedule) is never made to sleep.
    behind = Pacer(1000.0, clock=lambda: now[0], sleep=sleep)
    now[0] += 10
    before = len(sleeps)
    for _ in range(100):
        await behind.row()
    assert len(sleeps) == before


def test_view_tracks_steps_rates_and_prints_plain_lines_for_non_log_events() -> None:
    view = DemoView(run_id="run-1", step_order=["load", "enrich", "notify"])
    assert view.apply({"seq": 1, "type": "log", "ts": 0, "line": "hello"}, 10.0) is None
    assert view.apply({"seq": 2, "type": "step.started", "node_id": "enrich", "ts": 0}, 10.5) == (
        "[   0.5s] started    enrich"
    )
    first = view.apply(
        {
            "seq": 3,
            "type": "step.progress",
            "node_id": "enrich",
            "completed": 90,
            "failed": 10,
            "total": 1000,
        },
        11.0,
    )
    assert first == "[   1.0s] progress   enrich 90 / 1,000 (10 failed)"
    second = view.apply(
        {
            "seq": 4,
            "type": "step.progress",
            "node_id": "enrich",
            "completed": 580,
            "failed": 20,
            "total": 1000,
        },
        12.0,
    )
    assert second == "[   2.0s] progress   enrich 580 / 1,000 (20 failed)  500 rows/s"
    assert view.steps["enrich"].rate() == 500.0
    done = view.apply({"seq": 5, "type": "step.completed", "node_id": "enrich", "outcome": "completed"}, 13.0)
    assert done == "[   3.0s] completed  enrich 580 / 1,000 (20 failed)"
    failed = view.apply({"seq": 6, "type": "step.completed", "node_id": "notify", "outcome": "failed"}, 13.1)
    assert failed is not None and "failed     notify" in failed
    terminal = view.apply({"seq": 7, "type": "terminal", "status": "completed", "total_rows": 1000}, 14.0)
    assert terminal == "[   4.0s] terminal   completed · 1,000 rows"
    assert view.terminal is not None and view.by_type["log"] == 1
    assert [s.state for s in view.steps.values()] == ["not started", "completed", "failed"]
    assert "2/3 steps settled" in view.status_line() and "7 events (1 log lines)" in view.status_line()


def test_view_renders_bars_rates_and_the_latest_events() -> None:
    view = DemoView(run_id="run-2", step_order=["load", "enrich"])
    view.apply({"seq": 1, "type": "step.progress", "node_id": "enrich", "completed": 100, "total": 400}, 1.0)
    view.apply({"seq": 2, "type": "step.progress", "node_id": "enrich", "completed": 300, "total": 400}, 2.0)
    for seq in range(3, 20):
        view.apply({"seq": seq, "type": "log", "ts": 0, "line": f"line {seq}"}, 2.0)
    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(view.renderable())
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "enrich" in out and "300 / 400" in out and "200" in out and "running" in out
    assert "not started" in out
    # Only the last few events are kept on screen.
    assert "line 19" in out and "line 3" not in out


def test_the_command_defaults_are_the_plan_defaults() -> None:
    assert (DemoPlan().rows, DemoPlan().rows_per_second) == (demo.DEFAULT_ROWS, demo.DEFAULT_RATE)


def test_pace_stretches_the_whole_run_by_one_factor_and_never_shortens_it() -> None:
    plan = DemoPlan()
    assert plan.duration_s() == pytest.approx(plan.setup_s + plan.rows / plan.rows_per_second + plan.tool_s)
    slow = plan.paced(60)
    assert slow.duration_s() == pytest.approx(60)
    factor = 60 / plan.duration_s()
    assert slow.setup_s == pytest.approx(plan.setup_s * factor)
    assert slow.tool_s == pytest.approx(plan.tool_s * factor)
    assert slow.rows == plan.rows and slow.sheet_rows() == plan.sheet_rows()
    # A pace at or under the run's own length leaves it as it is.
    assert plan.paced(plan.duration_s()) == plan
    assert plan.paced(0) == plan


def test_a_terminal_gets_a_minute_by_default_anything_else_the_rate() -> None:
    assert demo.pace_for(None, terminal=True) == demo.TERMINAL_PACE_S == 60
    assert demo.pace_for(None, terminal=False) == 0
    assert demo.pace_for(5, terminal=True) == 5 and demo.pace_for(0, terminal=True) == 0
