"""Absent is unchanged: a field a runner line leaves out never overwrites what the node holds; a
field it carries (null, 0 and false included) sets it. Every optional field of the map and docflow
events of the runner protocol's schema is covered, so a field added to the schema without a rule
here fails `test_every_optional_field_has_a_case`."""

from __future__ import annotations

from typing import Any

import pytest

from reporter.folding import EventFolder
from reporter.pipeline import StaticPipeline
from reporter.runner_protocol import runner_schema
from reporter.state import ProgressState

CONTRACT = {"staticPipeline": {"substeps": [{"type": "dataset", "id": "enrich", "tableNamespace": "leads"}]}}

_MAP_START_KINDS = ("map.preparing", "map.started", "map.resumed")
_MAP_COUNT_KINDS = ("map.progress", "map.suspended", "map.completed", "map.failed")
_DOCFLOW_KINDS = ("docflow.node.started", "docflow.node.completed", "docflow.node.failed")


def ex(**event: Any) -> dict[str, Any]:
    return {"type": "execution_event", "event": event}


def folder() -> EventFolder:
    return EventFolder(ProgressState(now_ms=lambda: 5_000), StaticPipeline(CONTRACT))


def node(fold: EventFolder, node_id: str) -> dict[str, Any]:
    return fold.state.nodes[node_id].to_wire()


def optional_fields(definition: str) -> list[str]:
    schema = runner_schema()["$defs"][definition]
    return sorted(set(schema["properties"]) - set(schema["required"]))


# -- map events ------------------------------------------------------------------------------------


def map_started() -> EventFolder:
    """`enrich` at 3 completed and 2 failed of 10, writing `leads_a`."""
    fold = folder()
    fold.on_runner_event(
        ex(
            type="map.started",
            mapNodeId="enrich",
            artifactTableNamespace="leads_a",
            totalRows=10,
            completedRows=3,
            failedRows=2,
        )
    )
    return fold


def map_event(kind: str, **fields: Any) -> dict[str, Any]:
    # Every field the schema allows, then the case's changes (None: left out).
    full: dict[str, Any] = {
        "type": kind,
        "mapNodeId": "enrich",
        "artifactTableNamespace": "leads_a",
        "logicalNamespace": "leads",
        "totalRows": 10,
        "completedRows": 4,
        "failedRows": 2,
    }
    for key, value in fields.items():
        if value is _ABSENT:
            full.pop(key)
        else:
            full[key] = value
    return ex(**full)


_ABSENT = object()
# The node field each optional map field sets, and what the node holds before (`map_started`).
_MAP_FIELD_TARGETS = {
    "completedRows": ("completed", 3),
    "failedRows": ("failed", 2),
    "totalRows": ("total", 10),
    "artifactTableNamespace": ("artifact_table_namespace", "leads_a"),
}


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        (kind, field)
        for kind in (*_MAP_START_KINDS, *_MAP_COUNT_KINDS)
        for field in ("completedRows", "failedRows", "totalRows", "artifactTableNamespace")
        # Required on the count events: a line without it is junk (a test of its own below).
        if not (field == "completedRows" and kind in _MAP_COUNT_KINDS)
    ],
)
def test_a_map_count_or_name_left_out_keeps_what_the_node_holds(kind: str, field: str) -> None:
    fold = map_started()
    fold.on_runner_event(map_event(kind, **{field: _ABSENT}))
    target, before = _MAP_FIELD_TARGETS[field]
    assert node(fold, "enrich")[target] == before


@pytest.mark.parametrize("kind", _MAP_COUNT_KINDS)
def test_a_count_event_without_completed_rows_is_junk_and_changes_nothing(kind: str) -> None:
    fold = map_started()
    before = node(fold, "enrich")
    fold.on_runner_event(map_event(kind, completedRows=_ABSENT, failedRows=7, totalRows=99))
    after = node(fold, "enrich")
    assert {k: v for k, v in after.items() if k != "updated_at"} == {
        k: v for k, v in before.items() if k != "updated_at"
    }
    assert fold.sanitizer.counts["runner line"] == 1


@pytest.mark.parametrize("kind", [*_MAP_START_KINDS, *_MAP_COUNT_KINDS])
@pytest.mark.parametrize("value", [None, 0])
def test_failed_rows_carried_as_null_or_0_set_it_to_0(kind: str, value: int | None) -> None:
    fold = map_started()
    fold.on_runner_event(map_event(kind, failedRows=value))
    assert node(fold, "enrich")["failed"] == 0


@pytest.mark.parametrize("kind", _MAP_START_KINDS)
@pytest.mark.parametrize("value", [None, 0])
def test_completed_rows_carried_as_null_or_0_on_a_start_set_it_to_0(kind: str, value: int | None) -> None:
    fold = map_started()
    fold.on_runner_event(map_event(kind, completedRows=value))
    assert node(fold, "enrich")["completed"] == 0


def test_map_resumed_without_completed_rows_does_not_send_the_bar_back() -> None:
    fold = map_started()
    fold.on_runner_event(ex(type="map.progress", mapNodeId="enrich", completedRows=7, failedRows=1))
    fold.on_runner_event(ex(type="map.resumed", mapNodeId="enrich", totalRows=10))
    wire = node(fold, "enrich")
    assert (wire["completed"], wire["failed"], wire["message"]) == (7, 1, "8 / 10 rows processed")
    assert (wire["started_rows"], wire["waiting_rows"]) == (8, 2)


def test_map_suspended_without_failed_rows_keeps_them_and_the_started_rows() -> None:
    fold = map_started()
    fold.on_runner_event(ex(type="map.progress", mapNodeId="enrich", completedRows=6, failedRows=3))
    fold.on_runner_event(ex(type="map.suspended", mapNodeId="enrich", completedRows=6))
    wire = node(fold, "enrich")
    assert (wire["completed"], wire["failed"], wire["started_rows"]) == (6, 3, 9)


def test_map_progress_without_failed_rows_keeps_them() -> None:
    fold = map_started()
    fold.on_runner_event(ex(type="map.progress", mapNodeId="enrich", completedRows=5))
    assert node(fold, "enrich")["failed"] == 2


def test_a_map_found_by_namespace_alone_lands_on_its_step() -> None:
    for names in ({"artifactTableNamespace": "leads_a"}, {"logicalNamespace": "leads"}):
        fold = map_started()
        fold.on_runner_event(ex(type="map.progress", completedRows=8, **names))
        assert node(fold, "enrich")["completed"] == 8


# -- docflow events --------------------------------------------------------------------------------


def docflow_started(**extra: Any) -> EventFolder:
    fold = folder()
    fold.on_runner_event(
        ex(
            type="docflow.node.started",
            nodeId="d",
            attempt=1,
            invocationId="i:1",
            inputs={"q": 1},
            inputsTruncated=True,
            at=10,
            **extra,
        )
    )
    return fold


def docflow_completed(fold: EventFolder, **fields: Any) -> None:
    fold.on_runner_event(
        ex(type="docflow.node.completed", nodeId="d", attempt=1, invocationId="i:1", **fields)
    )


@pytest.mark.parametrize("kind", _DOCFLOW_KINDS)
def test_inputs_and_their_flag_left_out_keep_what_the_invocation_carried(kind: str) -> None:
    fold = docflow_started()
    fold.on_runner_event(ex(type=kind, nodeId="d", attempt=1, invocationId="i:1", at=20))
    node_io = node(fold, "d")["node_io"]
    assert (node_io["inputs"], node_io["inputs_truncated"]) == ({"q": 1}, True)


@pytest.mark.parametrize("kind", _DOCFLOW_KINDS)
def test_inputs_carried_as_null_and_a_flag_carried_as_false_set_them(kind: str) -> None:
    fold = docflow_started()
    fold.on_runner_event(
        ex(type=kind, nodeId="d", attempt=1, invocationId="i:1", inputs=None, inputsTruncated=False, at=20)
    )
    node_io = node(fold, "d")["node_io"]
    assert (node_io["inputs"], node_io["inputs_truncated"]) == (None, False)


def test_a_flag_carried_as_null_clears_it() -> None:
    fold = docflow_started()
    docflow_completed(fold, inputsTruncated=None, at=20)
    assert node(fold, "d")["node_io"]["inputs_truncated"] is False


def test_outputs_and_their_flag_left_out_keep_what_the_invocation_reported() -> None:
    fold = docflow_started()
    docflow_completed(fold, outputs={"a": 2}, outputsTruncated=True, at=20)
    docflow_completed(fold, at=21)  # the same invocation's completion again, without its outputs
    node_io = node(fold, "d")["node_io"]
    assert (node_io["outputs"], node_io["outputs_truncated"]) == ({"a": 2}, True)
    docflow_completed(fold, outputs=None, outputsTruncated=False, at=22)
    node_io = node(fold, "d")["node_io"]
    assert (node_io["outputs"], node_io["outputs_truncated"]) == (None, False)


def test_a_new_invocation_keeps_nothing_of_the_last() -> None:
    fold = docflow_started()
    docflow_completed(fold, outputs={"a": 2}, at=20)
    fold.on_runner_event(ex(type="docflow.node.completed", nodeId="d", attempt=1, invocationId="i:2", at=30))
    assert node(fold, "d")["node_io"] == {"attempt": 1, "invocation_id": "i:2", "error": None}


@pytest.mark.parametrize("error", [_ABSENT, None, "", "  "])
def test_a_failed_node_without_its_error_text_still_failed(error: object) -> None:
    fold = docflow_started()
    fields = {} if error is _ABSENT else {"error": error}
    fold.on_runner_event(ex(type="docflow.node.failed", nodeId="d", attempt=1, invocationId="i:1", **fields))
    assert node(fold, "d")["node_io"]["error"] == "docflow node failed"


def test_at_left_out_is_when_the_reporter_read_the_line() -> None:
    fold = docflow_started()
    docflow_completed(fold)
    assert node(fold, "d")["completed_at"] == 5_000


def test_an_event_without_an_invocation_id_is_older_than_a_numbered_one() -> None:
    fold = docflow_started()
    before = node(fold, "d")
    fold.on_runner_event(ex(type="docflow.node.completed", nodeId="d", attempt=1, outputs=1))
    assert node(fold, "d") == before


def test_a_stored_observation_keeps_the_flags_and_values_it_does_not_carry() -> None:
    fold = docflow_started()
    docflow_completed(fold, outputs={"a": 2}, outputsTruncated=True, at=20)
    fold.apply_observations(
        [{"node_id": "d", "attempt": 1, "invocation_seq": 1, "invocation_id": "i:1", "status": "completed"}]
    )
    node_io = node(fold, "d")["node_io"]
    assert node_io["inputs"] == {"q": 1} and node_io["inputs_truncated"] is True
    assert node_io["outputs"] == {"a": 2} and node_io["outputs_truncated"] is True


# Which test above covers each optional field of each event the schema lists.
_CASES = {
    "mapStart": {
        "mapNodeId",
        "artifactTableNamespace",
        "logicalNamespace",
        "totalRows",
        "completedRows",
        "failedRows",
    },
    "mapCounts": {"mapNodeId", "artifactTableNamespace", "logicalNamespace", "totalRows", "failedRows"},
    "docflowNode": {
        "invocationId",
        "at",
        "inputs",
        "inputsTruncated",
        "outputs",
        "outputsTruncated",
        "error",
    },
    "docflowHit": {"at"},
}


@pytest.mark.parametrize("definition", sorted(_CASES))
def test_every_optional_field_has_a_case(definition: str) -> None:
    assert set(optional_fields(definition)) == _CASES[definition]
