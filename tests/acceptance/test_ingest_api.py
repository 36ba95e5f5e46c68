"""Status uploads, sheet outcomes and node observations through the real service."""

from __future__ import annotations

from typing import Any

import httpx

from tests.acceptance.conftest import new_id


def upload(run_id: str, upload_seq: int, **fields: Any) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "upload_seq": upload_seq,
        "status": "running",
        "producer_attempt": 1,
        "live_node_progress": {
            "map-1": {
                "completed": 10 * upload_seq,
                "failed": 0,
                "total": 100,
                "started_at": 1_700_000_000_000,
            }
        },
        "live_logs": [f"line {n}" for n in range(upload_seq * 2)],
        "live_log_total_count": upload_seq * 2,
        **fields,
    }


def events_of(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    page = client.get(f"/v1/runs/{run_id}/events", params={"after": -1, "limit": 10_000})
    assert page.status_code == 200, page.text
    events: list[dict[str, Any]] = page.json()["events"]
    return events


def test_an_upload_delivered_twice_changes_nothing_the_second_time(client: httpx.Client) -> None:
    run_id = new_id("ingest")
    first = client.post(f"/v1/runs/{run_id}/status", json=upload(run_id, 1))
    assert first.status_code == 200, first.text
    assert first.json()["duplicate"] is False
    assert first.json()["logs_appended"] == 2
    before = (client.get(f"/v1/runs/{run_id}").json(), events_of(client, run_id))
    assert [e["type"] for e in before[1]].count("log") == 2
    again = client.post(f"/v1/runs/{run_id}/status", json=upload(run_id, 1))
    assert again.status_code == 200
    assert again.json()["duplicate"] is True
    assert (client.get(f"/v1/runs/{run_id}").json(), events_of(client, run_id)) == before


def test_a_late_retry_does_not_roll_progress_back(client: httpx.Client) -> None:
    run_id = new_id("ingest")
    for seq in (1, 2):
        assert client.post(f"/v1/runs/{run_id}/status", json=upload(run_id, seq)).status_code == 200
    progress = client.get(f"/v1/runs/{run_id}").json()["live_node_progress"]
    late = client.post(f"/v1/runs/{run_id}/status", json=upload(run_id, 1))
    assert late.json()["duplicate"] is True
    assert client.get(f"/v1/runs/{run_id}").json()["live_node_progress"] == progress
    assert progress["map-1"]["completed"] == 20


def test_a_stale_attempt_is_409_and_a_completed_upload_finishes_the_run(client: httpx.Client) -> None:
    run_id = new_id("ingest")
    assert (
        client.post(f"/v1/runs/{run_id}/status", json=upload(run_id, 1, producer_attempt=2)).status_code
        == 200
    )
    stale = client.post(f"/v1/runs/{run_id}/status", json=upload(run_id, 5, producer_attempt=1))
    assert stale.status_code == 409
    assert "stale producer attempt" in stale.json()["error"]
    done = client.post(
        f"/v1/runs/{run_id}/status", json=upload(run_id, 2, producer_attempt=2, status="completed")
    )
    assert done.status_code == 200, done.text
    assert done.json()["terminal_set"] is True
    assert client.get(f"/v1/runs/{run_id}/terminal").json()["state"]["status"] == "completed"


def test_a_malformed_upload_is_rejected_whole(client: httpx.Client) -> None:
    run_id = new_id("ingest")
    bad = client.post(f"/v1/runs/{run_id}/status", json=upload(run_id, 1, status="sleeping"))
    assert bad.status_code == 422
    assert bad.json()["error"].startswith("status: ")
    other_run = client.post(f"/v1/runs/{run_id}/status", json=upload("someone-else", 1))
    assert other_run.status_code == 422
    assert other_run.json()["error"].startswith("run_id: ")
    assert client.get(f"/v1/runs/{run_id}").status_code == 404, "nothing was written"


def test_sheet_rows_are_upserted_and_counted_per_namespace(client: httpx.Client) -> None:
    run_id = new_id("sheets")
    rows = [
        {"table_namespace": "people", "row_key": "1", "status": "completed"},
        {"table_namespace": "people", "row_key": "2", "status": "failed"},
        {"table_namespace": "people", "row_key": "3", "status": "pending"},
        {"table_namespace": "orgs", "row_key": "1", "status": "completed"},
    ]
    assert client.post(f"/v1/runs/{run_id}/sheets", json={"rows": rows}).json() == {"recorded": 4}
    # A row's newer outcome replaces the older one.
    client.post(
        f"/v1/runs/{run_id}/sheets",
        json={"rows": [{"table_namespace": "people", "row_key": "3", "status": "completed"}]},
    )
    outcomes = client.get(f"/v1/runs/{run_id}/sheets").json()["outcomes"]
    by_namespace = {o["table_namespace"]: o for o in outcomes}
    assert by_namespace["people"] == {"table_namespace": "people", "completed": 2, "failed": 1, "total": 3}
    assert by_namespace["orgs"]["total"] == 1
    bad = client.post(f"/v1/runs/{run_id}/sheets", json={"rows": [{"table_namespace": "x", "row_key": "1"}]})
    assert bad.status_code == 422
    assert bad.json()["error"].startswith("rows[0].status: ")


def test_observations_round_trip(client: httpx.Client) -> None:
    run_id = new_id("obs")
    observation = {
        "node_id": "tool-1",
        "attempt": 1,
        "invocation_id": "inv:3",
        "status": "completed",
        "inputs": {"q": "x"},
        "outputs": {"a": 1},
        "started_at": 1_700_000_000_000,
        "settled_at": 1_700_000_000_500,
    }
    recorded = client.post(f"/v1/runs/{run_id}/observations", json={"observations": [observation]})
    assert recorded.json() == {"recorded": 1}
    stored = client.get(f"/v1/runs/{run_id}/observations").json()["observations"]
    assert len(stored) == 1
    assert stored[0]["node_id"] == "tool-1"
    assert stored[0]["invocation_seq"] == 3
    assert stored[0]["outputs"] == {"a": 1}
    bad = client.post(f"/v1/runs/{run_id}/observations", json={"observations": [{"node_id": "n"}]})
    assert bad.status_code == 422
    assert bad.json()["error"].startswith("observations[0].")


def test_409_answers_say_why_in_a_code(client: httpx.Client) -> None:
    run_id = new_id("codes")
    assert (
        client.post(f"/v1/runs/{run_id}/status", json=upload(run_id, 1, producer_attempt=2)).status_code
        == 200
    )
    stale = client.post(f"/v1/runs/{run_id}/status", json=upload(run_id, 2, producer_attempt=1))
    assert stale.status_code == 409
    assert stale.json()["code"] == "stale_attempt"
    assert stale.json()["producer_attempt"] == 2
    # Someone else ends the run, saying why.
    ended = client.put(
        f"/v1/runs/{run_id}/terminal", json={"status": "failed", "error": "cancelled by the coordinator"}
    )
    assert ended.status_code == 200
    # An upload that would add events to the ended run: 409 `terminal`, with the stored state.
    late = client.post(f"/v1/runs/{run_id}/status", json=upload(run_id, 2, producer_attempt=2))
    assert late.status_code == 409, late.text
    body = late.json()
    assert body["code"] == "terminal"
    assert body["terminal"]["status"] == "failed"
    assert body["terminal"]["error"] == "cancelled by the coordinator"
    assert body["terminal"]["completed_at"] == ended.json()["completed_at"]
    # A different terminal state by upload is the same kind of refusal.
    done = client.post(
        f"/v1/runs/{run_id}/status",
        json=upload(run_id, 3, producer_attempt=2, status="completed", live_logs=[], live_log_total_count=4),
    )
    assert done.status_code == 409 and done.json()["code"] == "terminal"


def test_the_upload_answer_and_the_run_carry_the_resume_position(client: httpx.Client) -> None:
    run_id = new_id("resume")
    first = client.post(f"/v1/runs/{run_id}/status", json=upload(run_id, 1, producer_attempt=3))
    assert first.status_code == 200
    position = {"producer_attempt": 3, "last_upload_seq": 1, "live_log_count": 2}
    assert {k: first.json()[k] for k in position} == position
    second = client.post(f"/v1/runs/{run_id}/status", json=upload(run_id, 2, producer_attempt=3))
    position = {"producer_attempt": 3, "last_upload_seq": 2, "live_log_count": 4}
    assert {k: second.json()[k] for k in position} == position
    # A late duplicate says where the attempt stands, not where the duplicate was.
    late = client.post(f"/v1/runs/{run_id}/status", json=upload(run_id, 1, producer_attempt=3))
    assert late.json()["duplicate"] is True
    assert {k: late.json()[k] for k in position} == position
    run = client.get(f"/v1/runs/{run_id}").json()
    assert {k: run[k] for k in position} == position


def test_a_checkpoint_in_an_upload_is_a_heartbeat(client: httpx.Client) -> None:
    run_id = new_id("heartbeat")
    client.post(f"/v1/runs/{run_id}/status", json=upload(run_id, 1))
    assert client.get(f"/v1/runs/{run_id}").json()["last_heartbeat_at"] is None
    # A late duplicate that appends nothing still proves its producer alive.
    late = client.post(
        f"/v1/runs/{run_id}/status", json=upload(run_id, 1, last_checkpoint_at=1_700_000_000_000)
    )
    assert late.json()["duplicate"] is True and late.json()["events_appended"] == {}
    run = client.get(f"/v1/runs/{run_id}").json()
    assert isinstance(run["last_heartbeat_at"], int)
    assert run["last_heartbeat_at"] >= run["updated_at"]


def test_a_late_duplicate_is_answered_before_its_body_is_validated(client: httpx.Client) -> None:
    run_id = new_id("ingest")
    url = f"/v1/runs/{run_id}/status"
    for seq in (1, 2):
        assert client.post(url, json=upload(run_id, seq)).status_code == 200
    expected = client.post(url, json=upload(run_id, 1))
    assert expected.status_code == 200 and expected.json()["duplicate"] is True
    # The uploader resends unchanged bytes; a resend of an applied (attempt, upload_seq) is answered
    # as the duplicate it is, whatever else its body holds.
    garbled = upload(run_id, 1, status="sleeping", live_node_progress={"map-1": {"total": "many"}})
    duplicate = client.post(url, json=garbled)
    assert duplicate.status_code == 200, duplicate.text
    assert duplicate.json() == expected.json()
    # As a first delivery the same body is refused, naming the field, every time it is sent.
    for _ in range(2):
        refused = client.post(url, json={**garbled, "upload_seq": 3})
        assert refused.status_code == 422
        assert refused.json()["error"].startswith("status: ")
    stale = client.post(url, json=upload(run_id, 3, producer_attempt=2))
    assert stale.status_code == 200
    # Attempt 1's upload 1 was applied, but attempt 2 holds the run now: stale, not a duplicate.
    again = client.post(url, json=upload(run_id, 1))
    assert again.status_code == 409
    assert again.json()["code"] == "stale_attempt"


def test_an_upload_body_is_read_as_json_or_refused_as_before(client: httpx.Client) -> None:
    run_id = new_id("ingest")
    url = f"/v1/runs/{run_id}/status"
    json_type = {"Content-Type": "application/json"}
    cases = [
        (b'{"status": "running", "upload_seq": ', json_type, 400, "body: invalid JSON"),
        (b'{"status": "running"}', {"Content-Type": "text/plain"}, 400, "body: not JSON"),
        (b"", json_type, 422, "body: field required"),
        (b'["status", "running"]', json_type, 422, "body: input should be a valid dictionary"),
    ]
    for body, headers, status, error in cases:
        answer = client.post(url, content=body, headers=headers)
        assert answer.status_code == status, (body, answer.text)
        assert answer.json()["error"].startswith(error), (body, answer.text)
    assert client.get(f"/v1/runs/{run_id}").status_code == 404, "nothing was written"
    # No Content-Type is read as JSON; what the fast decoder refuses but JSON allows (a lone
    # surrogate escape, repaired in a log line; an integer beyond 64 bits, unknown and ignored)
    # is still read.
    odd = b'{"status": "running", "upload_seq": 1, "live_logs": ["a\\ud800"], "future": 18446744073709551616}'
    answer = client.post(url, content=odd, headers={"Content-Type": ""})
    assert answer.status_code == 200, answer.text
    assert answer.json()["logs_appended"] == 1
