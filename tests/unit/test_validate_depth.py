"""How deep a stored JSON value may nest, probed at the bound.

With test_validate.py and test_input_bounds.py this is what the mutation run
(`python -m tests.mutation ledger/validate.py`) measures.
"""

from __future__ import annotations

from typing import Any

import pytest

from ledger.validate import MAX_VALUE_DEPTH, InvalidInput, json_depth, json_value


def nested(levels: int) -> Any:
    """A value `levels` deep: objects and lists alternating around a scalar."""
    value: Any = 1
    for level in range(levels):
        value = {"k": value} if level % 2 else [value]
    return value


def test_json_depth_counts_objects_and_lists_and_not_scalars() -> None:
    """A scalar is 0 deep; each object or list around it adds one, whichever branch is deepest."""
    assert [json_depth(nested(n)) for n in (0, 1, 2, 3)] == [0, 1, 2, 3]
    assert json_depth({"a": 1, "b": [[2]], "c": []}) == 3


@pytest.mark.parametrize("levels", [MAX_VALUE_DEPTH - 1, MAX_VALUE_DEPTH])
def test_a_value_nested_up_to_the_bound_is_accepted(levels: int) -> None:
    """A stored value may nest exactly `MAX_VALUE_DEPTH` levels (the bound is inclusive)."""
    value = nested(levels)
    assert json_value("v", value) is value


def test_a_value_nested_one_past_the_bound_is_refused_naming_the_field() -> None:
    """One level more is refused, naming the field and the bound."""
    with pytest.raises(InvalidInput) as refused:
        json_value("v", nested(MAX_VALUE_DEPTH + 1))
    assert refused.value.field == "v"
    assert refused.value.problem == f"nests deeper than {MAX_VALUE_DEPTH} levels"


def test_a_caller_given_bound_is_inclusive_too() -> None:
    """`max_depth` given by the caller works the same: at it accepted, past it refused."""
    assert json_value("v", nested(3), max_depth=3) == nested(3)
    with pytest.raises(InvalidInput):
        json_value("v", nested(4), max_depth=3)
