"""Splitting an upload that is too big: every part under the limit, nothing lost, the ledger ends
up where the one upload would have put it, the status only in the last part."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.ingest.rules import IngestState, plan_upload
from ledger.ingest.upload import parse_upload
from ledger.validate import INT64_MAX, encode_body
from reporter.bounded import split_upload


def upload(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "run_id": "r",
        "upload_seq": 1,
        "status": "running",
        "producer_attempt": 1,
        "live_node_progress": {},
        "live_logs": [],
        "live_log_total_count": 0,
        "dataset_lifecycle_events": [],
        "activity_observations": [],
        "terminal_log_replay": None,
        "last_checkpoint_at": 1_700_000_000_000,
    }
    body.update(fields)
    return body


def numbered(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**part, "upload_seq": seq} for seq, part in enumerate(parts, start=1)]


def applied(bodies: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], IngestState]:
    """The events and state the ledger's own rules make of `bodies`, in order."""
    state, events = IngestState(), []
    for body in bodies:
        plan = plan_upload("r", state, parse_upload("r", body))
        events.extend(plan.events)
        state = plan.state
    return events, state


def logs(events: list[dict[str, Any]]) -> list[str]:
    return [e["line"] for e in events if e["type"] == "log"]


def big_upload(status: str = "completed") -> dict[str, Any]:
    lines = [f"{i:03d} " + "l" * 300 for i in range(60)]
    replay = [*lines, *(f"r{i:03d} " + "r" * 200 for i in range(40))]
    return upload(
        status=status,
        live_logs=lines[10:],  # positions 11..60 of the channel
        live_log_total_count=60,
        live_node_progress={
            f"node-{i}": {"completed": i, "total": 10, "started_at": 1, "message": "m" * 500}
            for i in range(8)
        },
        dataset_lifecycle_events=[{"phase": f"p{i}", "pad": "e" * 400} for i in range(6)],
        activity_observations=[{"activityId": f"a{i}", "observedAt": i, "pad": "o" * 400} for i in range(6)],
        terminal_log_replay={"lines": replay, "dedupe_mode": "positional", "total_count": 100},
        dropped_one_shot_events=3,
        error="it broke",
    )


def test_an_upload_that_fits_is_left_whole() -> None:
    body = upload(live_logs=["a"], live_log_total_count=1)
    assert split_upload(body, 10_000) == [body]


@pytest.mark.parametrize("limit", [2_000, 4_096, 9_999])
def test_parts_stay_under_the_limit_and_the_ledger_ends_where_the_one_upload_puts_it(limit: int) -> None:
    body = big_upload()
    assert len(encode_body(body)) > limit
    parts = split_upload(body, limit)
    assert len(parts) > 1
    for part in parts:
        # Measured with the widest upload_seq the caller may give it.
        assert len(encode_body({**part, "upload_seq": INT64_MAX})) <= limit
    whole_events, whole_state = applied([body])
    split_events, split_state = applied(numbered(parts))
    assert logs(split_events) == logs(whole_events)  # no line lost, none doubled, in order
    assert split_state.live_node_progress == whole_state.live_node_progress
    assert split_state.live_log_count == whole_state.live_log_count == 100
    assert [e for e in split_events if e["type"] == "log.gap"] == [
        e for e in whole_events if e["type"] == "log.gap"
    ]  # the ten lines before the tail, once
    kinds = ("dataset.lifecycle", "activity.observed")
    assert [e for e in split_events if e["type"] in kinds] == [e for e in whole_events if e["type"] in kinds]


def test_the_status_and_its_error_only_in_the_last_part_the_dropped_count_only_in_the_first() -> None:
    parts = split_upload(big_upload("failed"), 4_096)
    assert [p["status"] for p in parts] == ["running"] * (len(parts) - 1) + ["failed"]
    assert [p.get("error") for p in parts] == [None] * (len(parts) - 1) + ["it broke"]
    assert [p.get("dropped_one_shot_events") for p in parts] == [3] + [None] * (len(parts) - 1)
    assert all(p["producer_attempt"] == 1 and p["run_id"] == "r" for p in parts)


def test_a_line_too_big_for_any_part_is_shortened_and_said() -> None:
    said: list[str] = []
    line = "q" * 5_000
    parts = split_upload(upload(live_logs=[line], live_log_total_count=1), 2_000, shrunk=said.append)
    [part] = parts
    assert said == ["log line"] and len(encode_body(part)) <= 2_000
    kept = part["live_logs"][0]
    assert kept.startswith("qqq") and "bytes cut" in kept and part["live_log_total_count"] == 1


def test_an_item_too_big_for_any_part_is_dropped_and_said() -> None:
    said: list[str] = []
    body = upload(
        live_logs=["x"],
        live_log_total_count=1,
        dataset_lifecycle_events=[{"pad": "e" * 3_000}, {"small": 1}],
        live_node_progress={"n": {"message": "m" * 3_000}, "ok": {"completed": 1}},
    )
    parts = split_upload(body, 2_000, shrunk=said.append)
    assert sorted(said) == ["dataset_lifecycle_events", "node"]
    assert [e for p in parts for e in p["dataset_lifecycle_events"]] == [{"small": 1}]
    assert [n for p in parts for n in p["live_node_progress"]] == ["ok"]
    assert [line for p in parts for line in p["live_logs"]] == ["x"]


def test_a_nodes_step_positions_travel_in_the_same_body_as_the_node() -> None:
    # A thousand nodes whose positions alone pass the limit: each body carries the positions of
    # its own nodes only, and the bodies together carry every one.
    nodes = {f"{i:04d}" + "s" * 66: {"started_at": i + 1, "state": "running"} for i in range(1_000)}
    positions = {node_id: {"started": 0, "settled": 0} for node_id in nodes}
    body = upload(live_node_progress=nodes, step_positions=positions)
    limit = 65_536
    assert len(encode_body(positions)) > limit // 2
    parts = split_upload(body, limit)
    assert len(parts) > 1
    for part in parts:
        assert len(encode_body({**part, "upload_seq": INT64_MAX})) <= limit
        assert part["step_positions"] == {
            node_id: positions[node_id] for node_id in part["live_node_progress"]
        }
    assert {k: v for part in parts for k, v in part["step_positions"].items()} == positions


def test_an_upload_without_step_positions_is_split_without_them() -> None:
    parts = split_upload(big_upload(), 4_096)
    assert len(parts) > 1 and all("step_positions" not in part for part in parts)
