"""The shortcuts for what an upload repeats of the stored snapshot answer what the general path
answers: the same checked upload (values and their JSON types), the same refusal (field and
message), the same plan.

Every upload carries the whole snapshot, so most of its nodes repeat their stored entries. A field
equal to its stored value, JSON type for JSON type, is not checked again (`parse_node` with the
stored entry), and a node that is its stored entry is not diffed field by field (`diff_steps`).
The general path is what runs without them: `parse_upload` without the stored snapshot, and
`diff_steps` against stored entries that never compare equal. The uploads are generated from the
contract: each field of a node at its bounds and either side of them, of the wrong type, as a float
or a bool equal to an int, with unicode, NUL or a lone surrogate, its `node_io` nested to the depth
bound, with other key orders and extra keys; the stored snapshot is what the general path made of
an earlier such upload, through JSON as the database returns it.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import jsonb, validate
from ledger.errors import InvalidInput
from ledger.ingest import rules
from ledger.ingest.rules import IngestState, diff_steps, plan_upload
from ledger.ingest.upload import parse_node, parse_upload
from ledger.validate import INT64_MAX, MAX_EPOCH_MS, MAX_LOG_LINE_BYTES, MAX_VALUE_DEPTH


class _NeverEqual(dict[str, Any]):
    """A stored entry that no node compares equal to: `diff_steps` takes its general path."""

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = None


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


_LONG = MAX_LOG_LINE_BYTES
_COUNTS = [0, 1, -1, 1.0, 0.0, 1.5, True, False, "1", [1], INT64_MAX, INT64_MAX + 1, float(2**63), None]
_TIMES = [0, 1, 1.0, True, -1, MAX_EPOCH_MS, MAX_EPOCH_MS + 1, float(MAX_EPOCH_MS), "5", None]
_TEXTS = [
    "m",
    "m ",
    "é",
    "\ud800",
    "a\x00",
    "",
    " ",
    "x" * (_LONG - 1),
    "x" * _LONG,
    "x" * (_LONG + 1),
    "é" * (_LONG // 2 + 1),
    1,
    ["m"],
    None,
]
_STATES = [*validate.STEP_STATES, "bogus", "Running", 1, None]
_NODE_IOS = [
    {},
    {"a": 1},
    {"a": 1.0},
    {"a": True},
    {"a": [1]},
    {"a": [1.0]},
    {"a": [True]},
    {"a": (1,)},
    {"a": 1, "b": "x"},
    {"b": "x", "a": 1},
    {"error": "boom"},
    {"a": "a", "b": {"a": [0, "x"]}},
    {"error": "boom", "attempt": 2},
    {"a": "\x00"},
    {"a": "\ud800"},
    {"a": float("nan")},
    {"a": 10**400},
    {1: "x"},
    {"1": "x"},
    _nested(MAX_VALUE_DEPTH),
    _nested(MAX_VALUE_DEPTH + 1),
    "x",
    [1],
    None,
]
_FIELD_VALUES: dict[str, list[Any]] = {
    **dict.fromkeys(validate.NODE_COUNT_FIELDS, _COUNTS),
    **dict.fromkeys(validate.NODE_TIME_FIELDS, _TIMES),
    "message": _TEXTS,
    "artifact_table_namespace": _TEXTS,
    "reason": _TEXTS,
    "state": _STATES,
    "node_io": _NODE_IOS,
    "position": [0, 1, "x"],
    "extra": ["x", 1],
}
_NODE_IDS = ["a", "b", "é", " ", "\ud800"]


def _accepted(key: str, value: object) -> bool:
    if key not in validate.NODE_FIELDS or value is None:
        return True
    try:
        validate.node_field(key, key, value)
    except InvalidInput:
        return False
    return True


# What the earlier upload's nodes hold: values the check accepts, so that the snapshot stores them.
_VALID_VALUES = {
    key: [value for value in values if _accepted(key, value)] for key, values in _FIELD_VALUES.items()
}


@st.composite
def _nodes(draw: st.DrawFn, values: dict[str, list[Any]] = _FIELD_VALUES) -> dict[str, Any]:
    """A raw node: some of the fields, each one of its values."""
    keys = draw(st.lists(st.sampled_from(sorted(values)), unique=True, max_size=8))
    return {key: draw(st.sampled_from(values[key])) for key in keys}


@st.composite
def _progress(draw: st.DrawFn) -> object:
    nodes: dict[str, Any] = {}
    for node_id in draw(st.lists(st.sampled_from(_NODE_IDS), unique=True, max_size=3)):
        nodes[node_id] = draw(_nodes(_VALID_VALUES))
    return nodes


class _Str(str):
    """Text of a type of its own: the checks take any `str`."""


class _Key:
    """Equal to the text `a` and hashed as it, but not text: no JSON object key."""

    def __eq__(self, other: object) -> bool:
        return other == "a"

    def __hash__(self) -> int:
        return hash("a")


def _twins(value: object) -> list[Any]:
    """Values `==` takes for `value` that are not it: another JSON type, or no JSON type at all."""
    if isinstance(value, bool):
        return [int(value), float(value)]
    if isinstance(value, int):
        floats = [float(value)] if abs(value) < 2**1000 else []
        return [*floats, Decimal(value), *([bool(value)] if value in (0, 1) else [])]
    if isinstance(value, float):
        return [Decimal(value), *([int(value)] if value.is_integer() else [])]
    if isinstance(value, str):
        return [_Str(value), *([{_Key(): 1}] if value == "a" else [])]
    if isinstance(value, list):
        return [tuple(value)] + [
            [*value[:i], twin, *value[i + 1 :]] for i, item in enumerate(value) for twin in _twins(item)
        ]
    if isinstance(value, dict):
        twins: list[Any] = [{_Key() if key == "a" else key: item for key, item in value.items()}]
        for key, item in value.items():
            twins.extend({**value, key: twin} for twin in _twins(item))
        return twins
    return []


@st.composite
def _repeat(draw: st.DrawFn, stored: dict[str, Any]) -> object:
    """An upload's progress built on the stored snapshot: each stored node repeated as it is, with
    some fields replaced, dropped or reordered, or a node drawn afresh."""
    nodes: dict[str, Any] = {}
    for node_id, entry in stored.items():
        how = draw(st.sampled_from(["same", "twin", "changed", "dropped", "reordered", "fresh", "absent"]))
        node = dict(entry) if isinstance(entry, dict) else entry
        if how == "absent":
            continue
        if how == "fresh" or not isinstance(node, dict):
            node = draw(_nodes())
        elif how == "twin" and node:
            key = draw(st.sampled_from(sorted(node)))
            node[key] = draw(st.sampled_from([node[key], *_twins(node[key])]))
        elif how == "changed":
            node.update(draw(_nodes()))
        elif how == "dropped" and node:
            node.pop(draw(st.sampled_from(sorted(node))))
        elif how == "reordered":
            node = dict(reversed(node.items()))
        nodes[node_id] = node
    for node_id in draw(st.lists(st.sampled_from(_NODE_IDS), unique=True, max_size=2)):
        nodes.setdefault(node_id, draw(_nodes()))
    return nodes


def _typed(value: object) -> object:
    """`value` with the type of every part (`==` takes 1 for 1.0 or True), dict order kept."""
    if isinstance(value, dict):
        return ("dict", [(_typed(key), _typed(item)) for key, item in value.items()])
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_typed(item) for item in value])
    return (type(value).__name__, repr(value))


def _outcome(call: Any) -> tuple[Any, ...]:
    try:
        return ("accepted", _typed(asdict(call())))
    except InvalidInput as refused:
        return ("refused", refused.field, str(refused))


def _stored(body: dict[str, Any]) -> dict[str, Any]:
    """The snapshot the general path stores for `body` (`{}` when it refuses it), as JSON returns it."""
    try:
        plan = plan_upload("r", IngestState(), parse_upload("r", body))
    except InvalidInput:
        return {}
    stored: dict[str, Any] = json.loads(jsonb.dumps(plan.state.live_node_progress))
    return stored


_uploads = st.fixed_dictionaries(
    {"status": st.sampled_from(["running", "completed", "failed"])},
    optional={
        "pipeline_steps": st.lists(st.sampled_from(_NODE_IDS), unique=True, max_size=3),
        "live_logs": st.sampled_from([["x"], "x"]),
        "error": st.sampled_from(["boom", None]),
    },
)


@settings(max_examples=400, deadline=None, database=None)
@given(st.data(), _progress(), _uploads, _uploads)
def test_the_unchanged_node_shortcuts_agree_with_the_general_path(
    data: st.DataObject, first: object, earlier: dict[str, Any], later: dict[str, Any]
) -> None:
    # The earlier upload runs; the snapshot stores what it made of its nodes.
    earlier = {**earlier, "status": "running", "live_node_progress": first}
    stored = _stored(earlier)
    body = {**later, "upload_seq": 2, "live_node_progress": data.draw(_repeat(stored))}
    fast = _outcome(lambda: parse_upload("r", body, None, stored))
    assert fast == _outcome(lambda: parse_upload("r", body))
    if fast[0] != "accepted":
        return
    upload = parse_upload("r", body, None, stored)
    state = IngestState(last_upload_seq=1, live_node_progress=stored)
    general = IngestState(
        last_upload_seq=1, live_node_progress={key: _NeverEqual(node) for key, node in stored.items()}
    )
    assert _outcome(lambda: plan_upload("r", state, upload)) == _outcome(
        lambda: plan_upload("r", general, upload)
    )


# -- the shortcuts, named cases --------------------------------------------------------------------

REPORTED = {
    "started_at": 1,
    "updated_at": 2,
    "total": 10,
    "completed": 3,
    "message": "3 / 10 rows processed",
    "state": "running",
    "node_io": {"attempt": 1, "invocation_id": "inv:1", "inputs": {"table": "t", "rows": [1, 2.5]}},
}


def _checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The fields `validate.node_field` (the general check) is called for, from here on."""
    checked: list[str] = []
    real = validate.node_field

    def general(name: str, key: str, value: object) -> object:
        checked.append(name)
        return real(name, key, value)

    monkeypatch.setattr(validate, "node_field", general)
    return checked


def test_a_node_repeating_its_stored_entry_is_not_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A progress tick: one node of two changed. The other repeats its stored entry (as the
    database returns it: keys in its own order, `position` and `state` added) and none of its
    fields is checked again; the changed field of the other is."""
    stored = _stored(
        {
            "status": "running",
            "pipeline_steps": ["a", "b"],
            "live_node_progress": {"a": REPORTED, "b": REPORTED},
        }
    )
    assert stored["a"]["position"] == 0
    checked = _checks(monkeypatch)
    ids: list[object] = []
    real_id = validate.node_id

    def node_id(name: str, value: object) -> str:
        ids.append(value)
        return real_id(name, value)

    monkeypatch.setattr(validate, "node_id", node_id)
    tick = {"a": REPORTED, "b": {**REPORTED, "message": "4 / 10 rows processed"}, "c": {}}
    body = {"status": "running", "live_node_progress": tick}
    upload = parse_upload("r", body, None, stored)
    assert checked == ["live_node_progress.b.message"]
    assert ids == ["c"]
    assert _typed(upload.live_node_progress) == _typed(parse_upload("r", body).live_node_progress)


def test_a_repeated_value_of_another_json_type_is_checked_as_any_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`==` says `1.0` and `True` are `1`: equal to the stored value but not the stored value, they
    are checked (and converted or refused) as the general path does, at any depth of `node_io`."""
    stored = {"n": {"total": 1, "state": "running", "node_io": {"a": [1]}, "message": "m"}}
    checked = _checks(monkeypatch)
    node = parse_node(
        "n", {"total": 1.0, "state": "running", "node_io": {"a": [1.0]}, "message": "m"}, stored["n"]
    )
    assert _typed(node) == _typed({"total": 1, "message": "m", "node_io": {"a": [1.0]}, "state": "running"})
    assert checked == ["n.total", "n.node_io"]
    with pytest.raises(InvalidInput) as refused:
        parse_node("n", {"total": True}, stored["n"])
    assert (refused.value.field, str(refused.value)) == ("n.total", "n.total: must be an integer, got bool")
    for node_io in ({"a": [True]}, {"a": (1,)}, {1: [1]}):
        checked.clear()
        parse_node(
            "n", {"node_io": node_io}, {"node_io": {"a": [1], "1": [1]} if 1 in node_io else {"a": [1]}}
        )
        assert checked == ["n.node_io"]


def test_a_repeated_node_io_whose_parts_are_no_json_is_refused_as_the_general_path_refuses_it() -> None:
    """Equal to the stored `node_io` but holding what JSON cannot (a key that is not text, a number
    that is no JSON number): refused, the same refusal as without a stored entry."""
    stored = {"node_io": {"a": [1], "b": {"c": 2}}}
    for node_io in (
        {_Key(): [1], "b": {"c": 2}},
        {"a": [Decimal(1)], "b": {"c": 2}},
        {"a": [1], "b": {"c": Decimal(2)}},
    ):
        assert node_io == stored["node_io"]
        with pytest.raises(InvalidInput) as general:
            parse_node("n", {"node_io": node_io})
        with pytest.raises(InvalidInput) as fast:
            parse_node("n", {"node_io": node_io}, stored)
        assert (fast.value.field, str(fast.value)) == (general.value.field, str(general.value))


def test_a_node_id_is_checked_unless_the_stored_snapshot_holds_it() -> None:
    """A stored node id was checked when it was stored; an id equal to one but not text is not it."""
    stored = {"a": {"state": "running"}}
    assert parse_upload("r", {"status": "running", "live_node_progress": {"a": {}}}, None, stored)
    for node_id in (_Key(), " ", "\ud800"):
        body = {"status": "running", "live_node_progress": {node_id: {}}}
        with pytest.raises(InvalidInput) as fast:
            parse_upload("r", body, None, stored)
        with pytest.raises(InvalidInput) as general:
            parse_upload("r", body)
        assert (
            str(fast.value)
            == str(general.value)
            == ("live_node_progress: node ids must be non-empty strings without NUL or lone surrogates")
        )


def test_a_stored_entry_that_is_no_object_is_no_stored_node() -> None:
    """A snapshot entry that is not an object (no ledger writes one) holds no field: the node is
    checked whole, as without a stored snapshot."""
    body = {"status": "running", "live_node_progress": {"a": {"total": 1.0}, "b": {"message": "m"}, "c": {}}}
    stored: dict[str, Any] = {"a": [1], "b": "m", "c": None}
    assert _outcome(lambda: parse_upload("r", body, None, stored)) == _outcome(
        lambda: parse_upload("r", body)
    )


def test_a_stored_value_in_another_field_or_node_is_no_reason_to_skip_a_check() -> None:
    """Only the same field of the same node's stored entry counts: a message stored as another
    node's message, or the same text stored as another field, is not this field's value."""
    with pytest.raises(InvalidInput) as refused:
        parse_upload(
            "r",
            {"status": "running", "live_node_progress": {"a": {"state": "m"}}},
            None,
            {"a": {"message": "m"}, "b": {"state": "m"}},
        )
    assert refused.value.field == "live_node_progress.a.state"


def test_a_node_equal_to_its_stored_entry_appends_nothing_whatever_its_state() -> None:
    """The diff's shortcut: a node that is its stored entry (the pipeline's `position` aside) gives
    no event and is stored as it came; one that differs in anything is diffed."""
    stored = {"n": {"started_at": 1, "completed_at": 2, "state": "completed", "position": 0}}
    node = {"started_at": 1, "completed_at": 2, "state": "completed"}
    assert diff_steps(stored, {"n": node}, "failed") == ([], [], {"n": node})
    events, changed, _ = diff_steps(stored, {"n": {**node, "state": "failed"}}, "running")
    assert [event["type"] for event in events] == ["step.failed"] and changed == ["n"]
    moved = {**node, "position": 1}
    assert diff_steps(stored, {"n": moved}, "running") == ([], [], {"n": moved})


def test_a_node_that_is_its_stored_entry_is_not_compared_field_by_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The diff's shortcut is taken: a node that is its stored entry, with or without the
    pipeline's `position`, or uploaded without a state that derives to the stored one, is not
    compared count by count; a node that differs in anything is."""
    compared: list[object] = []
    real = rules.step_counts

    def counts(node: Any) -> list[Any]:
        compared.append(dict(node))
        return real(node)

    monkeypatch.setattr(rules, "step_counts", counts)
    node = {"started_at": 1, "total": 10, "completed": 3, "state": "running"}
    for stored in ({"n": node}, {"n": {**node, "position": 2}}):
        assert diff_steps(stored, {"n": dict(node)}, "running") == ([], [], {"n": node})
    assert diff_steps({"n": node}, {"n": {k: v for k, v in node.items() if k != "state"}}, "failed") == (
        [],
        [],
        {"n": node},
    )
    assert compared == []
    diff_steps({"n": {**node, "position": 2}}, {"n": {**node, "completed": 4}}, "running")
    assert len(compared) == 2
