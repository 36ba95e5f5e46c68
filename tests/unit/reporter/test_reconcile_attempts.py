"""Reconciliation: attempts count from 0 (a negative one is junk; a node without stored I/O takes
any observation of attempt 0 or later), and a map settled at the end has a start time."""

from __future__ import annotations

from typing import Any

from reporter.progress import NodeProgress
from reporter.reconcile import checkpoint_patches, observation_patches
from tests.unit.reporter.test_reconcile_rules import PIPELINE


def obs(**record: Any) -> dict[str, Any]:
    return {"node_id": "d", "status": "completed", "invocation_seq": 0, **record}


def test_an_observation_with_a_negative_attempt_is_junk_whatever_the_node_holds() -> None:
    """No runner counts attempts below 0: such a record is dropped like one without an attempt, on a
    node with stored I/O, on one without, and on one the ledger has never seen."""
    for nodes in ({}, {"d": NodeProgress()}, {"d": NodeProgress(node_io={"attempt": 0})}):
        for attempt in (-1, -2, -(2**31)):
            assert observation_patches([obs(attempt=attempt, outputs="x")], nodes, now_ms=1) == []


def test_a_node_without_stored_io_takes_the_first_observation_of_attempt_zero() -> None:
    """Attempt 0 is the first attempt: with nothing stored it is as recent as anything known."""
    for nodes in ({}, {"d": NodeProgress()}):
        [(node_id, patch)] = observation_patches([obs(attempt=0, outputs="x")], nodes, now_ms=1)
        assert node_id == "d" and patch["node_io"]["attempt"] == 0 and patch["node_io"]["outputs"] == "x"


def test_a_map_settled_from_a_checkpoint_frame_has_started_at_the_latest_when_it_settled() -> None:
    """A settled step has a start time: one that never reported its start takes the settling time,
    as from a sheet outcome; one that did keeps its own."""
    frame = {"status": "completed", "mapNodeId": "m", "completedRowsCount": 2}
    [(_, fresh)] = checkpoint_patches({"checkpoint": {"mapFrames": {"f": frame}}}, PIPELINE, {}, now_ms=9)
    assert (fresh["started_at"], fresh["completed_at"]) == (9, 9)
    started = {"m": NodeProgress(started_at=4)}
    [(_, kept)] = checkpoint_patches({"checkpoint": {"mapFrames": {"f": frame}}}, PIPELINE, started, now_ms=9)
    assert (kept["started_at"], kept["completed_at"]) == (4, 9)
