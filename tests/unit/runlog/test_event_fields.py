"""What the run log accepts, field by field: integral floats for integer fields (JavaScript sends
`3.0` for 3), null where a field is optional, any mapping as an event, a terminal event only last,
and refusals that name the field."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from ledger.errors import InvalidInput
from ledger.runlog.events import parse_event, parse_events, parse_terminal_state


def refusal(call: object, *args: object) -> str:
    assert callable(call)
    with pytest.raises(InvalidInput) as caught:
        call(*args)
    return str(caught.value)


def test_integer_fields_take_integral_floats_as_integers() -> None:
    progress = parse_event({"type": "progress", "status": "running", "updated_at": 5.0})
    assert progress.payload["updated_at"] == 5 and type(progress.payload["updated_at"]) is int
    terminal = parse_terminal_state({"status": "completed", "total_rows": 3.0, "duration_ms": 4.0})
    assert (terminal.total_rows, terminal.duration_ms) == (3, 4)
    assert type(terminal.total_rows) is int and type(terminal.duration_ms) is int
    gap = parse_event({"type": "log.gap", "missing": 2.0})
    assert gap.payload["missing"] == 2
    assert refusal(parse_event, {"type": "log.gap", "missing": 2.5}).startswith("event.missing: ")
    assert refusal(parse_event, {"type": "log.gap", "missing": 0}).startswith("event.missing: ")


def test_a_progress_events_update_time_may_be_null() -> None:
    progress = parse_event({"type": "progress", "status": "running", "updated_at": None})
    assert progress.payload["updated_at"] is None


def test_any_mapping_is_an_event() -> None:
    event = parse_event(MappingProxyType({"type": "log", "line": "x"}))
    assert (event.type, event.payload) == ("log", {"line": "x"})
    assert refusal(parse_event, ["type", "log"]) == "event: must be an object"


def test_a_terminal_event_anywhere_but_last_refuses_the_batch_naming_it() -> None:
    log = {"type": "log", "line": "x"}
    end = {"type": "terminal", "status": "completed"}
    assert [e.type for e in parse_events([log, log, end])] == ["log", "log", "terminal"]
    for batch, index in (([end, log], 0), ([log, end, log], 1), ([log, log, end, log], 2)):
        assert refusal(parse_events, batch) == (
            f"events[{index}]: a terminal event must be the last of its batch"
        )


def test_refusals_name_the_field_and_what_it_should_hold() -> None:
    assert refusal(parse_events, "log") == "events: must be a list of events, got str"
    assert refusal(parse_event, {"type": "log.gap", "missing": 1, 7: "x"}) == (
        "event: field names must be strings"
    )


def test_the_notify_payload_is_the_compact_text_the_sql_function_writes() -> None:
    """`ledger.append_events_v3` builds the same text in SQL (`'{"run_id":' || ... || ',"seq":' ...`):
    one spelling of the payload, whichever side sends it."""
    from ledger.runlog.events import notify_payload, parse_notify_payload

    assert notify_payload("r1", 5) == '{"run_id":"r1","seq":5}'
    assert parse_notify_payload(notify_payload("r1", 5)) == ("r1", 5)


def test_the_refusals_a_caller_reads_say_what_is_wrong_word_for_word() -> None:
    """The 422's detail names the field and says the problem: an unknown field of an event, a log
    event without its line, a terminal state whose status is not a terminal one."""
    assert refusal(parse_event, {"type": "log", "line": "x", "colour": "red"}) == (
        "event.colour: is not a field of a 'log' event"
    )
    assert refusal(parse_event, {"type": "log"}) == "event.line: is required"
    assert refusal(parse_terminal_state, {"status": "running"}) == (
        "terminal.status: must be one of ['completed', 'failed', 'cancelled']"
    )
