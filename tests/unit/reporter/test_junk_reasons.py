"""Why a runner line is junk, in the words a person reads.

`ledger report` warns once per kind of junk with the reason `reporter.lines` gives (and a line it
cannot decode by the reason `decode_line` gives), so the reason is behaviour: it must name the
field and the rule broken. Each rule of the runner protocol is probed here with the line that
breaks it (a bound passed by one) and the one at its bound, which is no junk.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from ledger.validate import INT64_MAX, MAX_EPOCH_MS, MAX_JSON_DEPTH
from reporter import lines
from reporter.folding import JUNK_RUNNER_LINE, EventFolder
from reporter.lines import MAX_LINE_DEPTH, decode_line, junk_reason
from reporter.pipeline import StaticPipeline
from reporter.sanitize import Sanitizer
from reporter.state import ProgressState

COUNT = "must be a count (0 to 2^63-1)"
TEXT = "must be a string or null"
NO_KIND = "event.type is not an execution event kind of the runner protocol"
ATTEMPT = "attempt must be an integer from 0 to 2^63-1"
AT = "at must be epoch milliseconds or null"


class Text(str):
    """A string of a subclass: still a string (the protocol's checks take any `str`)."""


def event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": "execution_event", "event": {"type": kind, **fields}}


def node(kind: str, **fields: Any) -> dict[str, Any]:
    """A docflow node event, well-formed but for `fields`."""
    return event(kind, **{"nodeId": "n", "attempt": 0, **fields})


# (line, reason): each breaks one rule, and the reason names the field and the rule.
JUNK = [
    # what a line is
    (None, "a line must be a JSON object"),
    ([{"type": "log", "line": "x"}], "a line must be a JSON object"),
    ("log", "a line must be a JSON object"),
    ({}, "type is not a line kind of the runner protocol"),
    ({"type": 5}, "type is not a line kind of the runner protocol"),
    ({"type": "Log", "line": "x"}, "type is not a line kind of the runner protocol"),
    ({"type": "execution_event.map.progress"}, "type is not a line kind of the runner protocol"),
    # log
    ({"type": "log"}, "line must be a non-empty string"),
    ({"type": "log", "line": ""}, "line must be a non-empty string"),
    ({"type": "log", "line": 5}, "line must be a non-empty string"),
    ({"type": "log", "line": ["x"]}, "line must be a non-empty string"),
    ({"type": "log", "line": "x", "source": 5}, "source must be a string or null"),
    ({"type": "log", "line": "x", "source": False}, "source must be a string or null"),
    # row_update
    ({"type": "row_update", "tableNamespace": 5}, f"tableNamespace {TEXT}"),
    ({"type": "row_update", "tableNamespace": "t", "rowKey": 7}, f"rowKey {TEXT}"),
    # execution_event: the envelope
    ({"type": "execution_event"}, "event must be an object"),
    ({"type": "execution_event", "event": "map.progress"}, "event must be an object"),
    ({"type": "execution_event", "event": {}}, NO_KIND),
    (event("map.paused"), NO_KIND),
    ({"type": "execution_event", "event": {"type": ["map.progress"]}},
     NO_KIND),
    # map starts: names and counts optional, each a string/count or null
    (event("map.started", mapNodeId=5), f"map.started: mapNodeId {TEXT}"),
    (event("map.preparing", artifactTableNamespace=["t"]), f"map.preparing: artifactTableNamespace {TEXT}"),
    (event("map.resumed", logicalNamespace=1.5), f"map.resumed: logicalNamespace {TEXT}"),
    (event("map.started", totalRows=-1), f"map.started: totalRows {COUNT} or null"),
    (event("map.started", completedRows=INT64_MAX + 1), f"map.started: completedRows {COUNT} or null"),
    (event("map.started", failedRows="3"), f"map.started: failedRows {COUNT} or null"),
    (event("map.started", totalRows=True), f"map.started: totalRows {COUNT} or null"),
    # map counts: completedRows required
    (event("map.progress"), f"map.progress: completedRows {COUNT}"),
    (event("map.progress", completedRows=None), f"map.progress: completedRows {COUNT}"),
    (event("map.progress", completedRows=-1), f"map.progress: completedRows {COUNT}"),
    (event("map.progress", completedRows=INT64_MAX + 1), f"map.progress: completedRows {COUNT}"),
    (event("map.progress", completedRows=2.5), f"map.progress: completedRows {COUNT}"),
    (event("map.progress", completedRows=True), f"map.progress: completedRows {COUNT}"),
    (event("map.completed", completedRows="1"), f"map.completed: completedRows {COUNT}"),
    (event("map.progress", completedRows=1, totalRows=-1), f"map.progress: totalRows {COUNT} or null"),
    (event("map.progress", completedRows=1, totalRows=INT64_MAX + 1),
     f"map.progress: totalRows {COUNT} or null"),
    (event("map.progress", completedRows=1, failedRows=-1), f"map.progress: failedRows {COUNT} or null"),
    (event("map.failed", completedRows=1, failedRows=INT64_MAX + 1),
     f"map.failed: failedRows {COUNT} or null"),
    (event("map.progress", completedRows=1, mapNodeId=5), f"map.progress: mapNodeId {TEXT}"),
    (event("map.progress", completedRows=1, artifactTableNamespace=5),
     f"map.progress: artifactTableNamespace {TEXT}"),
    (event("map.progress", completedRows=1, logicalNamespace=5), f"map.progress: logicalNamespace {TEXT}"),
    (event("map.suspended", completedRows=1, logicalNamespace=False),
     f"map.suspended: logicalNamespace {TEXT}"),
    # docflow: a node named by non-blank storable text, a time of epoch milliseconds
    (event("docflow.node.hit"), "docflow.node.hit: nodeId must be non-blank text"),
    (event("docflow.node.hit", nodeId=""), "docflow.node.hit: nodeId must be non-blank text"),
    (event("docflow.node.hit", nodeId=" \t"), "docflow.node.hit: nodeId must be non-blank text"),
    (event("docflow.node.hit", nodeId="a\x00b"), "docflow.node.hit: nodeId must be non-blank text"),
    (event("docflow.node.hit", nodeId="é\ud800"), "docflow.node.hit: nodeId must be non-blank text"),
    (event("docflow.node.hit", nodeId=5), "docflow.node.hit: nodeId must be non-blank text"),
    (event("docflow.node.hit", nodeId="n", at=-1), f"docflow.node.hit: {AT}"),
    (event("docflow.node.hit", nodeId="n", at=MAX_EPOCH_MS + 1),
     f"docflow.node.hit: {AT}"),
    (event("docflow.node.hit", nodeId="n", at="0"), f"docflow.node.hit: {AT}"),
    (node("docflow.node.started", nodeId=" "), "docflow.node.started: nodeId must be non-blank text"),
    (node("docflow.node.completed", at=-1), f"docflow.node.completed: {AT}"),
    # docflow node events: an attempt, flags, the invocation and error as text
    (event("docflow.node.started", nodeId="n"),
     f"docflow.node.started: {ATTEMPT}"),
    (node("docflow.node.started", attempt=-1), f"docflow.node.started: {ATTEMPT}"),
    (node("docflow.node.failed", attempt=INT64_MAX + 1),
     f"docflow.node.failed: {ATTEMPT}"),
    (node("docflow.node.completed", attempt=0.5),
     f"docflow.node.completed: {ATTEMPT}"),
    (node("docflow.node.started", inputsTruncated="yes"),
     "docflow.node.started: inputsTruncated must be a boolean or null"),
    (node("docflow.node.completed", outputsTruncated=0),
     "docflow.node.completed: outputsTruncated must be a boolean or null"),
    (node("docflow.node.started", invocationId=3), f"docflow.node.started: invocationId {TEXT}"),
    (node("docflow.node.failed", error={"message": "x"}), f"docflow.node.failed: error {TEXT}"),
    # tool calls
    (event("tool.call.started"), "tool.call.started: toolId must be a non-empty string"),
    (event("tool.call.started", toolId=""), "tool.call.started: toolId must be a non-empty string"),
    (event("tool.call.settled", toolId=5), "tool.call.settled: toolId must be a non-empty string"),
    (event("tool.call.settled", toolId="t", outcome=1), f"tool.call.settled: outcome {TEXT}"),
    # activity observations
    (event("activity.observed"), "activity.observed: observation must be an object"),
    (event("activity.observed", observation=[1]), "activity.observed: observation must be an object"),
    (event("activity.observed", observation={"observedAt": 1}),
     "activity.observed: observation.activityId must be non-blank text"),
    (event("activity.observed", observation={"activityId": "  ", "observedAt": 1}),
     "activity.observed: observation.activityId must be non-blank text"),
    (event("activity.observed", observation={"activityId": "a\x00", "observedAt": 1}),
     "activity.observed: observation.activityId must be non-blank text"),
    (event("activity.observed", observation={"activityId": "a"}),
     "activity.observed: observation.observedAt must be a number"),
    (event("activity.observed", observation={"activityId": "a", "observedAt": True}),
     "activity.observed: observation.observedAt must be a number"),
    (event("activity.observed", observation={"activityId": "a", "observedAt": "1"}),
     "activity.observed: observation.observedAt must be a number"),
    # dataset lifecycle
    (event("dataset.lifecycle", tableNamespace=5), f"dataset.lifecycle: tableNamespace {TEXT}"),
    (event("dataset.lifecycle", phase=["done"]), f"dataset.lifecycle: phase {TEXT}"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "reason"), JUNK)
def test_a_line_breaking_a_rule_is_junk_its_reason_naming_field_and_rule(line: object, reason: str) -> None:
    assert junk_reason(line) == reason


# Lines at the bounds of the same rules: no junk.
GOOD = [
    {"type": "log", "line": "x"},
    {"type": "log", "line": " ", "source": None},
    {"type": "log", "line": "x", "source": "stderr"},
    {"type": "log", "line": Text("x"), "source": Text("")},
    {"type": "row_update"},
    {"type": "row_update", "tableNamespace": "t", "rowKey": None},
    {"type": "row_update", "tableNamespace": Text("t"), "rowKey": Text("k")},
    {"type": "result"},
    {"type": Text("log"), "line": "x"},
    {"type": "execution_event", "event": {"type": Text("map.started")}},
    {"type": "result", "status": "exploded"},  # a status is judged where the run ends
    event("map.started"),
    event("map.preparing", mapNodeId=None, totalRows=None, completedRows=None, failedRows=None),
    event("map.resumed", mapNodeId="m", artifactTableNamespace="a", logicalNamespace="l"),
    event("map.started", mapNodeId=Text("m"), artifactTableNamespace=Text("a"), logicalNamespace=Text("l")),
    event("map.started", totalRows=0, completedRows=INT64_MAX, failedRows=INT64_MAX - 1),
    event("map.started", totalRows=3.0),
    event("map.progress", completedRows=0),
    event("map.progress", completedRows=INT64_MAX, totalRows=INT64_MAX, failedRows=INT64_MAX),
    event("map.progress", completedRows=0, totalRows=0, failedRows=0),
    event("map.progress", completedRows=3.0, totalRows=4.0, failedRows=1.0),
    event("map.progress", completedRows=1, totalRows=None, failedRows=None, mapNodeId=None,
          artifactTableNamespace=None, logicalNamespace=None),
    event("map.progress", completedRows=1, mapNodeId="m", artifactTableNamespace="a", logicalNamespace="l"),
    event("map.progress", completedRows=1, mapNodeId=Text("m"), logicalNamespace=Text("l")),
    event("map.completed", completedRows=INT64_MAX),
    event("map.failed", completedRows=0.0, failedRows=2),
    event("map.suspended", completedRows=1),
    event("docflow.node.hit", nodeId="n"),
    event("docflow.node.hit", nodeId=" n ", at=None),
    event("docflow.node.hit", nodeId="é", at=0),
    event("docflow.node.hit", nodeId="n", at=MAX_EPOCH_MS),
    node("docflow.node.started"),
    node("docflow.node.started", attempt=INT64_MAX, at=5.0),
    node("docflow.node.completed", attempt=2.0, inputsTruncated=True, outputsTruncated=False),
    node("docflow.node.failed", inputsTruncated=None, outputsTruncated=None, invocationId=None, error=None),
    node("docflow.node.failed", invocationId="i:1", error="boom"),
    node("docflow.node.failed", invocationId=Text("i:1"), error=Text("boom")),
    event("tool.call.started", toolId="t"),
    event("tool.call.started", toolId=" "),
    event("tool.call.settled", toolId="t", outcome=None),
    event("tool.call.settled", toolId="t", outcome="failed"),
    event("activity.observed", observation={"activityId": "a", "observedAt": 0}),
    event("activity.observed", observation={"activityId": "a", "observedAt": 1.5}),
    event("dataset.lifecycle"),
    event("dataset.lifecycle", tableNamespace="t", phase=None),
    event("dataset.lifecycle", tableNamespace=Text("t"), phase=Text("p")),
]  # fmt: skip


@pytest.mark.parametrize("line", GOOD, ids=range(len(GOOD)))
def test_a_line_at_the_bounds_of_its_rules_is_no_junk(line: object) -> None:
    assert junk_reason(line) is None


def test_the_hot_path_answers_a_well_formed_progress_line_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The most frequent line, well-formed up to its bounds, is answered without the general
    checks (they cost more than the fold itself); anything else takes them."""

    def general(line: object) -> str | None:
        raise AssertionError(f"the general path was taken for {line!r}")

    monkeypatch.setattr(lines, "general_junk_reason", general)
    for completed, total, failed in ((0, None, None), (INT64_MAX, INT64_MAX, INT64_MAX), (1, 0, 0)):
        full = event("map.progress", completedRows=completed, totalRows=total, failedRows=failed,
                     mapNodeId="m", artifactTableNamespace="a", logicalNamespace="l")  # fmt: skip
        assert junk_reason(full) is None
        bare = event("map.progress", completedRows=completed, totalRows=total, failedRows=failed)
        assert junk_reason(bare) is None


def test_an_exact_count_in_range_is_answered_without_a_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The usual count, an int from 0 to 2^63-1, is taken as it is; only another value (a float
    JavaScript sent, a value out of range) is converted."""

    def as_count(value: object) -> int | None:
        raise AssertionError(f"{value!r} was converted")

    monkeypatch.setattr(lines, "as_count", as_count)
    for count in (0, 1, INT64_MAX):
        for kind in (*lines.MAP_START_KINDS, *lines.MAP_COUNT_KINDS):
            line = event(kind, completedRows=count, totalRows=count, failedRows=count)
            assert lines.general_junk_reason(line) is None


@pytest.mark.parametrize(
    "line",
    [
        event("map.progress", completedRows=-1),
        event("map.progress", completedRows=INT64_MAX + 1),
        event("map.progress", completedRows=1.0),
        event("map.progress", completedRows=True),
        event("map.progress", completedRows=1, totalRows=-1),
        event("map.progress", completedRows=1, totalRows=INT64_MAX + 1),
        event("map.progress", completedRows=1, totalRows=1.0),
        event("map.progress", completedRows=1, failedRows=-1),
        event("map.progress", completedRows=1, failedRows=INT64_MAX + 1),
        event("map.progress", completedRows=1, failedRows=False),
        event("map.progress", completedRows=1, mapNodeId=Text("m")),
        event("map.progress", completedRows=1, mapNodeId=5),
        event("map.progress", completedRows=1, artifactTableNamespace=Text("a")),
        event("map.progress", completedRows=1, artifactTableNamespace=5),
        event("map.progress", completedRows=1, logicalNamespace=Text("l")),
        event("map.progress", completedRows=1, logicalNamespace=5),
        event("map.completed", completedRows=1),
        {"type": "execution_event", "event": [{"type": "map.progress", "completedRows": 1}]},
        {"type": "log", "line": "x"},
        [{"type": "execution_event", "event": {"type": "map.progress", "completedRows": 1}}],
    ],
)
def test_the_hot_path_leaves_every_other_line_to_the_general_checks(
    line: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[object] = []
    general = lines.general_junk_reason

    def counted(line: object) -> str | None:
        seen.append(line)
        return general(line)

    monkeypatch.setattr(lines, "general_junk_reason", counted)
    reason = junk_reason(line)
    assert seen == [line]
    assert reason == general(line)


def test_the_warning_a_person_reads_gives_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    """`ledger report` (through the sanitizer) warns once, naming the run, the kind of junk and
    why; further junk lines are counted."""
    folder = EventFolder(ProgressState(now_ms=lambda: 1), StaticPipeline(None), sanitizer=Sanitizer("run-7"))
    caplog.set_level(logging.WARNING, logger="reporter")
    folder.on_runner_event(event("tool.call.started", toolId=""))
    folder.on_runner_event({"type": "log", "line": ""})
    records = [r for r in caplog.records if r.name.startswith("reporter")]
    assert [r.getMessage() for r in records] == [
        "run run-7: dropping runner line the ledger would refuse (line: tool.call.started: toolId must be a"
        " non-empty string); further ones are counted, not logged"
    ]
    assert folder.sanitizer.counts[JUNK_RUNNER_LINE] == 2


# -- decoding --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["{", "[1, 2", "", '{"type": "log"} x', "{'type': 'log'}"])
def test_a_line_that_is_not_json_says_so_and_where(text: str) -> None:
    with pytest.raises(ValueError) as refused:
        json.loads(text)
    assert decode_line(text) == (None, f"not JSON ({refused.value})")
    assert str(refused.value)  # the decoder's own words say where


def test_the_depth_bound_is_twice_a_requests() -> None:
    assert MAX_LINE_DEPTH == 2 * MAX_JSON_DEPTH


@pytest.mark.parametrize("depth", [MAX_LINE_DEPTH - 1, MAX_LINE_DEPTH])
def test_an_object_nested_up_to_the_bound_decodes(depth: int) -> None:
    text = '{"a":' * depth + "1" + "}" * depth
    value, problem = decode_line(text)
    assert problem is None and value == json.loads(text)


@pytest.mark.parametrize("depth", [MAX_LINE_DEPTH - 1, MAX_LINE_DEPTH])
def test_a_line_at_the_bound_with_more_brackets_than_levels_decodes(depth: int) -> None:
    """Many brackets side by side are not depth: only nesting past the bound is junk."""
    text = "[" + "[], {}, " * 8 + "[" * (depth - 1) + "]" * (depth - 1) + "]"
    value, problem = decode_line(text)
    assert problem is None and value == json.loads(text)


@pytest.mark.parametrize("depth", [MAX_LINE_DEPTH + 1, MAX_LINE_DEPTH + 2])
def test_objects_and_arrays_nested_past_the_bound_are_junk(depth: int) -> None:
    text = '{"a":[' * (depth // 2) + '{"a":1}' * (depth % 2) + "]}" * (depth // 2)
    assert decode_line(text) == (None, f"nests deeper than {MAX_LINE_DEPTH} levels")


def test_a_line_with_no_more_brackets_than_the_bound_is_answered_by_counting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nesting needs a bracket a level: a line with at most `MAX_LINE_DEPTH` of them is not walked
    (a walk costs the hot path as much as the decoding)."""

    def json_depth(value: object) -> int:
        raise AssertionError("walked")

    monkeypatch.setattr(lines, "json_depth", json_depth)
    text = "[" * MAX_LINE_DEPTH + "]" * MAX_LINE_DEPTH
    assert decode_line(text) == (json.loads(text), None)


class _NoAbcCheck(type):
    def __instancecheck__(cls, instance: object) -> bool:
        if type(instance) is dict:
            raise AssertionError(f"an ABC check of a plain dict: {instance!r}")
        return isinstance(instance, dict)


class _Mapping(metaclass=_NoAbcCheck):
    pass


def test_a_plain_object_takes_no_abc_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decoded JSON is plain dicts: they are objects without the (slow) `Mapping` check."""
    monkeypatch.setattr(lines, "Mapping", _Mapping)
    for line in ({"type": "row_update"}, event("dataset.lifecycle"), event("activity.observed")):
        lines.general_junk_reason(line)


def test_a_plain_string_takes_no_isinstance_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decoded JSON text is plain `str`: a kind, a name or a source is text by its type alone (the
    subclass check is for other callers). The log line's own text is the one value checked."""
    text = "a log line"

    def checked(value: object, cls: type | tuple[type, ...]) -> bool:
        if type(value) is str and cls is str and value != text:
            raise AssertionError(f"an isinstance check of a plain string: {value!r}")
        return isinstance(value, cls)

    monkeypatch.setattr(lines, "isinstance", checked, raising=False)
    plain = [
        {"type": "log", "line": text, "source": "stderr"},
        {"type": "row_update", "tableNamespace": "t", "rowKey": "k"},
        event("map.started", mapNodeId="m", artifactTableNamespace="a", logicalNamespace="l"),
        event("dataset.lifecycle", tableNamespace="t", phase="p"),
    ]
    for line in plain:
        assert lines.general_junk_reason(line) is None


def test_a_line_too_deep_for_the_decoder_is_junk_with_the_same_reason() -> None:
    assert decode_line("[" * 200_000) == (None, f"nests deeper than {MAX_LINE_DEPTH} levels")
