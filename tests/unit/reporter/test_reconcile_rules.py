"""Terminal reconciliation, rule by rule: which settled accounts count, how their counts are read,
and how a durable observation is ordered against what a node already shows.

Each test names the rule it checks; together with test_reconcile.py they are what the mutation run
(`python -m tests.mutation reporter/reconcile.py`) measures.
"""

from __future__ import annotations

import math
from typing import Any

from reporter.pipeline import StaticPipeline
from reporter.progress import NodeProgress
from reporter.reconcile import checkpoint_patches, observation_patches, sheet_outcome_patches

PIPELINE = StaticPipeline(
    {
        "staticPipeline": {
            "substeps": [
                {"type": "dataset", "id": "m", "tableNamespace": "leads"},
                {"type": "dataset", "id": "n", "tableNamespace": "orders"},
            ]
        }
    }
)


def checkpoint(*frames: dict[str, Any]) -> dict[str, Any]:
    return {"status": "completed", "checkpoint": {"mapFrames": {str(i): f for i, f in enumerate(frames)}}}


def counts(patch: dict[str, Any]) -> tuple[Any, Any, Any]:
    return patch["completed"], patch["failed"], patch["total"]


# --- sheet outcomes: the reconciliation of record -------------------------------------------------


def test_sheet_outcome_without_failed_rows_sets_the_final_counts() -> None:
    """A clean run (no failed rows) keeps its final counts: only an all-zero outcome is skipped."""
    [(node_id, patch)] = sheet_outcome_patches(
        [{"table_namespace": "leads", "completed": 10, "failed": 0, "total": 10}], PIPELINE, {}, now_ms=3
    )
    assert node_id == "m"
    assert counts(patch) == (10, 0, 10)
    assert patch["message"] == "10 / 10 rows processed"


def test_sheet_outcome_camel_case_namespace_resolves_its_dataset_step() -> None:
    """`tableNamespace` (the runner's wire format) names the table as `table_namespace` does."""
    [(node_id, patch)] = sheet_outcome_patches(
        [{"tableNamespace": "orders_2", "completed": 4, "failed": 0, "total": 4}], PIPELINE, {}, now_ms=3
    )
    assert node_id == "n"
    assert counts(patch) == (4, 0, 4)
    assert patch["artifact_table_namespace"] == "orders_2"


def test_sheet_outcome_with_a_total_and_nothing_settled_is_not_skipped() -> None:
    """Only an outcome that is zero everywhere is skipped; a positive total alone (1 at the bound, or
    more) is progress to report: nothing has settled out of that many rows."""
    for total in (1, 5):
        [(_, patch)] = sheet_outcome_patches(
            [{"table_namespace": "leads", "completed": 0, "failed": 0, "total": total}],
            PIPELINE,
            {},
            now_ms=3,
        )
        assert counts(patch) == (0, 0, total)
    assert (
        sheet_outcome_patches(
            [{"table_namespace": "leads", "completed": 0, "failed": 0, "total": 0}], PIPELINE, {}, now_ms=3
        )
        == []
    )


def test_sheet_outcome_total_is_the_given_one_else_the_settled_rows() -> None:
    """A positive `total` is the denominator even when fewer rows settled; without one it is
    completed + failed."""
    [(_, given), (_, derived)] = sheet_outcome_patches(
        [
            {"table_namespace": "leads", "completed": 3, "failed": 1, "total": 10},
            {"table_namespace": "orders", "completed": 3, "failed": 1},
        ],
        PIPELINE,
        {},
        now_ms=3,
    )
    assert counts(given) == (3, 1, 10)
    assert counts(derived) == (3, 1, 4)


def test_sheet_outcome_fractional_counts_round_down_and_non_finite_ones_count_as_absent() -> None:
    """Counts from a JavaScript runner may be floats: a fraction rounds down; NaN or Infinity is no
    count at all (so the total falls back to the settled rows)."""
    [(_, patch)] = sheet_outcome_patches(
        [{"table_namespace": "leads", "completed": 2.7, "failed": 1.0, "total": math.inf}],
        PIPELINE,
        {},
        now_ms=3,
    )
    assert counts(patch) == (2, 1, 3)
    [(_, patch)] = sheet_outcome_patches(
        [{"table_namespace": "leads", "completed": math.nan, "failed": 1, "total": 6.5}],
        PIPELINE,
        {},
        now_ms=3,
    )
    assert counts(patch) == (0, 1, 6)


def test_sheet_outcomes_skipped_ones_do_not_stop_the_rest() -> None:
    """Junk, an unowned namespace and an all-zero outcome are each skipped; the outcomes after them
    still apply."""
    patches = sheet_outcome_patches(
        [
            "junk",
            {"table_namespace": "nobody", "completed": 1, "failed": 0, "total": 1},
            {"table_namespace": "leads", "completed": 0, "failed": 0, "total": 0},
            {"table_namespace": "orders", "completed": 2, "failed": 0, "total": 2},
        ],
        PIPELINE,
        {},
        now_ms=3,
    )
    assert [(node_id, counts(patch)) for node_id, patch in patches] == [("n", (2, 0, 2))]


def test_sheet_outcome_keeps_the_times_the_node_already_has() -> None:
    """A node that already started and completed keeps both times; a node without them gets now."""
    nodes = {"m": NodeProgress(started_at=2, completed_at=4)}
    [(_, kept), (_, stamped)] = sheet_outcome_patches(
        [
            {"table_namespace": "leads", "completed": 1, "failed": 0, "total": 1},
            {"table_namespace": "orders", "completed": 1, "failed": 0, "total": 1},
        ],
        PIPELINE,
        nodes,
        now_ms=9,
    )
    assert (kept["started_at"], kept["completed_at"]) == (2, 4)
    assert (stamped["started_at"], stamped["completed_at"]) == (9, 9)


# --- checkpoint frames: the map executor's settled account ---------------------------------------


def test_checkpoint_frames_skipped_ones_do_not_stop_the_rest() -> None:
    """A frame still running and one whose node does not resolve are skipped; later frames apply."""
    patches = checkpoint_patches(
        checkpoint(
            {"status": "running", "mapNodeId": "m", "completedRowsCount": 1},
            {"status": "completed", "artifactTableNamespace": "nobody"},
            {"status": "completed", "mapNodeId": "n", "completedRowsCount": 2, "totalRows": 2},
        ),
        PIPELINE,
        {},
        now_ms=1,
    )
    assert [(node_id, counts(patch)) for node_id, patch in patches] == [("n", (2, 0, 2))]


def test_checkpoint_absent_failed_count_is_zero() -> None:
    """A settled frame without `failedRowsCount` had no failed rows."""
    [(_, patch)] = checkpoint_patches(
        checkpoint({"status": "completed", "mapNodeId": "m", "completedRowsCount": 4, "totalRows": 4}),
        PIPELINE,
        {},
        now_ms=1,
    )
    assert counts(patch) == (4, 0, 4)


def test_checkpoint_without_count_or_key_list_has_no_completed_rows() -> None:
    """With neither `completedRowsCount` nor a `completedRowKeys` list, no row counts as completed."""
    for keys in (None, "abc"):
        [(_, patch)] = checkpoint_patches(
            checkpoint(
                {"status": "failed", "mapNodeId": "m", "failedRowsCount": 2, "completedRowKeys": keys}
            ),
            PIPELINE,
            {},
            now_ms=1,
        )
        assert counts(patch) == (0, 2, 2)


def test_checkpoint_total_of_one_is_kept_even_with_nothing_settled() -> None:
    """A positive `totalRows` (1 at the bound) is the denominator; only 0 or absent falls back."""
    [(_, patch)] = checkpoint_patches(
        checkpoint({"status": "failed", "mapNodeId": "m", "totalRows": 1}), PIPELINE, {}, now_ms=1
    )
    assert counts(patch) == (0, 0, 1)


def test_checkpoint_namespace_only_when_a_non_empty_string() -> None:
    """A frame's `artifactTableNamespace` replaces the node's only when it is a non-empty string."""
    nodes = {"m": NodeProgress(artifact_table_namespace="leads_live")}
    for namespace in ("", 7, None):
        [(_, patch)] = checkpoint_patches(
            checkpoint({"status": "completed", "mapNodeId": "m", "artifactTableNamespace": namespace}),
            PIPELINE,
            nodes,
            now_ms=1,
        )
        assert patch["artifact_table_namespace"] == "leads_live"


def test_checkpoint_stamps_completion_now_only_when_the_node_has_none() -> None:
    """A node that already completed keeps its completion time; one that did not gets now."""
    frame = {"status": "completed", "mapNodeId": "m", "completedRowsCount": 1, "totalRows": 1}
    [(_, kept)] = checkpoint_patches(
        checkpoint(frame), PIPELINE, {"m": NodeProgress(completed_at=4)}, now_ms=9
    )
    [(_, stamped)] = checkpoint_patches(checkpoint(frame), PIPELINE, {}, now_ms=9)
    assert (kept["completed_at"], stamped["completed_at"]) == (4, 9)


# --- durable observations: ordered by (attempt, invocation sequence) ------------------------------


def obs(**record: Any) -> dict[str, Any]:
    return {"node_id": "d", "attempt": 1, "status": "completed", **record}


def test_observation_older_than_the_stored_invocation_of_the_same_attempt_is_ignored() -> None:
    """Across uploads: the node's stored I/O names invocation `:3` of attempt 1; an observation of
    invocation 2 of that attempt is older and changes nothing, one of invocation 3 applies."""
    nodes = {"d": NodeProgress(node_io={"attempt": 1, "invocation_id": "d:3"})}
    assert observation_patches([obs(invocation_seq=2, outputs="old")], nodes, now_ms=1) == []
    [(_, patch)] = observation_patches([obs(invocation_seq=3, outputs="same")], nodes, now_ms=1)
    assert patch["node_io"]["outputs"] == "same"


def test_observation_without_a_sequence_orders_before_invocation_zero() -> None:
    """An observation without an invocation sequence is older than a stored invocation `:0`, and as
    recent as stored I/O that names no sequence either (so it applies)."""
    stored_zero = {"d": NodeProgress(node_io={"attempt": 1, "invocation_id": "d:0"})}
    stored_bare = {"d": NodeProgress(node_io={"attempt": 1, "invocation_id": "d"})}
    assert observation_patches([obs(outputs="x")], stored_zero, now_ms=1) == []
    [(_, patch)] = observation_patches([obs(outputs="x")], stored_bare, now_ms=1)
    assert patch["node_io"]["outputs"] == "x"


def test_observation_camel_case_sequence_orders_observations() -> None:
    """`invocationSeq` orders observations as `invocation_seq` does: invocation 1 after invocation 2
    of the same attempt is stale."""
    patches = observation_patches(
        [obs(invocationSeq=2, outputs="new"), obs(invocationSeq=1, outputs="stale")], {}, now_ms=1
    )
    assert [p["node_io"]["outputs"] for _, p in patches] == ["new"]


def test_observation_invocation_id_in_either_key_style_is_kept() -> None:
    """The observation's invocation id (`invocation_id` or `invocationId`) is stored in the node's I/O."""
    for record in (obs(invocation_id="d:1"), obs(invocationId="d:1")):
        [(_, patch)] = observation_patches([record], {}, now_ms=1)
        assert patch["node_io"]["invocation_id"] == "d:1"


def test_observation_times_settled_then_started_then_now() -> None:
    """Completion is at `settled_at` (or `settledAt`), else `started_at`, else now; the start is the
    node's known start, else the observation's own, else the completion time."""
    [(_, camel)] = observation_patches([obs(startedAt=40, settledAt=50)], {}, now_ms=99)
    assert (camel["started_at"], camel["completed_at"]) == (40, 50)
    [(_, started_only)] = observation_patches([obs(started_at=40)], {}, now_ms=99)
    assert (started_only["started_at"], started_only["completed_at"]) == (40, 40)
    [(_, bare)] = observation_patches([obs()], {}, now_ms=99)
    assert (bare["started_at"], bare["completed_at"]) == (99, 99)
    [(_, known)] = observation_patches([obs(started_at=40)], {"d": NodeProgress(started_at=5)}, now_ms=99)
    assert known["started_at"] == 5


def test_failed_observation_keeps_its_error() -> None:
    """A failed observation's own error is stored; without one, a generic failure text."""
    [(_, own)] = observation_patches([obs(status="failed", error="boom")], {}, now_ms=1)
    [(_, generic)] = observation_patches([obs(status="failed")], {}, now_ms=1)
    assert (own["node_io"]["error"], generic["node_io"]["error"]) == ("boom", "Docflow node failed.")


def test_observations_skipped_ones_do_not_stop_the_rest() -> None:
    """Junk, a record without a node or attempt, and an unknown status are each skipped; the records
    after them still apply."""
    patches = observation_patches(
        [
            "junk",
            {"node_id": " ", "attempt": 1, "status": "completed"},
            {"node_id": "d", "status": "completed"},
            obs(status="paused"),
            obs(node_id="e"),
        ],
        {},
        now_ms=1,
    )
    assert [node_id for node_id, _ in patches] == ["e"]
