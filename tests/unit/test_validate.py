"""The shared validation primitives: what each accepts, what it refuses, and the field it names."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import validate
from ledger.clock import from_ms, to_ms
from ledger.errors import InvalidInput
from ledger.validate import INT32_MAX, INT64_MAX, MAX_EPOCH_MS


def problem(check: Any, *args: Any, **kwargs: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        check(*args, **kwargs)
    return info.value


# -- text --------------------------------------------------------------------------------------------


def test_text_accepts_any_clean_string_as_is() -> None:
    for value in ("", " x ", "🙂", "עברית", "\u202e", "\\u0000 is a literal backslash"):
        assert validate.text("f", value) == value


@pytest.mark.parametrize(
    ("value", "kwargs", "needle"),
    [
        (5, {}, "must be a string, got int"),
        (None, {}, "must be a string, got null"),
        (True, {"optional": True}, "must be a string or null, got bool"),
        (b"bytes", {}, "got bytes"),
        ("a\x00b", {}, "NUL"),
        ("\ud800", {}, "lone surrogate"),
        ("x\udfffy", {}, "lone surrogate"),
        ("   ", {"non_empty": True}, "must not be empty"),
        ("", {"non_empty": True}, "must not be empty"),
        ("abcd", {"max_len": 3}, "at most 3 characters"),
    ],
)
def test_text_refuses_naming_the_field(value: object, kwargs: dict[str, Any], needle: str) -> None:
    error = problem(validate.text, "body.name", value, **kwargs)
    assert error.field == "body.name"
    assert needle in error.problem


def test_text_optional_and_limits() -> None:
    assert validate.text("f", None, optional=True) is None
    assert validate.text("f", "abc", max_len=3) == "abc"
    assert validate.text("f", " ", non_empty=False) == " "
    assert validate.required_text("f", "x", non_empty=True) == "x"


def test_string_list_names_the_bad_item() -> None:
    assert validate.string_list("logs", ["a", ""]) == ["a", ""]
    assert validate.string_list("logs", None, none_is_empty=True) == []
    assert problem(validate.string_list, "logs", None).field == "logs"
    assert problem(validate.string_list, "logs", "abc").field == "logs"
    assert problem(validate.string_list, "logs", ["a", "b", 3]).field == "logs[2]"
    assert problem(validate.string_list, "logs", ["a", "\x00"]).field == "logs[1]"


# -- integers and numbers ------------------------------------------------------------------------------


def test_integer_bounds_default_to_a_non_negative_bigint() -> None:
    assert validate.integer("n", 0) == 0
    assert validate.integer("n", INT64_MAX) == INT64_MAX
    assert "<= " in problem(validate.integer, "n", INT64_MAX + 1).problem
    assert problem(validate.integer, "n", -1).problem == "must be >= 0"
    assert problem(validate.integer, "n", 10**5000).field == "n"  # no str() of the huge value
    assert problem(validate.integer, "n", -(10**5000)).field == "n"


def test_integer_custom_bounds() -> None:
    assert validate.integer("n", INT32_MAX, maximum=INT32_MAX) == INT32_MAX
    assert problem(validate.integer, "n", INT32_MAX + 1, maximum=INT32_MAX).field == "n"
    assert validate.integer("n", -1, minimum=-1) == -1
    assert problem(validate.integer, "n", 0, minimum=1).problem == "must be >= 1"
    assert validate.integer("n", 10**30, maximum=None) == 10**30


@pytest.mark.parametrize("value", [True, False, 1.5, 3.0, "3", None, float("nan"), [1]])
def test_integer_refuses_non_ints_bool_included(value: object) -> None:
    error = problem(validate.integer, "count", value)
    assert error.field == "count"
    assert error.problem.startswith("must be an integer")


def test_integer_integral_floats_only_when_asked() -> None:
    assert validate.integer("n", 3.0, integral_float=True) == 3
    assert isinstance(validate.integer("n", 3.0, integral_float=True), int)
    assert problem(validate.integer, "n", 3.5, integral_float=True).field == "n"
    assert problem(validate.integer, "n", float("inf"), integral_float=True).field == "n"
    assert problem(validate.integer, "n", 1e30, integral_float=True).field == "n"  # integral, too big


def test_integer_optional() -> None:
    assert validate.integer("n", None, optional=True) is None
    assert "or null" in problem(validate.integer, "n", "x", optional=True).problem


def test_number() -> None:
    assert validate.number("x", 1.5) == 1.5
    assert validate.number("x", -(10**30)) == -(10**30)
    assert validate.number("x", 0, minimum=0) == 0
    assert problem(validate.number, "x", True).problem == "must be a number, got bool"
    assert problem(validate.number, "x", float("nan")).problem == "must be finite"
    assert problem(validate.number, "x", float("-inf")).problem == "must be finite"
    assert problem(validate.number, "x", -0.5, minimum=0).problem == "must not be negative"


def test_is_number_and_is_int_leave_bool_out() -> None:
    assert validate.is_number(1) and validate.is_number(1.5) and validate.is_number(float("nan"))
    assert not validate.is_number(True) and not validate.is_number("1") and not validate.is_number(None)
    assert validate.is_int(3) and not validate.is_int(False) and not validate.is_int(3.0)


def test_invocation_seq_is_the_ascii_number_after_the_last_colon() -> None:
    assert validate.invocation_seq("node:2:14") == 14
    assert validate.invocation_seq("7") == 7
    for junk in ("node", "node:", "node:x", "node:²", "node:٣", "node:-1", "node: 1", None, 14):
        assert validate.invocation_seq(junk) is None, junk
    # Past a bigint's digits the number is not converted (int() of a long enough string raises),
    # but stays a number no column holds, so the ledger's int4 check still refuses it.
    assert validate.invocation_seq("node:" + "9" * 5000) == INT64_MAX + 1
    assert validate.invocation_seq("node:" + "9" * 19) == 10**19 - 1


# -- epoch milliseconds --------------------------------------------------------------------------------


def test_epoch_ms_range_ends_where_datetime_does() -> None:
    assert validate.epoch_ms("t", 0) == 0
    assert validate.epoch_ms("t", MAX_EPOCH_MS) == MAX_EPOCH_MS
    assert from_ms(MAX_EPOCH_MS).year == 9999
    # The bound is a number in the dependency-free module: it is the home's conversion of the last
    # millisecond a datetime holds, and one past it is no time at all.
    assert to_ms(datetime.max.replace(tzinfo=UTC)) == MAX_EPOCH_MS
    with pytest.raises(OverflowError):
        from_ms(MAX_EPOCH_MS + 1)
    assert validate.epoch_ms("t", 1.9) == 1  # truncated, as the callers always did
    for bad in (MAX_EPOCH_MS + 1, 10**30, 1e308):
        error = problem(validate.epoch_ms, "obs.started_at", bad)
        assert (error.field, error.problem.startswith("is out of range")) == ("obs.started_at", True)
    for bad in (-1, float("nan"), float("inf"), True, "1", None):
        assert problem(validate.epoch_ms, "t", bad).field == "t"
    assert validate.epoch_ms("t", None, optional=True) is None


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True)))
def test_whatever_epoch_ms_accepts_from_ms_converts(value: int | float) -> None:
    try:
        ms = validate.epoch_ms("t", value)
    except InvalidInput:
        return
    assert ms is not None
    from_ms(ms)  # never OverflowError


# -- JSON ----------------------------------------------------------------------------------------------


def test_json_value_accepts_storable_values() -> None:
    for value in (None, 1, "x", [1, {"a": None}], {"k": "\\u0000 literal"}, {"deep": [[[[{}]]]]}):
        assert validate.json_value("v", value) == value
        json.dumps(value, allow_nan=False)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (float("nan"), "not valid JSON"),
        ({"x": [float("inf")]}, "not valid JSON"),
        ({"x": object()}, "not valid JSON"),
        ({"x": "\ud800"}, "not valid JSON"),
        ({"\udfff": 1}, "not valid JSON"),
        ({"x": ["a\x00"]}, "NUL"),
        ({"a\x00": 1}, "NUL"),
        ("\x00", "NUL"),
    ],
)
def test_json_value_refuses_what_jsonb_refuses(value: object, needle: str) -> None:
    error = problem(validate.json_value, "result", value)
    assert error.field == "result"
    assert needle in error.problem


def test_json_object_wants_a_dict() -> None:
    assert validate.json_object("o", {"a": 1}) == {"a": 1}
    assert problem(validate.json_object, "o", [1]).problem == "must be an object, got list"
    assert problem(validate.json_object, "o", {"a": float("nan")}).field == "o"
