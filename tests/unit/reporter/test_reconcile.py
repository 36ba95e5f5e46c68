"""Terminal reconciliation patches: checkpoint frames, sheet outcomes, durable observations."""

from __future__ import annotations

from typing import Any

from reporter.pipeline import StaticPipeline
from reporter.progress import NodeProgress
from reporter.reconcile import checkpoint_patches, observation_patches, sheet_outcome_patches

PIPELINE = StaticPipeline(
    {"staticPipeline": {"substeps": [{"type": "dataset", "id": "m", "tableNamespace": "leads"}]}}
)


def frames(**frame: Any) -> dict[str, Any]:
    return {"status": "completed", "checkpoint": {"mapFrames": {"f": frame}}}


def test_checkpoint_trusts_counts_over_key_arrays() -> None:
    result = frames(
        status="completed",
        artifactTableNamespace="leads_1",
        totalRows=10,
        completedRowsCount=7,
        failedRowsCount=3,
        completedRowKeys=["a"],
    )
    [(node_id, patch)] = checkpoint_patches(result, PIPELINE, {}, now_ms=5)
    assert node_id == "m"
    assert patch == {
        "completed": 7,
        "failed": 3,
        "total": 10,
        "started_rows": 10,
        "active_rows": 0,
        "waiting_rows": 0,
        "completed_rows": 7,
        "message": "10 / 10 rows processed",
        "artifact_table_namespace": "leads_1",
        "started_at": 5,
        "completed_at": 5,
    }


def test_checkpoint_key_arrays_only_when_the_count_is_absent_and_total_from_counts() -> None:
    result = frames(status="failed", mapNodeId="m", completedRowKeys=["a", "b"], failedRowsCount=1)
    [(_, patch)] = checkpoint_patches(result, PIPELINE, {"m": NodeProgress(completed_at=3)}, now_ms=5)
    assert (patch["completed"], patch["failed"], patch["total"], patch["completed_at"]) == (2, 1, 3, 3)


def test_checkpoint_skips_running_frames_unknown_nodes_and_junk() -> None:
    result = {
        "checkpoint": {
            "mapFrames": {
                "a": {"status": "running", "mapNodeId": "m", "completedRowsCount": 1},
                "b": {"status": "completed", "artifactTableNamespace": "other"},
                "c": "junk",
            }
        }
    }
    assert checkpoint_patches(result, PIPELINE, {}, now_ms=1) == []
    assert checkpoint_patches(None, PIPELINE, {}, now_ms=1) == []
    assert checkpoint_patches({"checkpoint": {"mapFrames": []}}, PIPELINE, {}, now_ms=1) == []


def test_sheet_outcomes_in_either_key_style_and_zero_outcomes_skipped() -> None:
    nodes = {"m": NodeProgress(started_at=2, artifact_table_namespace="leads_live")}
    patches = sheet_outcome_patches(
        [
            {"table_namespace": "leads_r", "completed": 5, "failed": 1, "total": 0},
            {"tableNamespace": "leads", "completed": 0, "failed": 0, "total": 0},
            {"table_namespace": "nobody", "completed": 1, "failed": 0, "total": 1},
            "junk",
        ],
        PIPELINE,
        nodes,
        now_ms=9,
    )
    assert patches == [
        (
            "m",
            {
                "completed": 5,
                "failed": 1,
                "total": 6,
                "started_rows": 6,
                "active_rows": 0,
                "waiting_rows": 0,
                "completed_rows": 5,
                "message": "6 / 6 rows processed",
                "artifact_table_namespace": "leads_live",
                "started_at": 2,
                "completed_at": 9,
            },
        )
    ]


def test_observations_apply_only_when_at_least_as_recent() -> None:
    nodes = {"d": NodeProgress(started_at=1, node_io={"attempt": 2, "invocation_id": "x:5"})}
    observations: list[object] = [
        {"node_id": "d", "attempt": 1, "invocation_seq": 9, "status": "completed", "outputs": "old"},
        {"node_id": "d", "attempt": 2, "invocation_seq": 4, "status": "completed", "outputs": "older seq"},
        {
            "node_id": "d",
            "attempt": 2,
            "invocation_seq": 5,
            "status": "completed",
            "outputs": "same",
            "settled_at": 50,
            "started_at": 40,
        },
        {"nodeId": "e", "attempt": 0, "invocationSeq": 0, "status": "failed", "startedAt": 7},
        {
            "node_id": "f",
            "attempt": 0,
            "invocation_seq": 0,
            "status": "started",
            "started_at": 8,
            "inputs": {"q": 1},
        },
        {"node_id": "g", "attempt": 0, "invocation_seq": 0, "status": "weird"},
        {"node_id": "", "attempt": 0, "invocation_seq": 0, "status": "started"},
    ]
    patches = dict(observation_patches(observations, nodes, now_ms=99))
    assert set(patches) == {"d", "e", "f"}
    assert patches["d"] == {
        "started_at": 1,
        "completed_at": 50,
        "node_io": {"attempt": 2, "outputs": "same", "error": None},
    }
    assert patches["e"] == {
        "started_at": 7,
        "completed_at": 7,
        "node_io": {"attempt": 0, "error": "Docflow node failed."},
    }
    assert patches["f"] == {"started_at": 8, "node_io": {"attempt": 0, "inputs": {"q": 1}}}


def test_observations_compare_with_each_other_in_order() -> None:
    patches = observation_patches(
        [
            {"node_id": "d", "attempt": 3, "invocation_seq": 2, "status": "completed", "outputs": "new"},
            {"node_id": "d", "attempt": 3, "invocation_seq": 1, "status": "completed", "outputs": "stale"},
        ],
        {},
        now_ms=1,
    )
    assert [p["node_io"]["outputs"] for _, p in patches] == ["new"]
