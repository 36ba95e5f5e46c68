// The warm pool: per pool and version, available / warming / stale and the entries with their ages,
// from GET /ui/api/pools every 3 s (a read that changes nothing).
"use strict";

(() => {
  const { el, getJSON, poll, duration, count } = Ledger;
  const box = document.getElementById("pools");
  const empty = document.getElementById("pools-empty");

  function ago(now, ms) { return ms == null ? "-" : duration(now - ms) + " ago"; }

  function section(version, entries, now) {
    const rows = entries.map((e) =>
      el(
        "tr",
        { "data-entry-id": e.id, "data-condition": e.condition },
        el("td", { class: "run-cell", text: e.id }),
        el("td", { class: "cond-" + e.condition, text: e.condition }),
        el("td", { class: "num", text: duration(now - e.created_at) }),
        el("td", { class: "num", text: e.ready_at == null ? "-" : e.ready_at > now ? "in " + duration(e.ready_at - now) : ago(now, e.ready_at) }),
        el("td", { class: "num", text: "in " + duration(e.expires_at - now) }),
      ),
    );
    return el(
      "section",
      { class: "pool-version", "data-pool": version.pool, "data-version": version.version },
      el("h2", {}, version.pool + " · " + version.version),
      el(
        "div",
        { class: "counts" },
        el("span", { class: "cond-available" }, el("b", { text: count(version.available) }), " available"),
        el("span", { class: "cond-warming" }, el("b", { text: count(version.warming) }), " warming"),
        el("span", { class: "cond-stale" }, el("b", { text: count(version.stale) }), " stale"),
        el("span", { class: "muted", text: "newest ready " + ago(now, version.newest_ready_at) }),
      ),
      el(
        "table",
        { class: "runs" },
        el("thead", {}, el("tr", {}, ...["entry", "state", "age", "ready", "expires"].map((h) => el("th", { text: h })))),
        el("tbody", {}, ...rows),
      ),
    );
  }

  poll(async () => {
    const answer = await getJSON("/ui/api/pools");
    const now = answer.now;
    const byKey = new Map();
    for (const e of answer.entries) {
      const key = e.pool + "\u0000" + e.version;
      if (!byKey.has(key)) byKey.set(key, []);
      byKey.get(key).push(e);
    }
    box.replaceChildren(
      ...answer.versions.map((v) => section(v, byKey.get(v.pool + "\u0000" + v.version) || [], now)),
    );
    if (answer.entries_truncated) box.append(el("p", { class: "muted", text: "Only the newest entries are listed." }));
    empty.hidden = answer.versions.length > 0;
  }, 3000);
})();
