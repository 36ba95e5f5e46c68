// One run: its facts and step waterfall from GET /v1/runs/{id} (re-read while it is live), and its
// events tailed over SSE. EventSource resumes by itself after a dropped connection (it sends
// Last-Event-ID); events are also de-duplicated here by seq, so a resume never shows one twice.
"use strict";

(() => {
  const { el, getJSON, serverNow, poll, duration, count, clockTime, apiRunPath, setLive } = Ledger;
  const runId = document.body.dataset.runId;
  const eventTypes = (document.body.dataset.eventTypes || "").split(" ").filter(Boolean);
  const MAX_LINES = 10000;

  const $ = (id) => document.getElementById(id);
  let run = null;
  let stopPolling = null;

  // -- facts and waterfall ---------------------------------------------------------------------

  function runState(r) { return (r.terminal && r.terminal.status) || r.status || "pending"; }

  // The step's state as the ledger gives it (every step has one in its answers): never read from a
  // completion time, since a step can end without completing.
  const STEP_STATES = new Set(["pending", "running", "completed", "failed", "cancelled", "skipped"]);

  function stepState(node) { return STEP_STATES.has(node.state) ? node.state : "pending"; }

  function steps(r) {
    const progress = r.live_node_progress && typeof r.live_node_progress === "object" ? r.live_node_progress : {};
    const list = Object.entries(progress).map(([nodeId, raw]) => {
      const node = raw && typeof raw === "object" ? raw : {};
      return { nodeId, node, state: stepState(node) };
    });
    // JSON object order is not kept by the database. The steps of the contract carry their place
    // in the pipeline (`position`): they come first, in pipeline order, pending ones included, so
    // steps that start together keep the pipeline's order. Any other step follows, by start time.
    const place = (s) => (typeof s.node.position === "number" ? s.node.position : null);
    list.sort((a, b) => {
      const pa = place(a), pb = place(b);
      if ((pa == null) !== (pb == null)) return pa == null ? 1 : -1;
      if (pa != null && pa !== pb) return pa - pb;
      const sa = a.node.started_at, sb = b.node.started_at;
      if ((sa == null) !== (sb == null)) return sa == null ? 1 : -1;
      return (sa || 0) - (sb || 0) || (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0);
    });
    return list;
  }

  function renderFacts(r) {
    const now = serverNow();
    const state = runState(r);
    const status = $("run-status");
    status.textContent = state;
    status.className = "status status-" + state;
    $("run-play").textContent = r.play_name || (r.terminal && r.terminal.play_name) || "-";
    $("run-age").textContent = duration(now - r.created_at);
    $("run-last-event").textContent = "#" + r.last_seq + ", " + duration(now - r.updated_at) + " ago";
    const t = r.terminal;
    let terminal = "not yet (the run is live)";
    if (t) {
      terminal = t.status;
      if (t.total_rows != null) terminal += " · " + count(t.total_rows) + " rows";
      if (t.duration_ms != null) terminal += " · " + duration(t.duration_ms);
      if (t.completed_at != null) terminal += " · at " + new Date(t.completed_at).toISOString();
    }
    $("run-terminal").textContent = terminal;
    const error = $("run-error");
    error.hidden = !(t && t.error);
    error.textContent = t && t.error ? "error: " + t.error : "";
  }

  function renderWaterfall(r) {
    const list = steps(r);
    $("steps-empty").hidden = list.length > 0;
    $("waterfall").hidden = list.length === 0;
    const live = !r.terminal;
    const end = live ? Math.max(serverNow(), r.updated_at) : (r.terminal.completed_at || r.updated_at);
    let t0 = r.created_at;
    let t1 = end;
    for (const { node } of list) {
      if (node.started_at != null) t0 = Math.min(t0, node.started_at);
      if (node.completed_at != null) t1 = Math.max(t1, node.completed_at);
    }
    const span = Math.max(1, t1 - t0);
    const pct = (t) => ((Math.min(Math.max(t, t0), t1) - t0) / span) * 100;

    $("axis").replaceChildren(
      ...[0, 0.25, 0.5, 0.75, 1].map((f) => {
        // Short runs get tenths: whole seconds would repeat a label.
        const label = span < 10000 ? (f * span / 1000).toFixed(1) + "s" : duration(f * span);
        const tick = el("span", { text: "+" + label });
        tick.style.left = f * 100 + "%";
        return tick;
      }),
    );

    $("steps").replaceChildren(
      ...list.map(({ nodeId, node, state }) => {
        const bar = el("div", { class: "bar" });
        const started = node.started_at;
        const finished = node.completed_at != null ? node.completed_at : end;
        if (started != null) {
          bar.style.left = pct(started) + "%";
          bar.style.width = Math.max(0, pct(finished) - pct(started)) + "%";
          bar.title = "started +" + duration(started - t0) + ", " +
            (node.completed_at != null ? "took " + duration(node.completed_at - started) : "running for " + duration(end - started));
        } else {
          bar.style.left = "0%";
          bar.style.width = "0%";
        }
        const processed = (node.completed || 0) + (node.failed || 0);
        let fraction = node.total > 0 ? Math.min(1, processed / node.total) : null;
        if (fraction === null) fraction = state === "completed" ? 1 : 0;
        const fill = el("div");
        fill.style.width = fraction * 100 + "%";
        let counts = state;
        if (node.total != null || node.completed != null) {
          counts = count(node.completed) + " / " + count(node.total);
          if (node.failed) counts += " · " + count(node.failed) + " failed";
        }
        return el(
          "div",
          { class: "step " + state, "data-node-id": nodeId, "data-state": state },
          el("div", { class: "name", title: nodeId, text: nodeId }),
          el("div", { class: "track" }, bar),
          el(
            "div",
            { class: "info" },
            el("div", { class: "counts", text: counts }),
            el("div", { class: "progress", role: "progressbar", "aria-valuenow": Math.round(fraction * 100), "aria-valuemin": 0, "aria-valuemax": 100 }, fill),
            typeof node.reason === "string" && node.reason
              ? el("div", { class: "reason", text: state + ": " + node.reason })
              : null,
            node.message ? el("div", { class: "message", text: node.message }) : null,
          ),
        );
      }),
    );
  }

  function render() {
    if (!run) return;
    renderFacts(run);
    renderWaterfall(run);
  }

  async function refresh() {
    try {
      run = await getJSON(apiRunPath(runId));
      $("run-error").hidden = !(run.terminal && run.terminal.error);
      render();
      if (run.terminal && stopPolling) {
        stopPolling();
        stopPolling = null;
      }
      return run.terminal ? "run ended" : "live";
    } catch (error) {
      if (error.status === 404) {
        const box = $("run-error");
        box.hidden = false;
        box.textContent = "The run is gone: " + error.message;
      }
      throw error;
    }
  }

  stopPolling = poll(refresh, 1000);
  // Running bars grow between reads.
  window.setInterval(() => { if (run && !run.terminal) render(); }, 500);

  // -- the event log -----------------------------------------------------------------------------

  const log = $("log");
  const search = $("log-search");
  const onlyLog = $("log-only");
  let lastSeq = -1;
  let total = 0;
  let ended = false;
  let refreshSoon = null;

  // Step and run events as a person says them; any other event as its JSON fields.
  function rows(e) {
    // As the step's bar counts: completed of the total, the failed ones said apart.
    if (e.total != null) return count(e.completed || 0) + " / " + count(e.total) + " rows";
    if (e.completed != null) return count(e.completed) + " rows done";
    return null;
  }

  const SETTLEMENTS = new Set(["step.completed", "step.failed", "step.cancelled", "step.skipped"]);

  function stepText(event) {
    const name = typeof event.node_id === "string" ? event.node_id : "a step";
    if (event.type === "step.started") return name + " started";
    if (SETTLEMENTS.has(event.type)) {
      // The state it settled in (an older step.completed says it as its outcome) and why.
      const state = event.state || event.outcome || event.type.slice("step.".length);
      const why = event.reason || event.error;
      return name + " " + state + (why ? ": " + why : "");
    }
    if (event.type === "reporter.interrupted") {
      return "reporter interrupted" + (event.signal ? " (" + event.signal + ")" : "") + (event.reason ? ": " + event.reason : "");
    }
    if (event.type === "reporter.resumed") return "reporter resumed";
    if (event.type === "step.progress") {
      const parts = [rows(event), event.failed ? count(event.failed) + " failed" : null, event.message || null];
      const said = parts.filter(Boolean).join(" · ");
      return name + ": " + (said || "progress");
    }
    if (event.type === "terminal") return "run " + event.status + (event.error ? ": " + event.error : "");
    return null;
  }

  function summary(event) {
    if (event.type === "log") return typeof event.line === "string" ? event.line : "";
    const said = stepText(event);
    if (said !== null) return said;
    const rest = {};
    for (const [k, v] of Object.entries(event)) if (!["seq", "type", "ts", "run_id"].includes(k)) rest[k] = v;
    return JSON.stringify(rest);
  }

  function visible(line) {
    const q = search.value.trim().toLowerCase();
    if (onlyLog.checked && line.dataset.type !== "log") return false;
    return !q || line.dataset.search.includes(q);
  }

  function updateCount() {
    const shown = [...log.children].filter((c) => !c.hidden).length;
    $("log-count").textContent = shown === total ? total + " events" : shown + " of " + total + " events";
  }

  function applySearch() {
    for (const line of log.children) line.hidden = !visible(line);
    updateCount();
  }
  search.addEventListener("input", applySearch);
  onlyLog.addEventListener("change", applySearch);

  function append(event) {
    if (typeof event.seq !== "number" || event.seq <= lastSeq) return; // already shown
    lastSeq = event.seq;
    total += 1;
    const text = summary(event);
    const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 30;
    const line = el(
      "div",
      { class: "ev ev-" + event.type, "data-seq": event.seq, "data-type": event.type },
      el("span", { class: "seq", text: "#" + event.seq }),
      el("span", { class: "ts", text: clockTime(event.ts) }),
      el("span", { class: "type", text: event.type }),
      el("span", { class: "text", text }),
    );
    line.dataset.search = (event.type + " " + text).toLowerCase();
    line.hidden = !visible(line);
    log.append(line);
    while (log.children.length > MAX_LINES) log.firstElementChild.remove();
    if (atBottom) log.scrollTop = log.scrollHeight;
    if (event.type.startsWith("step.") || event.type.startsWith("reporter.") || event.type === "terminal" || event.type === "status") {
      // A step or the run changed: read the run now rather than at the next poll.
      window.clearTimeout(refreshSoon);
      refreshSoon = window.setTimeout(() => refresh().catch(() => {}), 150);
    }
    if (event.type === "terminal") ended = true;
  }

  function logState(text) { $("log-state").textContent = text; }

  function endStream(source) {
    source.close();
    logState("ended");
    setLive(true, "run ended");
  }

  function connect() {
    // Where to start: Last-Event-ID takes over on the browser's own reconnects; after a reconnect
    // of ours, the cursor is the last event shown.
    const source = new EventSource(apiRunPath(runId) + "/events/stream?after=" + lastSeq);
    const onEvent = (message) => {
      let event;
      try { event = JSON.parse(message.data); } catch (_) { return; }
      append(event);
      updateCount();
      // The terminal event is the last there is: close before the service ends the stream, which
      // the browser would take for a dropped connection and retry.
      if (ended) endStream(source);
    };
    for (const type of eventTypes) source.addEventListener(type, onEvent);
    source.addEventListener("message", onEvent);
    source.addEventListener("open", () => { if (!ended) logState("live"); });
    source.addEventListener("error", () => {
      if (ended) {
        endStream(source);
        return;
      }
      if (source.readyState === EventSource.CONNECTING) {
        logState("reconnecting…");
        return;
      }
      source.close();
      // Closed for good by an error answer (the browser gives up on those): try again ourselves.
      logState("disconnected, retrying…");
      window.setTimeout(connect, 2000);
    });
  }
  connect();
})();
