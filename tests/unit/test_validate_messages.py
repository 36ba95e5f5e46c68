"""Refusals a caller reads word for word: the field and what is wrong with it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ledger import validate
from ledger.errors import InvalidInput


@pytest.mark.parametrize("run_id", [".", ".."])
def test_a_new_run_named_as_a_url_dot_segment_is_refused_saying_why(run_id: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        validate.new_run_id("run_id", run_id)
    assert (refused.value.field, refused.value.problem) == (
        "run_id",
        "must not be '.' or '..' (a URL path cannot address it)",
    )


@pytest.mark.parametrize("state", ["done", "RUNNING", 1])
def test_a_step_state_outside_the_list_is_refused_naming_the_states(state: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        validate.node_field("live_node_progress.n.state", "state", state)
    assert str(refused.value) == (
        "live_node_progress.n.state: must be one of pending, running, completed, failed, cancelled, "
        f"skipped, got {state!r}"
    )


@pytest.mark.parametrize("state", validate.STEP_STATES)
def test_every_step_state_of_the_list_is_taken(state: str) -> None:
    assert validate.node_field("live_node_progress.n.state", "state", state) == state


def test_a_step_reason_that_is_not_text_is_refused_naming_its_field() -> None:
    with pytest.raises(InvalidInput) as refused:
        validate.node_field("live_node_progress.n.reason", "reason", 5)
    assert refused.value.field == "live_node_progress.n.reason"


def _refusal(check: Callable[..., object], *args: object, **kwargs: object) -> tuple[str, str]:
    with pytest.raises(InvalidInput) as refused:
        check(*args, **kwargs)
    return refused.value.field, refused.value.problem


CURSOR_PROBLEM = "must be a sequence number (ASCII digits), -1 or 'now'"


@pytest.mark.parametrize("value", ["1_0", "+1", "x", "1" * 20, -2, 2**63, 1.5, True])
def test_a_cursor_that_is_not_one_is_refused_saying_what_a_cursor_is(value: object) -> None:
    assert _refusal(validate.cursor, "after", value) == ("after", CURSOR_PROBLEM)


@pytest.mark.parametrize(
    ("optional", "problem"),
    [
        (False, "must be epoch milliseconds (a non-negative number)"),
        (True, "must be epoch milliseconds (a non-negative number) or null"),
    ],
)
@pytest.mark.parametrize("value", [-1, "1", float("nan"), True])
def test_epoch_milliseconds_refused_say_whether_null_was_allowed(
    value: object, optional: bool, problem: str
) -> None:
    assert _refusal(validate.epoch_ms, "ts", value, optional=optional) == ("ts", problem)


def test_free_text_is_required_unless_said_optional() -> None:
    assert _refusal(validate.free_text, "line", None) == ("line", "must be a string, got null")
    assert validate.free_text("line", None, optional=True) is None


@pytest.mark.parametrize(
    ("check", "optional", "problem"),
    [
        (validate.free_text, False, "must be a string, got int"),
        (validate.free_text, True, "must be a string or null, got int"),
        (validate.text, False, "must be a string, got int"),
        (validate.text, True, "must be a string or null, got int"),
        (validate.integer, False, "must be an integer, got str"),
        (validate.integer, True, "must be an integer or null, got str"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_naming_the_type_asked_and_the_type_sent(
    check: Callable[..., object], optional: bool, problem: str
) -> None:
    value: object = "7" if check is validate.integer else 7
    assert _refusal(check, "f", value, optional=optional) == ("f", problem)


def test_text_with_a_nul_or_a_lone_surrogate_is_refused_saying_which() -> None:
    assert _refusal(validate.text, "name", "a\x00b") == ("name", "must not contain NUL characters")
    assert _refusal(validate.text, "name", "a\ud800b") == (
        "name",
        "must be valid Unicode (it holds a lone surrogate)",
    )


def test_a_json_value_holding_a_nul_is_refused_saying_so() -> None:
    assert _refusal(validate.json_value, "payload", {"k": ["a\x00"]}) == (
        "payload",
        "must not contain NUL characters",
    )


def test_a_run_id_with_a_control_character_is_refused_saying_so() -> None:
    assert _refusal(validate.run_id, "run_id", "run\x07") == ("run_id", "must not contain control characters")


@pytest.mark.parametrize(
    ("minimum", "value", "problem"), [(0, -0.5, "must not be negative"), (1.5, 1.0, "must be >= 1.5")]
)
def test_a_number_below_its_minimum_is_refused_naming_the_minimum(
    minimum: float, value: float, problem: str
) -> None:
    assert _refusal(validate.number, "ratio", value, minimum=minimum) == ("ratio", problem)


def test_an_upload_value_too_big_is_refused_naming_its_field_and_its_size() -> None:
    assert _refusal(validate.upload_value, "nodes.a.output", "x" * 20, max_bytes=10) == (
        "nodes.a.output",
        "takes 22 bytes, more than the 10 one value of an upload may",
    )
