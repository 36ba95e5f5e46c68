// The runs page: the newest runs from GET /v1/runs, re-read every 2 s, filtered on the page.
"use strict";

(() => {
  const { el, getJSON, serverNow, poll, duration, count, runPath } = Ledger;
  const LIMIT = 200;
  const body = document.getElementById("runs-body");
  const statusFilter = document.getElementById("status-filter");
  const playFilter = document.getElementById("play-filter");
  const empty = document.getElementById("runs-empty");
  const counter = document.getElementById("runs-count");
  const seen = new Set();
  let firstLoad = true;
  let runs = [];

  // The filters live in the address (never anything secret), so a filtered view can be shared.
  const params = new URLSearchParams(window.location.search);
  const wanted = { status: params.get("status") || "", play: params.get("play") || "" };

  function ensureOption(select, value) {
    if (!value || [...select.options].some((o) => o.value === value)) return;
    select.append(el("option", { value, text: value }));
  }
  ensureOption(statusFilter, wanted.status);
  ensureOption(playFilter, wanted.play);
  statusFilter.value = wanted.status;
  playFilter.value = wanted.play;

  function onFilter() {
    const next = new URLSearchParams();
    if (statusFilter.value) next.set("status", statusFilter.value);
    if (playFilter.value) next.set("play", playFilter.value);
    const query = next.toString();
    window.history.replaceState(null, "", query ? "?" + query : window.location.pathname);
    render();
  }
  statusFilter.addEventListener("change", onFilter);
  playFilter.addEventListener("change", onFilter);
  document.getElementById("filters").addEventListener("submit", (e) => e.preventDefault());

  function stateOf(run) { return run.terminal_status || run.status || "pending"; }

  function row(run, now) {
    const state = stateOf(run);
    let steps = run.steps_total ? count(run.steps_done) + " / " + count(run.steps_total) : "-";
    // Steps that did not complete, by state (the run overview counts them).
    const others = ["failed", "cancelled", "skipped"]
      .filter((s) => run["steps_" + s] > 0)
      .map((s) => count(run["steps_" + s]) + " " + s);
    if (others.length) steps += " (" + others.join(", ") + ")";
    const last = run.last_event_type
      ? run.last_event_type + " #" + run.last_seq + ", " + duration(now - run.updated_at) + " ago"
      : "-";
    const tr = el(
      "tr",
      { "data-run-id": run.run_id, "data-status": state, class: seen.has(run.run_id) || firstLoad ? "" : "fresh" },
      el("td", { class: "run-cell" }, el("a", { href: runPath(run.run_id), text: run.run_id, title: run.run_id })),
      el("td", { class: "status status-" + state, text: state }),
      el("td", { class: "num", text: duration(now - run.created_at) }),
      el("td", { text: run.play_name || "-" }),
      el("td", { class: "num", text: steps }),
      el("td", { class: "num", text: count(run.rows_completed) }),
      el("td", { class: "num", text: count(run.rows_failed) }),
      el("td", { class: "num", text: count(run.rows_total) }),
      el("td", { text: last }),
      el("td", { class: "why", text: run.terminal_error || "", title: run.terminal_error || "" }),
    );
    return tr;
  }

  function render() {
    const now = serverNow();
    const status = statusFilter.value;
    const play = playFilter.value;
    const shown = runs.filter((r) => (!status || stateOf(r) === status) && (!play || r.play_name === play));
    body.replaceChildren(...shown.map((r) => row(r, now)));
    for (const r of runs) seen.add(r.run_id);
    firstLoad = false;
    empty.hidden = shown.length > 0;
    counter.textContent = shown.length === runs.length
      ? runs.length + " runs"
      : shown.length + " of " + runs.length + " runs";
  }

  poll(async () => {
    const answer = await getJSON("/v1/runs?limit=" + LIMIT);
    runs = answer.runs;
    for (const r of runs) {
      ensureOption(statusFilter, stateOf(r));
      ensureOption(playFilter, r.play_name);
    }
    render();
  }, 2000);
})();
