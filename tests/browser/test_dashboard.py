"""The dashboard in a real browser: sign-in, the live runs list, one run's waterfall and log tail,
a dropped SSE connection, the warm pool, sign-out, and what the session cookie may not do."""

from __future__ import annotations

import re
import time
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.acceptance.conftest import TOKENS, Server, new_id
from tests.browser.conftest import artifacts_dir, sign_in
from tests.browser.proxy import DroppingProxy

pytestmark = pytest.mark.browser


def now_ms() -> int:
    return int(time.time() * 1000)


def open_run(api: httpx.Client, run_id: str, play: str = "enrich-leads") -> None:
    api.post("/v1/runs", json={"run_id": run_id, "play_name": play}).raise_for_status()


def upload(api: httpx.Client, run_id: str, seq: int, nodes: dict[str, Any], **extra: Any) -> None:
    body = {
        "status": "running",
        "upload_seq": seq,
        "producer_attempt": 1,
        "live_node_progress": nodes,
        **extra,
    }
    api.post(f"/v1/runs/{run_id}/status", json=body).raise_for_status()


def append_log(api: httpx.Client, run_id: str, *lines: str) -> None:
    events = [{"type": "log", "line": line} for line in lines]
    api.post(f"/v1/runs/{run_id}/events", json={"events": events}).raise_for_status()


def session_cookie(context: Any) -> dict[str, Any] | None:
    return next((c for c in context.cookies() if c["name"] == "ledger_session"), None)


def test_sign_in_sets_an_http_only_strict_cookie_and_no_url_carries_the_token(context: Any) -> None:
    page = context.new_page()
    sign_in(page)
    cookie = session_cookie(context)
    assert cookie is not None
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["secure"] is False  # plain http here; Secure when served over https
    assert cookie["path"] == "/"
    # Page scripts cannot read it.
    assert "ledger_session" not in page.evaluate("document.cookie")
    page.wait_for_selector("#runs-count:not(:empty)")
    assert context.urls, "the browser requested nothing?"
    assert not [url for url in context.urls if TOKENS[0] in url]


def test_without_a_cookie_every_page_sends_to_sign_in(context: Any) -> None:
    page = context.new_page()
    for path, back_to in (
        ("/", ""),
        ("/ui/", ""),
        ("/ui/pool", "?next=/ui/pool"),
        ("/ui/runs/some-run", "?next=/ui/runs/some-run"),
    ):
        page.goto(path)
        assert page.url.endswith("/ui/sign-in" + back_to), path
    page.fill("#token", "not-a-token")
    page.click("#sign-in")
    assert "does not let this token in" in page.text_content("#sign-in-error")
    assert session_cookie(context) is None


def test_runs_list_shows_runs_and_updates_live_without_reload(context: Any, api: httpx.Client) -> None:
    before = new_id("ui-list-a")
    open_run(api, before, play="play-a")
    page = context.new_page()
    sign_in(page)
    row = page.locator(f'tr[data-run-id="{before}"]')
    row.wait_for()
    assert row.locator("td").nth(1).text_content() == "running"
    assert row.locator("td").nth(3).text_content() == "play-a"
    page.evaluate("window.__notReloaded = true")

    after = new_id("ui-list-b")
    open_run(api, after, play="play-b")
    upload(api, after, 1, {"m": {"started_at": now_ms(), "completed": 7, "failed": 2, "total": 20}})
    fresh = page.locator(f'tr[data-run-id="{after}"]')
    fresh.wait_for()
    page.wait_for_function(
        "id => document.querySelector(`tr[data-run-id='${id}'] td:nth-child(6)`).textContent === '7'",
        arg=after,
    )
    cells = fresh.locator("td").all_text_contents()
    assert cells[4:8] == ["0 / 1", "7", "2", "20"]
    assert page.evaluate("window.__notReloaded") is True

    # Filters: by play, then by status; the rows come back when cleared.
    page.select_option("#play-filter", "play-b")
    row.wait_for(state="detached")
    assert fresh.is_visible()
    page.select_option("#play-filter", "")
    page.select_option("#status-filter", "completed")
    fresh.wait_for(state="detached")
    api.put(f"/v1/runs/{before}/terminal", json={"status": "completed"}).raise_for_status()
    row.wait_for()
    assert "status=completed" in page.url
    page.screenshot(path=str(artifacts_dir() / "runs.png"), full_page=True)


def test_run_page_waterfall_steps_and_live_log_tail(context: Any, api: httpx.Client) -> None:
    run_id = new_id("ui-run")
    open_run(api, run_id)
    t = now_ms()
    nodes: dict[str, Any] = {
        "load": {"started_at": t - 9000, "completed_at": t - 6000, "completed": 10, "total": 10},
        "bad": {"started_at": t - 7000, "completed_at": t - 5000, "node_io": {"error": "boom"}},
        "map": {"started_at": t - 6000, "completed": 40, "failed": 3, "total": 100, "message": "mapping"},
    }
    upload(api, run_id, 1, nodes, live_logs=["first line"])
    page = context.new_page()
    sign_in(page)
    page.goto(f"/ui/runs/{run_id}")
    page.locator('.step[data-node-id="load"].completed').wait_for()
    page.locator('.step[data-node-id="bad"].failed').wait_for()
    running = page.locator('.step[data-node-id="map"].running')
    running.wait_for()
    assert running.locator(".counts").text_content() == "40 / 100 · 3 failed"
    assert running.get_attribute("data-state") == "running"
    # Steps in start order, each with a bar on the time axis.
    assert page.locator(".step").evaluate_all("els => els.map(e => e.dataset.nodeId)") == [
        "load",
        "bad",
        "map",
    ]
    # The running bar grows while nothing new arrives.
    width = running.locator(".bar").evaluate("b => b.getBoundingClientRect().width")
    page.wait_for_function(
        "w => document.querySelector('.step[data-node-id=map] .bar').getBoundingClientRect().width > w",
        arg=width,
    )
    page.locator("#log .ev", has_text="first line").wait_for()

    append_log(api, run_id, "appended after the page loaded")
    page.locator("#log .ev", has_text="appended after the page loaded").wait_for()

    # The step completes when its progress does.
    nodes["map"] = {**nodes["map"], "completed": 97, "completed_at": now_ms()}
    upload(api, run_id, 2, nodes)
    done = page.locator('.step[data-node-id="map"].completed')
    done.wait_for()
    assert done.locator(".progress").get_attribute("aria-valuenow") == "100"

    api.put(
        f"/v1/runs/{run_id}/terminal", json={"status": "failed", "error": "step bad failed"}
    ).raise_for_status()
    page.locator("#run-status.status-failed").wait_for()
    assert page.text_content("#run-error") == "error: step bad failed"
    page.wait_for_function("() => document.getElementById('log-state').textContent === 'ended'")

    # The log is searchable on the page.
    page.fill("#log-search", "APPENDED")
    visible = page.locator("#log .ev:not([hidden])")
    assert visible.count() == 1
    assert "appended after the page loaded" in visible.first.text_content()
    page.fill("#log-search", "")
    page.screenshot(path=str(artifacts_dir() / "run.png"), full_page=True)


def test_markup_in_a_log_line_and_a_run_id_renders_as_text(context: Any, api: httpx.Client) -> None:
    run_id = new_id('ui-<img src=x onerror="window.__pwned=1">')
    open_run(api, run_id)
    page = context.new_page()
    sign_in(page)
    page.goto("/ui/runs/" + quote(run_id, safe=""))
    page.locator("#run-status:not(:empty)").wait_for()
    assert page.text_content("#run-id") == run_id
    line = "<script>window.__pwned = 1</script><b>bold?</b>"
    append_log(api, run_id, line)
    shown = page.locator("#log .ev .text", has_text="window.__pwned")
    shown.wait_for()
    assert shown.text_content() == line
    assert page.locator("#log script, #log b, main img").count() == 0
    page.goto("/ui/")
    page.locator("#runs-body tr").first.wait_for()
    link = page.locator("#runs-body a", has_text=run_id)
    assert link.text_content() == run_id
    assert page.evaluate("window.__pwned") is None


def test_a_dropped_event_stream_resumes_without_duplicates(
    browser: Any, api: httpx.Client, proxy: DroppingProxy
) -> None:
    run_id = new_id("ui-drop")
    open_run(api, run_id)
    append_log(api, run_id, "line 1", "line 2")
    ctx = browser.new_context(base_url=proxy.base_url)
    try:
        page = ctx.new_page()
        sign_in(page)
        page.goto(f"/ui/runs/{run_id}")
        page.locator("#log .ev", has_text="line 2").wait_for()
        page.wait_for_function("() => document.getElementById('log-state').textContent === 'live'")
        assert proxy.drop() > 0
        append_log(api, run_id, "line 3 (while the stream was down)")
        append_log(api, run_id, "line 4")
        page.locator("#log .ev", has_text="line 4").wait_for()
        seqs = page.locator("#log .ev").evaluate_all("els => els.map(e => Number(e.dataset.seq))")
        assert seqs == [1, 2, 3, 4]
        texts = page.locator("#log .ev .text").all_text_contents()
        assert texts == ["line 1", "line 2", "line 3 (while the stream was down)", "line 4"]
    finally:
        ctx.close()


def test_warm_pool_page_shows_versions_and_entries(context: Any, api: httpx.Client) -> None:
    pool = new_id("ui-pool")
    api.post(f"/v1/pools/{pool}/entries", json={"version": "v1", "ids": ["w-a", "w-b"], "ready": True})
    api.post(f"/v1/pools/{pool}/entries", json={"version": "v1", "ids": ["w-c"], "ready": False})
    page = context.new_page()
    sign_in(page)
    page.click("text=Warm pool")
    section = page.locator(f'section[data-pool="{pool}"][data-version="v1"]')
    section.wait_for()
    counts = section.locator(".counts").text_content() or ""
    assert re.search(r"2\s*available", counts) and re.search(r"1\s*warming", counts), counts
    conditions = section.locator("tr[data-entry-id]").evaluate_all(
        "rows => rows.map(r => [r.dataset.entryId, r.dataset.condition])"
    )
    assert sorted(conditions) == [["w-a", "available"], ["w-b", "available"], ["w-c", "warming"]]


def test_sign_out_clears_the_cookie(context: Any) -> None:
    page = context.new_page()
    sign_in(page)
    assert session_cookie(context) is not None
    page.click("#sign-out")
    page.wait_for_url("**/ui/sign-in")
    assert session_cookie(context) is None
    page.goto("/ui/")
    assert page.url.endswith("/ui/sign-in")


def test_the_session_cookie_authorizes_no_write(context: Any, api: httpx.Client, ui_server: Server) -> None:
    run_id = new_id("ui-write")
    open_run(api, run_id)
    page = context.new_page()
    sign_in(page)
    statuses = page.evaluate(
        """async (runId) => {
            const run = '/v1/runs/' + encodeURIComponent(runId);
            const json = {'Content-Type': 'application/json'};
            const tries = [
                ['POST', '/v1/runs', {run_id: runId + '-x'}],
                ['POST', run + '/events', {events: [{type: 'log', line: 'from the page'}]}],
                ['PUT', run + '/terminal', {status: 'failed', error: 'from the page'}],
                ['POST', run + '/status', {status: 'failed'}],
                ['DELETE', '/v1/pools/default/entries', null],
            ];
            const out = [];
            for (const [method, path, body] of tries) {
                const r = await fetch(path, {method, headers: json, body: body && JSON.stringify(body)});
                out.push(r.status);
            }
            out.push((await fetch(run)).status);
            return out;
        }""",
        run_id,
    )
    assert statuses[:-1] == [401] * 5
    assert statuses[-1] == 200  # the same cookie reads
    assert api.get(f"/v1/runs/{run_id}-x").status_code == 404
    events = api.get(f"/v1/runs/{run_id}/events").json()["events"]
    assert events == []
    assert api.get(f"/v1/runs/{run_id}").json()["terminal"] is None


def test_a_read_token_views_but_cannot_write(context: Any, api: httpx.Client) -> None:
    minted = api.post("/v1/tokens", json={"scope": "read"})
    minted.raise_for_status()
    read_token = minted.json()["token"]
    run_id = new_id("ui-read")
    open_run(api, run_id)
    page = context.new_page()
    sign_in(page, read_token)
    page.locator(f'tr[data-run-id="{run_id}"]').wait_for()
    status = page.evaluate(
        """async ([runId, token]) => (await fetch('/v1/runs/' + encodeURIComponent(runId) + '/events', {
            method: 'POST', headers: {'Content-Type': 'application/json', Authorization: 'Bearer ' + token},
            body: JSON.stringify({events: [{type: 'log', line: 'x'}]})})).status""",
        [run_id, read_token],
    )
    assert status == 403
    assert api.get(f"/v1/runs/{run_id}/events").json()["events"] == []
