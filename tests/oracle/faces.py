"""Every face of one run, read as one comparable record.

A *face* is a way a person or a program learns how a run went:

* ``http`` — `GET /v1/runs/{id}`, its events page by page (`GET …/events`) and its row of the
  run list (`GET /v1/runs`), with the API token;
* ``cli`` — `ledger run RUN --json`, `ledger events RUN --json` and the run's row of
  `ledger runs --json`, real subprocesses;
* ``sql`` — the views `ledger.run_overview` and `ledger.step_progress`, and the event log table;
* ``dashboard`` — what the dashboard's pages fetch, signed in through its sign-in form with the
  session cookie: the run (`GET /v1/runs/{id}`), the run list's row, and the events over the SSE
  tail the run page follows (its JSON, not its pixels).

Each is read into a `Record`: the run's status, its terminal status and error, each step's state,
reason and counts, the step totals (faces that show them) and the events (seq, type and the
fields that tell the story: node, state, reason, line, signal, status, error).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import httpx

from ledger.db import Database
from tests.oracle.profiles import CI

COUNT_KEYS = ("completed", "failed", "total")
TOTAL_KEYS = ("steps_total", "steps_done", "steps_failed", "steps_cancelled", "steps_skipped")
EVENT_KEYS = ("node_id", "state", "reason", "line", "signal", "status", "error")
CLI_TIMEOUT_S = 60.0
SSE_TIMEOUT_S = 30.0


@dataclass
class Record:
    face: str
    status: Any
    terminal_status: Any
    terminal_error: Any
    steps: dict[str, dict[str, Any]]
    totals: dict[str, Any] | None = None  # only faces that show the step totals
    events: list[dict[str, Any]] = field(default_factory=list)

    def part(self, name: str) -> Any:
        if name == "terminal":
            return {
                "status": self.status,
                "terminal_status": self.terminal_status,
                "error": self.terminal_error,
            }
        return getattr(self, name)


PARTS = ("terminal", "steps", "totals", "events")


def _step(node: Any) -> dict[str, Any]:
    node = node if isinstance(node, dict) else {}
    return {"state": node.get("state"), "reason": node.get("reason"), **{k: node.get(k) for k in COUNT_KEYS}}


def _event(event: dict[str, Any]) -> dict[str, Any]:
    out = {"seq": event.get("seq"), "type": event.get("type")}
    out.update({key: event[key] for key in EVENT_KEYS if event.get(key) is not None})
    return out


class FaceUnreadable(AssertionError):
    """A face does not show the run at all (no row in the run list, a command that failed)."""


def from_run(
    face: str, run: dict[str, Any], summary: dict[str, Any] | None, events: list[dict[str, Any]]
) -> Record:
    """A record from the API's shapes (the run, its run-list row, its events)."""
    terminal = run.get("terminal") or {}
    progress = run.get("live_node_progress") or {}
    return Record(
        face=face,
        status=run.get("status"),
        terminal_status=terminal.get("status"),
        terminal_error=terminal.get("error"),
        steps={node: _step(value) for node, value in sorted(progress.items())},
        totals=None if summary is None else {key: summary.get(key) for key in TOTAL_KEYS},
        events=[_event(e) for e in events],
    )


# -- HTTP ----------------------------------------------------------------------------------------------


RETRIES_503 = 20


async def _get(client: httpx.AsyncClient, path: str, **kwargs: Any) -> httpx.Response:
    """A GET that waits out a 503 as every client of the API must (`Retry-After`): a loaded
    machine may run the service's pool dry for a moment; that is not what the faces are read for."""
    for _ in range(RETRIES_503):
        answer = await client.get(path, **kwargs)
        if answer.status_code != 503:
            break
        await asyncio.sleep(min(float(answer.headers.get("Retry-After") or 1), 2.0))
    answer.raise_for_status()
    return answer


async def _events_over_http(client: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    after = "-1"
    while True:
        page = (await _get(client, f"/v1/runs/{run_id}/events", params={"after": after})).json()
        events.extend(page["events"])
        if not page["events"] or events[-1]["seq"] >= page["latest_seq"]:
            return events
        after = str(events[-1]["seq"])


async def _summary(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    answer = await _get(client, "/v1/runs", params={"limit": 50})
    return _row(answer.json(), run_id)


def _row(page: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The run's row of a run list page (the newest runs: the run just played is among them)."""
    row = next((row for row in page["runs"] if row["run_id"] == run_id), None)
    if row is None:
        raise FaceUnreadable(f"run {run_id} is not in the run list's first page")
    return dict(row)


async def read_http(base_url: str, token: str, run_id: str) -> Record:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as client:
        answer = await _get(client, f"/v1/runs/{run_id}")
        return from_run(
            "http", answer.json(), await _summary(client, run_id), await _events_over_http(client, run_id)
        )


# -- the dashboard ------------------------------------------------------------------------------------


async def _sse_events(client: httpx.AsyncClient, run_id: str, last_seq: int) -> list[dict[str, Any]]:
    """The run page's SSE tail from the start, until the run's last event (or the stream ends)."""
    events: list[dict[str, Any]] = []
    if last_seq <= 0:
        return events

    async def follow() -> bool:
        """Read the tail; False when the service answered 503 (try again)."""
        events.clear()
        async with client.stream("GET", f"/v1/runs/{run_id}/events/stream", params={"after": "-1"}) as answer:
            if answer.status_code == 503:
                return False
            answer.raise_for_status()
            data: list[str] = []
            async for line in answer.aiter_lines():
                if line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                elif line == "" and data:
                    events.append(json.loads("\n".join(data)))
                    data = []
                    if events[-1].get("seq", 0) >= last_seq:
                        return True
        return True

    async def follow_through_503() -> None:
        for _ in range(RETRIES_503):
            if await follow():
                return
            await asyncio.sleep(1.0)
        raise FaceUnreadable(f"the event stream of {run_id} kept answering 503")

    await asyncio.wait_for(follow_through_503(), SSE_TIMEOUT_S)
    return events


async def read_dashboard(base_url: str, token: str, run_id: str) -> Record:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        signed = await client.post(
            "/ui/sign-in",
            content=f"token={token}&next=/ui/".encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded", "Origin": base_url},
        )
        if signed.status_code != 303 or not client.cookies:
            raise FaceUnreadable(f"signing in to the dashboard answered {signed.status_code}")
        run = (await _get(client, f"/v1/runs/{run_id}", headers={"Accept": "application/json"})).json()
        summary = await _summary(client, run_id)
        events = await _sse_events(client, run_id, int(run.get("last_seq") or 0))
        return from_run("dashboard", run, summary, events)


# -- the CLI ----------------------------------------------------------------------------------------


def cli_env(base_url: str, token: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"LEDGER_URL": base_url, "LEDGER_TOKEN": token, "NO_COLOR": "1", "COLUMNS": "200"})
    return env


def ledger_command() -> list[str]:
    return [sys.executable, "-m", "ledger.cli"]


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [*ledger_command(), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise FaceUnreadable(f"ledger {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[:500]}")
    return done.stdout


async def read_cli(base_url: str, token: str, run_id: str) -> Record:
    env = cli_env(base_url, token)
    run_out, events_out, runs_out = await asyncio.gather(
        asyncio.to_thread(_cli, env, "run", run_id, "--json"),
        asyncio.to_thread(_cli, env, "events", run_id, "--json"),
        asyncio.to_thread(_cli, env, "runs", "--json", "--limit", "50"),
    )
    run, lines, page = json.loads(run_out), events_out.splitlines(), json.loads(runs_out)
    return from_run("cli", run, _row(page, run_id), [json.loads(line) for line in lines if line.strip()])


# -- SQL --------------------------------------------------------------------------------------------

_OVERVIEW = "SELECT * FROM ledger.run_overview WHERE run_id = %s"
_STEPS = "SELECT * FROM ledger.step_progress WHERE run_id = %s ORDER BY node_id"
_EVENTS = "SELECT seq, type, payload FROM ledger.run_events WHERE run_id = %s ORDER BY seq"


def _number(value: Any) -> Any:
    """A numeric column as the JSON faces give it (an integer)."""
    return int(value) if value is not None and not isinstance(value, bool) else value


async def read_sql(db: Database, run_id: str) -> Record:
    async with db.connection() as conn, conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        overview = await (await conn.execute(_OVERVIEW, (run_id,))).fetchone()
        steps = await (await conn.execute(_STEPS, (run_id,))).fetchall()
        events = await (await conn.execute(_EVENTS, (run_id,))).fetchall()
    if overview is None:
        raise FaceUnreadable(f"ledger.run_overview has no row for {run_id}")
    return Record(
        face="sql",
        status=overview["status"],
        terminal_status=overview["terminal_status"],
        terminal_error=overview["terminal_error"],
        steps={
            row["node_id"]: {
                "state": row.get("state"),
                "reason": row.get("reason"),
                **{k: _number(row.get(k)) for k in COUNT_KEYS},
            }
            for row in steps
        },
        totals={key: _number(overview.get(key)) for key in TOTAL_KEYS},
        events=[_event({"seq": e["seq"], "type": e["type"], **(e["payload"] or {})}) for e in events],
    )


FACES = ("http", "cli", "sql", "dashboard")


def faces_read() -> tuple[str, ...]:
    """The faces an example reads: all of them, unless ORACLE_FACES (a comma list, for narrowing a
    failure down by hand) names fewer; never fewer under CI."""
    wanted = os.environ.get("ORACLE_FACES", "").strip()
    if not wanted or CI:
        return FACES
    return tuple(face for face in FACES if face in wanted.split(","))


async def read_faces(base_url: str, token: str, db: Database, run_id: str) -> list[Record]:
    """Every face of the run, read after it has settled (nothing writes to it any more)."""
    readers = {
        "http": lambda: read_http(base_url, token, run_id),
        "cli": lambda: read_cli(base_url, token, run_id),
        "sql": lambda: read_sql(db, run_id),
        "dashboard": lambda: read_dashboard(base_url, token, run_id),
    }
    # One face after the other: the service's pool is small, and the machine may be busy.
    return [await readers[face]() for face in faces_read()]
