"""Runs, appends, terminal state and run mappings through the real service."""

from __future__ import annotations

import httpx

from tests.acceptance.conftest import new_id


def open_run(client: httpx.Client, play_name: str | None = None) -> str:
    run_id = new_id("run")
    answer = client.post("/v1/runs", json={"run_id": run_id, "play_name": play_name})
    assert answer.status_code == 200, answer.text
    return run_id


def test_open_is_idempotent_and_get_answers_the_contract_shape(client: httpx.Client) -> None:
    run_id = open_run(client, play_name="enrich")
    again = client.post("/v1/runs", json={"run_id": run_id})
    assert again.status_code == 200
    run = client.get(f"/v1/runs/{run_id}").json()
    assert set(run) >= {
        "run_id",
        "play_name",
        "status",
        "created_at",
        "updated_at",
        "last_seq",
        "producer_attempt",
        "terminal",
        "live_node_progress",
    }
    assert run["run_id"] == run_id
    assert run["play_name"] == "enrich"
    assert run["last_seq"] == 0
    assert run["terminal"] is None
    assert isinstance(run["created_at"], int)


def test_appends_get_gapless_seqs_across_calls(client: httpx.Client) -> None:
    run_id = open_run(client)
    first = client.post(
        f"/v1/runs/{run_id}/events",
        json={"events": [{"type": "status", "status": "running"}, {"type": "log", "line": "hello"}]},
    )
    assert first.status_code == 200, first.text
    second = client.post(f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": "again"}]})
    seqs = [e["seq"] for e in first.json()["events"] + second.json()["events"]]
    assert seqs == [1, 2, 3]
    assert first.json()["events"][1]["line"] == "hello"
    assert client.get(f"/v1/runs/{run_id}").json()["last_seq"] == 3


def test_a_bad_event_rejects_the_whole_batch(client: httpx.Client) -> None:
    run_id = open_run(client)
    answer = client.post(
        f"/v1/runs/{run_id}/events",
        json={"events": [{"type": "log", "line": "fine"}, {"type": "no-such-type"}]},
    )
    assert answer.status_code == 422
    assert "events[1]" in answer.json()["error"]
    assert client.get(f"/v1/runs/{run_id}").json()["last_seq"] == 0


def test_unknown_runs_are_404(client: httpx.Client) -> None:
    missing = new_id("missing")
    assert client.get(f"/v1/runs/{missing}").status_code == 404
    appended = client.post(f"/v1/runs/{missing}/events", json={"events": [{"type": "log", "line": "x"}]})
    assert appended.status_code == 404
    assert missing in appended.json()["error"]
    assert client.get(f"/v1/runs/{missing}/terminal").status_code == 404


def test_first_terminal_wins_and_a_different_one_is_409(client: httpx.Client) -> None:
    run_id = open_run(client)
    assert client.get(f"/v1/runs/{run_id}/terminal").json() == {"state": None}
    body = {"status": "completed", "result": {"rows": 3}, "total_rows": 3, "duration_ms": 1200}
    first = client.put(f"/v1/runs/{run_id}/terminal", json=body)
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "completed"
    assert first.json()["result"] == {"rows": 3}
    again = client.put(f"/v1/runs/{run_id}/terminal", json=body)
    assert again.status_code == 200
    last_seq = client.get(f"/v1/runs/{run_id}").json()["last_seq"]
    assert last_seq == 1, "the same terminal again must not append a second terminal event"
    different = client.put(f"/v1/runs/{run_id}/terminal", json={"status": "failed", "error": "boom"})
    assert different.status_code == 409
    assert "error" in different.json()
    state = client.get(f"/v1/runs/{run_id}/terminal").json()["state"]
    assert state["status"] == "completed"
    assert isinstance(state["completed_at"], int)
    # A terminal run accepts no more events.
    late = client.post(f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": "late"}]})
    assert late.status_code == 409
    assert client.get(f"/v1/runs/{run_id}").json()["last_seq"] == 1


def test_terminal_status_outside_the_enum_is_422_naming_the_field(client: httpx.Client) -> None:
    run_id = open_run(client)
    answer = client.put(f"/v1/runs/{run_id}/terminal", json={"status": "done"})
    assert answer.status_code == 422
    assert answer.json()["error"].startswith("status: ")


def test_mapping_block_race_has_exactly_one_winner(client: httpx.Client) -> None:
    run_id = new_id("mapped")
    base = f"/v1/runs/{run_id}/mapping"
    # Instances of this test's own: the session's database is shared, and another test's pool
    # holding a live entry of the same id refuses the mapping.
    first, second = new_id("instance"), new_id("instance")
    assert client.put(base, json={"instance_id": first, "version": "v1"}).json() == {"mapped": True}
    resolved = client.get(base, params={"version": "v1"}).json()
    assert resolved == {"instance_id": first, "started_at": None}
    # The coordinator gives up on the instance before it starts: it may no longer map itself.
    assert client.post(base + "/block", json={"instance_id": first, "version": "v1"}).json() == {
        "blocked": True,
        "started": False,
    }
    assert client.put(base, json={"instance_id": first, "version": "v1", "started": True}).json() == {
        "mapped": False
    }
    # Another run that started first cannot be blocked.
    other = new_id("mapped")
    client.put(f"/v1/runs/{other}/mapping", json={"instance_id": second, "version": "v1", "started": True})
    block = client.post(f"/v1/runs/{other}/mapping/block", json={"instance_id": second, "version": "v1"})
    assert block.json() == {"blocked": False, "started": True}
    started = client.get(f"/v1/runs/{other}/mapping", params={"version": "v1"}).json()
    assert started["instance_id"] == second
    assert isinstance(started["started_at"], int)
    # Another version's mapping resolves to none.
    assert client.get(f"/v1/runs/{other}/mapping", params={"version": "v2"}).json()["instance_id"] is None


def test_mapping_needs_a_version(client: httpx.Client) -> None:
    answer = client.get(f"/v1/runs/{new_id('mapped')}/mapping")
    assert answer.status_code == 422
    assert answer.json()["error"].startswith("version: ")


def test_list_runs_answers_the_newest_first(client: httpx.Client) -> None:
    older, newer = open_run(client), open_run(client)
    runs = client.get("/v1/runs", params={"limit": 1000}).json()["runs"]
    ids = [run["run_id"] for run in runs]
    assert ids.index(newer) < ids.index(older)
    assert client.get("/v1/runs", params={"limit": 0}).status_code == 422


def test_list_runs_pages_on_from_next_before(client: httpx.Client) -> None:
    opened = [open_run(client) for _ in range(3)]
    seen: list[str] = []
    params: dict[str, str | int] = {"limit": 2}
    # Runs another test opens meanwhile land ahead of the cursor, never between its pages.
    for _ in range(10):
        page = client.get("/v1/runs", params=params).json()
        seen.extend(run["run_id"] for run in page["runs"])
        if opened[0] in seen or page["next_before"] is None:
            break
        params = {"limit": 2, "before": page["next_before"]}
    assert len(seen) == len(set(seen))
    assert [run_id for run_id in seen if run_id in opened] == opened[::-1]
    bad = client.get("/v1/runs", params={"before": "not-a-cursor"})
    assert bad.status_code == 422
    assert bad.json()["error"].startswith("before: ")
    # Any instant and run id make a cursor: nothing was opened before 1970.
    assert client.get("/v1/runs", params={"before": "0:x"}).json() == {"runs": [], "next_before": None}


def test_appending_to_an_ended_run_is_409_terminal_with_who_ended_it(client: httpx.Client) -> None:
    run_id = open_run(client)
    state = {"status": "failed", "error": "run watchdog: no progress; orchestrator presumed dead"}
    assert client.put(f"/v1/runs/{run_id}/terminal", json=state).status_code == 200
    late = client.post(f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": "late"}]})
    assert late.status_code == 409
    body = late.json()
    assert body["code"] == "terminal"
    assert body["terminal"]["status"] == "failed"
    assert body["terminal"]["error"] == state["error"]
    assert isinstance(body["terminal"]["completed_at"], int)
    assert state["error"] in body["error"]
    other = client.put(f"/v1/runs/{run_id}/terminal", json={"status": "completed"})
    assert other.status_code == 409
    assert other.json()["code"] == "terminal"
    assert other.json()["terminal"] == body["terminal"]
    # Repeating the stored state is no conflict.
    assert client.put(f"/v1/runs/{run_id}/terminal", json=state).status_code == 200
