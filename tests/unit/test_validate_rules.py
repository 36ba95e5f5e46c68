"""Validation rules the shared checks are used for: an activity observation, a node's fields, and the
default for integral floats.

With test_validate.py and test_input_bounds.py this is what the mutation run
(`python -m tests.mutation ledger/validate.py`) measures.
"""

from __future__ import annotations

import pytest

from ledger.validate import (
    MAX_EPOCH_MS,
    InvalidInput,
    activity_observation,
    free_text_list,
    node_field,
    node_id,
    required_integer,
    string_list,
)


def refusal(check: object, *args: object) -> InvalidInput:
    with pytest.raises(InvalidInput) as refused:
        check(*args)  # type: ignore[operator]
    return refused.value


def test_an_activity_observation_needs_a_non_blank_activity_id() -> None:
    """`activityId` must be a non-blank string: blank is refused, naming the field."""
    assert activity_observation("o", {"activityId": "a", "observedAt": 1}) == {
        "activityId": "a",
        "observedAt": 1,
    }
    for blank in ("", "   "):
        assert (
            refusal(activity_observation, "o", {"activityId": blank, "observedAt": 1}).field == "o.activityId"
        )


def test_an_activity_observation_that_is_not_an_object_is_refused_naming_the_field() -> None:
    """A non-object observation is refused naming the field it came in."""
    assert refusal(activity_observation, "activity_observations[2]", [1]).field == "activity_observations[2]"


def test_node_times_and_counts_take_integral_floats() -> None:
    """JavaScript sends 3.0 for 3: a node's counts and times take integral floats as ints, up to the
    last epoch millisecond for a time."""
    assert node_field("n.completed", "completed", 3.0) == 3
    assert node_field("n.started_at", "started_at", 1000.0) == 1000
    assert node_field("n.started_at", "started_at", float(MAX_EPOCH_MS)) == MAX_EPOCH_MS
    assert refusal(node_field, "n.started_at", "started_at", 1.5).field == "n.started_at"


def test_node_text_fields_and_ids_are_refused_naming_the_field() -> None:
    """A bad namespace or node id is refused naming the field it came in."""
    assert refusal(node_field, "n.artifact_table_namespace", "artifact_table_namespace", 5).field == (
        "n.artifact_table_namespace"
    )
    assert refusal(node_id, "live_node_progress", "").field == "live_node_progress"


def test_integral_floats_are_refused_unless_asked_for() -> None:
    """By default an integer field refuses 3.0 (only JSON from JavaScript is read leniently, where
    the caller says so)."""
    assert refusal(required_integer, "x", 3.0).field == "x"
    assert required_integer("x", 3.0, integral_float=True) == 3


def test_a_list_field_that_is_not_a_list_says_what_it_should_hold() -> None:
    """The refusal of a non-list says it must be a list of strings."""
    assert refusal(string_list, "tags", "a").problem.startswith("must be a list of strings")
    assert refusal(free_text_list, "live_logs", "a").problem.startswith("must be a list of strings")


def test_a_node_io_object_is_taken_as_given() -> None:
    """A node's I/O is a JSON object, kept as given; anything else is refused naming the field."""
    node_io = {"attempt": 1, "inputs": {"q": [1, 2]}, "error": None}
    assert node_field("n.node_io", "node_io", node_io) == node_io
    assert refusal(node_field, "n.node_io", "node_io", [1]).field == "n.node_io"
