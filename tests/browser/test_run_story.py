"""A run's page tells the whole story: every step of the contract from the start (pending ones
grey, in pipeline order), step progress as words in the log, an ended run that never says it is
reconnecting, an interrupted run and its resume, and the demo's printed link leading to its run
once signed in."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.cli.demo.scenario import DemoPlan
from tests.acceptance.conftest import ROOT, new_id
from tests.browser.conftest import UI_TIMEOUT_MS, sign_in

pytestmark = pytest.mark.browser

# Every text the event log's state label ever shows, recorded from before the page's own script runs.
RECORD_LOG_STATES = """
window.__logStates = [];
new MutationObserver(() => {
  const label = document.getElementById("log-state");
  const states = window.__logStates;
  if (label && states[states.length - 1] !== label.textContent) states.push(label.textContent);
}).observe(document, { subtree: true, childList: true, characterData: true });
"""


def now_ms() -> int:
    return int(time.time() * 1000)


def open_run(api: httpx.Client, run_id: str) -> None:
    api.post("/v1/runs", json={"run_id": run_id, "play_name": "story"}).raise_for_status()


def upload(api: httpx.Client, run_id: str, seq: int, nodes: dict[str, Any], **extra: Any) -> None:
    body = {
        "status": "running",
        "upload_seq": seq,
        "producer_attempt": 1,
        "live_node_progress": nodes,
        **extra,
    }
    api.post(f"/v1/runs/{run_id}/status", json=body).raise_for_status()


def step_ids(page: Any) -> list[str]:
    ids: list[str] = page.locator(".step").evaluate_all("els => els.map(e => e.dataset.nodeId)")
    return ids


def test_every_step_shows_from_the_start_pending_ones_grey_in_pipeline_order(
    context: Any, api: httpx.Client
) -> None:
    run_id = new_id("ui-pending")
    open_run(api, run_id)
    pipeline = ["load", "validate", "dedupe", "leads", "notify"]
    t = now_ms()
    # The first three start together; their ids sort otherwise than the pipeline does.
    together = {"started_at": t, "completed": 0}
    upload(
        api, run_id, 1, {"load": together, "validate": together, "dedupe": together}, pipeline_steps=pipeline
    )
    page = context.new_page()
    sign_in(page)
    page.goto(f"/ui/runs/{run_id}")
    page.locator('.step[data-node-id="notify"]').wait_for()
    assert step_ids(page) == pipeline
    states = page.locator(".step").evaluate_all("els => els.map(e => e.dataset.state)")
    assert states == ["running", "running", "running", "pending", "pending"]
    pending = page.locator('.step[data-node-id="leads"]')
    assert pending.locator(".counts").text_content() == "pending"
    # Both read in one script: the page re-renders its steps as it polls, and an element found by
    # one call and read by the next may have been replaced (a detached element has no style).
    grey, dark = page.evaluate(
        """() => ["leads", "load"].map(id => getComputedStyle(
            document.querySelector(`.step[data-node-id="${id}"] .name`)).color)"""
    )
    assert grey and dark
    assert grey != dark

    # The runs list counts the pending steps too.
    page.goto("/ui/")
    row = page.locator(f'tr[data-run-id="{run_id}"]')
    row.wait_for()
    assert row.locator("td").nth(4).text_content() == "0 / 5"

    # A pending step starts: it runs where the pipeline puts it, the others stay pending.
    upload(
        api,
        run_id,
        2,
        {"leads": {"started_at": now_ms(), "completed": 10, "total": 100}},
        pipeline_steps=pipeline,
    )
    page.goto(f"/ui/runs/{run_id}")
    page.locator('.step[data-node-id="leads"].running').wait_for()
    assert step_ids(page) == pipeline
    assert page.locator('.step[data-node-id="notify"]').get_attribute("data-state") == "pending"


def test_step_progress_reads_as_words_in_the_log(context: Any, api: httpx.Client) -> None:
    run_id = new_id("ui-words")
    open_run(api, run_id)
    t = now_ms()
    upload(
        api,
        run_id,
        1,
        {"leads": {"started_at": t, "completed": 40, "failed": 3, "total": 100, "message": "mapping"}},
    )
    upload(
        api,
        run_id,
        2,
        {"leads": {"started_at": t, "completed": 97, "failed": 3, "total": 100, "completed_at": t + 5}},
    )
    page = context.new_page()
    sign_in(page)
    page.goto(f"/ui/runs/{run_id}")
    page.locator("#log .ev-step\\.completed").wait_for()
    texts = page.locator("#log .ev .text").all_text_contents()
    assert texts == [
        "leads started",
        "leads: 40 / 100 rows · 3 failed · mapping",
        "leads: 97 / 100 rows · 3 failed",
        "leads completed",
    ]
    assert not [text for text in texts if "{" in text]


def test_a_failed_run_shows_each_step_s_state_and_reason_and_why_it_ended(
    context: Any, api: httpx.Client
) -> None:
    """A runner that died mid-map: the map is failed (not done), the step after it skipped, each
    with its reason, and the run says why it ended, on the run's page and in the list."""
    run_id = new_id("ui-failed")
    open_run(api, run_id)
    t = now_ms()
    error = "the runner's output ended without a result line"
    pipeline = ["load", "enrich", "notify"]
    upload(
        api,
        run_id,
        1,
        {
            "load": {"started_at": t, "completed_at": t + 1},
            "enrich": {"started_at": t + 2, "completed": 400, "failed": 2, "total": 1000},
        },
        pipeline_steps=pipeline,
    )
    body = {"status": "failed", "upload_seq": 2, "producer_attempt": 1, "error": error}
    api.post(f"/v1/runs/{run_id}/status", json=body).raise_for_status()
    page = context.new_page()
    sign_in(page)
    page.goto(f"/ui/runs/{run_id}")
    page.locator("#log .ev-terminal").wait_for()
    # The steps come from the run's own read, not from the log's stream: one may arrive first.
    page.locator('.step[data-node-id="notify"]').wait_for()
    states = page.locator(".step").evaluate_all("els => els.map(e => e.dataset.state)")
    assert states == ["completed", "failed", "skipped"]
    enrich = page.locator('.step[data-node-id="enrich"]')
    assert enrich.locator(".reason").text_content() == f"failed: run failed: {error}"
    assert "the run ended before this step started" in (
        page.locator('.step[data-node-id="notify"] .reason').text_content() or ""
    )
    assert error in (page.locator("#run-error").text_content() or "")
    texts = page.locator("#log .ev .text").all_text_contents()
    assert f"enrich failed: run failed: {error}" in texts
    assert "notify skipped: the run ended before this step started" in texts
    page.goto("/ui/")
    row = page.locator(f'tr[data-run-id="{run_id}"]')
    row.wait_for()
    assert row.locator("td").nth(4).text_content() == "1 / 3 (1 failed, 1 skipped)"
    assert row.locator("td.why").text_content() == error


def test_an_ended_run_never_says_reconnecting(context: Any, api: httpx.Client) -> None:
    run_id = new_id("ui-ended")
    open_run(api, run_id)
    api.post(
        f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": f"line {i}"} for i in range(5)]}
    ).raise_for_status()
    api.put(f"/v1/runs/{run_id}/terminal", json={"status": "completed"}).raise_for_status()
    page = context.new_page()
    sign_in(page)
    page.add_init_script(RECORD_LOG_STATES)
    page.goto(f"/ui/runs/{run_id}")
    page.wait_for_function("() => document.getElementById('log-state').textContent === 'ended'")
    assert page.locator("#log .ev").count() == 6
    # Past the browser's own reconnect delay (3 s): the stream stays closed, nothing else is said.
    page.wait_for_timeout(4000)
    states = page.evaluate("window.__logStates")
    assert states[-1] == "ended"
    assert not [state for state in states if "reconnecting" in state or "retrying" in state], states
    assert page.text_content("#live-state") == "run ended"


def test_an_interrupted_run_says_so_and_its_resume_too(context: Any, api: httpx.Client) -> None:
    run_id = new_id("ui-interrupted")
    open_run(api, run_id)
    why = {"reason": "the reporter was interrupted (SIGTERM)", "signal": "SIGTERM"}
    upload(api, run_id, 1, {}, status="interrupted", interruption=why)
    page = context.new_page()
    sign_in(page)
    page.goto(f"/ui/runs/{run_id}")
    page.locator("#log .ev-reporter\\.interrupted").wait_for()
    assert page.text_content("#run-status") == "interrupted"
    assert page.locator("#log .ev .text").all_text_contents() == [
        "reporter interrupted (SIGTERM): the reporter was interrupted (SIGTERM)"
    ]
    upload(api, run_id, 2, {})  # a reporter that resumes it
    page.locator("#log .ev-reporter\\.resumed").wait_for()
    page.wait_for_function("() => document.getElementById('run-status').textContent === 'running'")
    assert page.locator("#log .ev .text").all_text_contents()[-1] == "reporter resumed"


PAGE_LINE = re.compile(r"^watch it in a browser: (http://127\.0\.0\.1:\d+)(/ui/runs/(demo-[0-9a-z-]+))\s*$")
TOKEN_LINE = re.compile(r"^  sign in with this demo's token \(valid [^)]*\): (\S+)\s*$")


def test_the_demo_link_opens_its_run_after_sign_in(browser: Any, database_url: str, tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    env = {**base, "LEDGER_DATABASE_URL": database_url, "LEDGER_DATA_DIR": str(tmp_path)}
    # Paced: the run lasts long enough to sign in while it is live, as a person would; piped, the
    # demo names its page only when it keeps serving it (--serve).
    args = ["--rows", "1000", "--pace", "40", "--serve"]
    with subprocess.Popen(
        [sys.executable, "-m", "ledger.cli", "demo", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as demo:
        try:
            assert demo.stdout is not None
            lines: list[str] = []
            page_match = token_match = None
            while page_match is None or token_match is None:
                line = demo.stdout.readline()
                assert line, "the demo ended before it printed its link:\n" + "".join(lines)
                lines.append(line)
                page_match = page_match or PAGE_LINE.match(line)
                token_match = token_match or TOKEN_LINE.match(line)
            # Keep draining the pipe so the demo never blocks on a full one.
            threading.Thread(target=demo.stdout.read, daemon=True).start()
            origin, path, run_id = page_match.group(1), page_match.group(2), page_match.group(3)

            ctx = browser.new_context(viewport={"width": 1280, "height": 900})
            ctx.set_default_timeout(UI_TIMEOUT_MS)
            try:
                page = ctx.new_page()
                page.goto(origin + path)
                page.wait_for_url(re.compile(r"/ui/sign-in\?next="))
                page.fill("#token", token_match.group(1))
                page.click("#sign-in")
                page.wait_for_url(origin + path)
                assert page.text_content("#run-id") == run_id
                # The run is live, and all its steps are on the page, the unstarted ones pending.
                page.locator(".step").nth(len(DemoPlan().step_order()) - 1).wait_for()
                assert step_ids(page)[: len(DemoPlan().step_order())] == DemoPlan().step_order()
                assert page.text_content("#run-status") == "running"
                assert page.locator('.step[data-state="pending"]').count() > 0
            finally:
                ctx.close()
        finally:
            demo.terminate()
            demo.wait(30)
