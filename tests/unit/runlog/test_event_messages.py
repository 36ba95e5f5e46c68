"""The run log's refusals a caller reads word for word: the field, and what is wrong with it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ledger.errors import InvalidInput
from ledger.runlog.events import EVENT_TYPES, check_limit, clamp_timeout_ms, parse_event, parse_events


def _refusal(check: Callable[..., object], *args: object) -> tuple[str, str]:
    with pytest.raises(InvalidInput) as refused:
        check(*args)
    return refused.value.field, refused.value.problem


@pytest.mark.parametrize("limit", [0, 10_001, "5", 2.0, None])
def test_a_page_size_out_of_range_is_refused_naming_the_range(limit: object) -> None:
    assert _refusal(check_limit, limit) == ("limit", "must be an integer from 1 to 10000")


@pytest.mark.parametrize("timeout_ms", ["100", 1.5, None, True])
def test_a_wait_that_is_not_an_integer_is_refused(timeout_ms: object) -> None:
    assert _refusal(clamp_timeout_ms, timeout_ms) == ("timeout_ms", "must be an integer")


@pytest.mark.parametrize("event", [{}, {"type": 5}, {"type": None}])
def test_an_event_without_a_string_type_is_refused_at_its_type(event: object) -> None:
    assert _refusal(parse_event, event, "events[3]") == ("events[3].type", "is required and must be a string")


def test_an_event_of_an_unknown_type_is_refused_naming_the_types_there_are() -> None:
    assert _refusal(parse_event, {"type": "steps.progress"}, "events[0]") == (
        "events[0].type",
        f"unknown event type 'steps.progress' (expected one of {list(EVENT_TYPES)})",
    )


@pytest.mark.parametrize(("key", "refused_at"), [("seq", "seq"), ("ts", "ts"), ("run_id", "run_id")])
def test_a_key_the_ledger_assigns_is_refused_at_that_key(key: str, refused_at: str) -> None:
    event = {"type": "log", "line": "x", key: 1}
    assert _refusal(parse_event, event, "events[1]") == (
        f"events[1].{refused_at}",
        "is assigned by the ledger and may not be sent",
    )


def test_an_empty_batch_is_refused_saying_so() -> None:
    assert _refusal(parse_events, [], "events") == ("events", "must not be empty")


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_a_status_event_naming_a_terminal_status_is_refused_pointing_at_the_terminal_state(
    status: str,
) -> None:
    assert _refusal(parse_event, {"type": "status", "status": status}, "events[0]") == (
        "events[0].status",
        f"{status!r} is terminal: set the run's terminal state instead",
    )
