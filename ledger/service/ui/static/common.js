// Shared by the dashboard's pages: building DOM from text only (never innerHTML with data),
// reading the JSON API with the session cookie, and formatting.
"use strict";

const Ledger = (() => {
  let serverOffsetMs = 0;

  /** An element with text content and attributes; children are nodes or strings (as text). */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = String(value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function setLive(ok, text) {
    const state = document.getElementById("live-state");
    if (!state) return;
    state.textContent = text;
    state.classList.toggle("down", !ok);
  }

  /** GET a JSON path of this service; a 401 (the cookie is gone or refused) goes to sign-in. */
  async function getJSON(path) {
    const response = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
    const date = response.headers.get("Date");
    if (date) serverOffsetMs = Date.parse(date) - Date.now();
    if (response.status === 401) {
      window.location.assign("/ui/sign-in");
      throw new Error("signed out");
    }
    if (!response.ok) {
      let message = response.status + " " + response.statusText;
      try { message = (await response.json()).error || message; } catch (_) { /* not JSON */ }
      const error = new Error(message);
      error.status = response.status;
      throw error;
    }
    return response.json();
  }

  /** The server's clock now, as well as the Date header tells it (whole seconds). */
  function serverNow() { return Date.now() + serverOffsetMs; }

  /** Repeat `task` every `everyMs`, never two at once; the header shows whether it works (or the
   * text the task returns, e.g. that what it watches has ended). */
  function poll(task, everyMs) {
    let stopped = false;
    async function tick() {
      if (stopped) return;
      try {
        const said = await task();
        setLive(true, typeof said === "string" ? said : "live");
      } catch (error) {
        setLive(false, "reconnecting: " + error.message);
      }
      if (!stopped) window.setTimeout(tick, everyMs);
    }
    tick();
    return () => { stopped = true; };
  }

  function duration(ms) {
    if (ms === null || ms === undefined || !Number.isFinite(ms)) return "-";
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return s + "s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + "m " + (s % 60) + "s";
    const h = Math.floor(m / 60);
    if (h < 48) return h + "h " + (m % 60) + "m";
    return Math.floor(h / 24) + "d " + (h % 24) + "h";
  }

  function count(n) {
    return n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US");
  }

  function clockTime(ms) {
    if (!Number.isFinite(ms)) return "";
    return new Date(ms).toISOString().slice(11, 23);
  }

  function runPath(runId) { return "/ui/runs/" + encodeURIComponent(runId); }
  function apiRunPath(runId) { return "/v1/runs/" + encodeURIComponent(runId); }

  return { el, getJSON, serverNow, poll, duration, count, clockTime, runPath, apiRunPath, setLive };
})();
