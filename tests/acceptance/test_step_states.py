"""Every face tells the same story of a run that did not complete, against the real service: a
runner that dies mid-map through `ledger report`, a terminal failure set over HTTP, the watchdog.
The run over HTTP, `ledger run --json`, `ledger events --json`, `ledger run`, `ledger.step_progress`
and `ledger.run_overview` agree on each step's state and reason; no face reads "done" from a
completion time. And the run list answers whatever one run's steps hold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from ledger.runlog.events import WATCHDOG_ERROR
from ledger.runlog.steps import SKIPPED_REASON
from ledger.validate import INT64_MAX
from tests.acceptance.conftest import Server, new_id
from tests.acceptance.test_cli import client_env, ledger
from tests.acceptance.test_report_cli import report

CONTRACT = {
    "staticPipeline": {
        "substeps": [
            {"id": "load", "type": "code"},
            {"id": "enrich", "type": "dataset", "tableNamespace": "leads"},
            {"id": "notify", "type": "code"},
        ]
    }
}


def execution(**event: Any) -> dict[str, Any]:
    return {"type": "execution_event", "event": event}


def all_events(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"/v1/runs/{run_id}/events", params={"after": "-1", "limit": 10000})
    assert answer.status_code == 200, answer.text
    return list(answer.json()["events"])


def views(url: str, run_id: str) -> tuple[dict[str, tuple[Any, ...]], dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT node_id, state, reason FROM ledger.step_progress WHERE run_id = %s", (run_id,)
        ).fetchall()
        overview = conn.execute("SELECT * FROM ledger.run_overview WHERE run_id = %s", (run_id,)).fetchone()
    assert overview is not None
    return {row["node_id"]: (row["state"], row["reason"]) for row in rows}, overview


def faces_agree(
    server: Server, client: httpx.Client, tmp_path: Path, database_url: str, run_id: str
) -> dict[str, Any]:
    """The run over HTTP, after checking that the CLI's machine-readable faces and the views say the
    same of it; returns its steps' (state, reason)."""
    run = client.get(f"/v1/runs/{run_id}").json()
    env = client_env(server, tmp_path)
    shown = ledger("run", run_id, "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == run
    listed = ledger("events", run_id, "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line) for line in listed.stdout.splitlines()] == all_events(client, run_id)
    steps = {
        node_id: (node["state"], node.get("reason")) for node_id, node in run["live_node_progress"].items()
    }
    in_views, overview = views(database_url, run_id)
    assert in_views == steps
    states = [state for state, _ in steps.values()]
    assert (overview["steps_done"], overview["steps_failed"], overview["steps_skipped"]) == (
        states.count("completed"),
        states.count("failed"),
        states.count("skipped"),
    )
    assert overview["terminal_error"] == (run["terminal"] or {}).get("error")
    return steps


def test_a_runner_that_dies_mid_map_fails_the_map_on_every_face(
    server: Server, client: httpx.Client, tmp_path: Path, database_url: str
) -> None:
    run_id = new_id("dies-mid-map")
    contract = tmp_path / "contract.json"
    contract.write_text(json.dumps(CONTRACT))
    stream = [
        execution(type="map.started", mapNodeId="enrich", artifactTableNamespace="leads", totalRows=1000),
        execution(type="map.progress", mapNodeId="enrich", totalRows=1000, completedRows=400, failedRows=2),
        # ...and the runner dies: no map end, no result line.
    ]
    done = report(server, tmp_path, run_id, stream, "--contract", str(contract))
    assert done.returncode != 0
    run = client.get(f"/v1/runs/{run_id}").json()
    assert run["terminal"]["status"] == "failed"
    steps = faces_agree(server, client, tmp_path, database_url, run_id)
    state, reason = steps["enrich"]
    assert state == "failed" and reason and reason.startswith("run failed")
    assert steps["load"] == ("completed", None)
    assert steps["notify"] == ("skipped", SKIPPED_REASON)
    failed = [e for e in all_events(client, run_id) if e["type"] == "step.failed"]
    assert [(e["node_id"], e["state"], e["reason"]) for e in failed] == [("enrich", "failed", reason)]
    assert not [
        e for e in all_events(client, run_id) if e["type"] == "step.completed" and e["node_id"] == "enrich"
    ]
    # The person's faces say so too: failed with its reason, never "done".
    text = ledger("run", run_id, env=client_env(server, tmp_path))
    assert text.returncode == 0, text.stderr
    enrich = next(line for line in text.stdout.splitlines() if "enrich" in line)
    assert "failed" in enrich and "done" not in enrich and "run failed" in enrich
    log = ledger("events", run_id, env=client_env(server, tmp_path))
    assert any("step.failed enrich · failed · run failed" in line for line in log.stdout.splitlines())


def _open_with_steps(client: httpx.Client, run_id: str) -> None:
    body = {
        "status": "running",
        "upload_seq": 1,
        "pipeline_steps": ["load", "enrich", "notify"],
        "live_node_progress": {
            "load": {"started_at": 1, "completed_at": 2},
            "enrich": {"started_at": 3, "completed": 10, "total": 100},
        },
    }
    assert client.post(f"/v1/runs/{run_id}/status", json=body).status_code == 200


def test_a_terminal_failure_set_over_http_settles_the_open_steps(
    server: Server, client: httpx.Client, tmp_path: Path, database_url: str
) -> None:
    run_id = new_id("put-failed")
    _open_with_steps(client, run_id)
    answer = client.put(f"/v1/runs/{run_id}/terminal", json={"status": "failed", "error": "out of memory"})
    assert answer.status_code == 200, answer.text
    steps = faces_agree(server, client, tmp_path, database_url, run_id)
    assert steps == {
        "load": ("completed", None),
        "enrich": ("failed", "run failed: out of memory"),
        "notify": ("skipped", SKIPPED_REASON),
    }
    kinds = [e["type"] for e in all_events(client, run_id)]
    assert kinds[-3:] == ["step.failed", "step.skipped", "terminal"]


def test_a_cancel_cancels_the_running_steps(
    server: Server, client: httpx.Client, tmp_path: Path, database_url: str
) -> None:
    run_id = new_id("put-cancelled")
    _open_with_steps(client, run_id)
    answer = client.put(f"/v1/runs/{run_id}/terminal", json={"status": "cancelled", "error": "asked to stop"})
    assert answer.status_code == 200, answer.text
    steps = faces_agree(server, client, tmp_path, database_url, run_id)
    assert steps["enrich"] == ("cancelled", "run cancelled: asked to stop")


def test_the_watchdog_settles_the_steps_of_the_run_it_fails(
    server: Server, client: httpx.Client, tmp_path: Path, database_url: str
) -> None:
    run_id = new_id("watchdog-steps")
    _open_with_steps(client, run_id)
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "UPDATE ledger.runs SET updated_at = now() - interval '2 hours' WHERE run_id = %s", (run_id,)
        )
    # A limit of its own: the view of stalled runs reads what this watchdog wrote.
    done = ledger("watchdog", "--once", "--stall-after", "3600", env={"LEDGER_DATABASE_URL": database_url})
    assert done.returncode == 0, done.stderr
    assert run_id in done.stdout
    steps = faces_agree(server, client, tmp_path, database_url, run_id)
    assert steps["enrich"] == ("failed", f"run failed: {WATCHDOG_ERROR}")
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT extract(epoch FROM stall_after) FROM ledger.watchdog_settings"
        ).fetchone() == (3600,)


def test_the_run_list_answers_whatever_one_run_s_steps_hold(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    """Two steps at the largest count a step may hold: their sums pass the bigint limit, and the
    list still answers (it was a 422 `bigint out of range` for every caller)."""
    run_id = new_id("huge-counts")
    most = {"completed": INT64_MAX, "failed": INT64_MAX, "total": INT64_MAX}
    body = {"status": "running", "live_node_progress": {"a": most, "b": most}}
    assert client.post(f"/v1/runs/{run_id}/status", json=body).status_code == 200
    page = client.get("/v1/runs", params={"limit": 1000})
    assert page.status_code == 200, page.text
    [row] = [r for r in page.json()["runs"] if r["run_id"] == run_id]
    assert (row["rows_completed"], row["rows_failed"], row["rows_total"]) == (2 * INT64_MAX,) * 3
    env = client_env(server, tmp_path)
    listed = ledger("runs", "--limit", "1000", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    as_json = json.loads(listed.stdout)
    [shown] = [r for r in as_json["runs"] if r["run_id"] == run_id]
    # The same shape as the API's page; only the age moved on between the two reads.
    assert set(as_json) == {"runs", "next_before"}
    assert {k: v for k, v in shown.items() if k != "age_ms"} == {
        k: v for k, v in row.items() if k != "age_ms"
    }
    text = ledger("runs", "--limit", "1000", env=env)
    assert text.returncode == 0, text.stderr
    assert run_id in text.stdout
