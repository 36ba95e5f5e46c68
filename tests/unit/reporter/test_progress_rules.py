"""Per-node progress at its edges: one row, a node without counts, a settled map without a total, and
a node read back from the ledger.

Each test names the rule it checks; with test_progress.py they are what the mutation run
(`python -m tests.mutation reporter/progress.py`) measures.
"""

from __future__ import annotations

from reporter.progress import (
    NodeProgress,
    calls_in_flight_message,
    merge_patch,
    rows_processed_message,
    settled_map_patch,
)


def test_messages_at_one_row() -> None:
    """A total of one row is a total: the message names it; one completed row is counted as one."""
    assert rows_processed_message(0, 1) == "0 / 1 rows processed"
    assert rows_processed_message(1, 1) == "1 / 1 rows processed"
    assert calls_in_flight_message(1, 0, 1) == "1 calls in flight · 0 / 1 rows processed"


def test_stale_completion_counts_an_unreported_completed_as_zero() -> None:
    """A completed node with a total of 1 and no `completed` reported has completed nothing: it is
    not finished any more (its `completed_at` goes)."""
    node = NodeProgress(total=1, completed_at=50)
    merge_patch(node, {"message": "x"}, now_ms=60)
    assert node.completed_at is None


def test_stale_completion_needs_a_positive_total() -> None:
    """Without a total (never reported) nothing is below it: the node keeps `completed_at`."""
    node = NodeProgress(completed_at=50)
    merge_patch(node, {"message": "x"}, now_ms=60)
    assert node.completed_at == 50


def test_a_settled_map_without_a_total_counts_its_settled_rows_as_started() -> None:
    """With no positive total the patch names no total and no message, and every settled row
    (completed + failed) counts as started."""
    patch = settled_map_patch(2, 1, 0)
    assert (patch["total"], patch["message"], patch["started_rows"]) == (None, None, 3)
    assert (patch["completed"], patch["failed"], patch["completed_rows"]) == (2, 1, 2)
    assert (patch["active_rows"], patch["waiting_rows"]) == (0, 0)


def test_a_settled_map_of_one_row_names_its_total() -> None:
    """A total of one row is a total: named in the patch and in its message."""
    patch = settled_map_patch(1, 0, 1)
    assert (patch["total"], patch["started_rows"], patch["message"]) == (1, 1, "1 / 1 rows processed")


def test_from_wire_reads_every_stored_field_and_copies_node_io() -> None:
    """A node read back from the ledger has every field it stored (absent or null ones stay unset),
    and its `node_io` is a copy; a `node_io` that is not an object is taken as stored."""
    node = NodeProgress(
        completed=3,
        failed=1,
        total=5,
        started_rows=4,
        active_rows=1,
        waiting_rows=0,
        completed_rows=3,
        message="3 / 5 rows processed",
        artifact_table_namespace="t_1",
        started_at=10,
        completed_at=None,
        node_io={"attempt": 1},
        updated_at=20,
    )
    wire = {**node.to_wire(), "completed_at": None, "unknown": 1}
    back = NodeProgress.from_wire(wire)
    assert back == node
    assert back.node_io is not wire["node_io"]
    assert NodeProgress.from_wire({"node_io": "junk"}).node_io == "junk"


def test_a_settled_map_never_counts_more_rows_started_than_its_total() -> None:
    """A runner may report more settled rows than its total (a total of 1 with 2 settled): the rows
    started are still at most the total."""
    assert settled_map_patch(1, 1, 1)["started_rows"] == 1
    assert settled_map_patch(3, 2, 4)["started_rows"] == 4
