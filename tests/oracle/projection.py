"""What the oracle compares: a run's final state in the ledger, projected, and the diff of two.

The projection (read straight from the tables, one snapshot):

* ``terminal`` — the terminal status (or None);
* ``steps`` — per node id: whether a ``step.started`` was recorded, the state of its last
  settlement event (``step.completed|failed|cancelled|skipped``; None if none), whether the
  stored node has ``completed_at``, and its final ``completed``/``failed``/``total`` (the
  reconciled map counts for map nodes);
* ``logs`` — the log lines in order, a ``log.gap`` counting as its ``missing`` lines (None each);
* ``lifecycle`` — the dataset lifecycle events, in order;
* ``activities`` — the newest recorded observation per activity id.

Not compared: how many ``step.progress`` events there were, timestamps, seqs.

`check_invariants` adds what must hold for any run on its own: seqs 1..last_seq without a gap,
and exactly one ``terminal`` event, the last one, iff the run is terminal.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from ledger.db import Database

PARTS = ("terminal", "steps", "logs", "lifecycle", "activities")
COUNTS = ("completed", "failed", "total")

RUN_SQL = "SELECT terminal_status, live_node_progress, last_seq FROM ledger.runs WHERE run_id = %s"
EVENTS_SQL = "SELECT seq, type, payload FROM ledger.run_events WHERE run_id = %s ORDER BY seq"


async def read_run(db: Database, run_id: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    async with db.connection() as conn, conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        run = await (await conn.execute(RUN_SQL, (run_id,))).fetchone()
        events = await (await conn.execute(EVENTS_SQL, (run_id,))).fetchall()
    return run, [dict(e) for e in events]


SETTLEMENTS = ("step.completed", "step.failed", "step.cancelled", "step.skipped")


def project(run: dict[str, Any] | None, events: list[dict[str, Any]]) -> dict[str, Any]:
    if run is None:
        return {"terminal": "<no such run>", "steps": {}, "logs": [], "lifecycle": [], "activities": {}}
    snapshot: dict[str, Any] = run["live_node_progress"] or {}
    steps: dict[str, dict[str, Any]] = {}

    def step(node_id: str) -> dict[str, Any]:
        if node_id not in steps:
            node = snapshot.get(node_id) or {}
            steps[node_id] = {
                "started": False,
                "outcome": None,
                "settled": node.get("completed_at") is not None,
                **{key: node.get(key) for key in COUNTS},
            }
        return steps[node_id]

    for node_id in snapshot:
        step(node_id)
    logs: list[str | None] = []
    lifecycle: list[Any] = []
    activities: dict[str, Any] = {}
    for event in events:
        kind, payload = event["type"], event["payload"]
        if kind == "log":
            logs.append(payload["line"])
        elif kind == "log.gap":
            logs.extend([None] * int(payload["missing"]))
        elif kind == "step.started":
            step(payload["node_id"])["started"] = True
        elif kind in SETTLEMENTS:
            # The state the step settled in (older logs: a `step.completed` with its outcome).
            step(payload["node_id"])["outcome"] = payload.get("state") or payload.get("outcome")
        elif kind == "dataset.lifecycle":
            lifecycle.append(payload.get("event"))
        elif kind == "activity.observed":
            activities[str(payload["activity_id"])] = payload.get("observation")
    return {
        "terminal": run["terminal_status"],
        "steps": dict(sorted(steps.items())),
        "logs": logs,
        "lifecycle": lifecycle,
        "activities": dict(sorted(activities.items())),
    }


def check_invariants(run: dict[str, Any] | None, events: list[dict[str, Any]]) -> list[str]:
    """What is wrong with one run on its own (empty when nothing is)."""
    if run is None:
        return ["the run does not exist"]
    problems = []
    seqs = [e["seq"] for e in events]
    if seqs != list(range(1, int(run["last_seq"]) + 1)):
        problems.append(f"seqs are not 1..{run['last_seq']} without gaps")
    terminals = [i for i, e in enumerate(events) if e["type"] == "terminal"]
    if run["terminal_status"] is None and terminals:
        problems.append("a terminal event on a run that is not terminal")
    if run["terminal_status"] is not None and terminals != [len(events) - 1]:
        problems.append(f"terminal events at {terminals} of {len(events)}: want exactly one, the last")
    return problems


STORED_SQL = "SELECT live_node_progress, last_upload_seq FROM ledger.runs WHERE run_id = %s"


async def read_stored(db: Database, run_id: str) -> dict[str, Any] | None:
    """What the last upload set on the run's row (beyond the projection): node progress as stored
    and the attempt's last applied `upload_seq`."""
    async with db.connection() as conn:
        row = await (await conn.execute(STORED_SQL, (run_id,))).fetchone()
    return None if row is None else dict(row)


async def read_projection(db: Database, run_id: str) -> tuple[dict[str, Any], list[str]]:
    run, events = await read_run(db, run_id)
    return project(run, events), check_invariants(run, events)


def _lines(value: Any) -> list[str]:
    return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=True, default=repr).splitlines()


def differing_parts(oracle: dict[str, Any], faulty: dict[str, Any]) -> list[str]:
    return [part for part in PARTS if oracle.get(part) != faulty.get(part)]


def render_diff(oracle: dict[str, Any], faulty: dict[str, Any], *, context: int = 3) -> str:
    """A unified diff per differing part (``-`` oracle, ``+`` faulty run)."""
    out = []
    for part in differing_parts(oracle, faulty):
        diff = difflib.unified_diff(
            _lines(oracle[part]),
            _lines(faulty[part]),
            f"oracle.{part}",
            f"faulty.{part}",
            lineterm="",
            n=context,
        )
        out.append("\n".join(diff))
    return "\n".join(out)
