"""Event types, validation and shapes (pure: no database)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import validate
from ledger.errors import InvalidInput
from ledger.runlog.events import (
    EVENT_TYPES,
    MAX_RUN_ID_LENGTH,
    RunId,
    TerminalState,
    check_limit,
    clamp_timeout_ms,
    cursor_expired,
    event_to_wire,
    notify_payload,
    parse_after,
    parse_event,
    parse_events,
    parse_notify_payload,
    parse_terminal_state,
    validate_new_run_id,
    validate_run_id,
)


def field_of(event: Any) -> str:
    with pytest.raises(InvalidInput) as info:
        parse_event(event, "e")
    return info.value.field


def test_coordinator_types_keep_their_fields() -> None:
    assert parse_event({"type": "log", "line": ""}).payload == {"line": ""}
    assert parse_event({"type": "status", "status": "queued", "logs": ["a"]}).payload == {
        "status": "queued",
        "logs": ["a"],
    }
    progress = parse_event(
        {
            "type": "progress",
            "status": "running",
            "active_node_id": None,
            "active_artifact_table_namespace": "ns",
            "updated_at": 12,
        }
    )
    assert progress.payload == {
        "status": "running",
        "active_node_id": None,
        "active_artifact_table_namespace": "ns",
        "updated_at": 12,
    }
    assert progress.run_status == "running"
    assert parse_event({"type": "log", "line": "x"}).run_status is None
    terminal = parse_event({"type": "terminal", "status": "completed", "total_rows": 3})
    assert terminal.payload == {
        "status": "completed",
        "result": None,
        "error": None,
        "total_rows": 3,
        "duration_ms": None,
        "play_name": None,
    }


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ("log", "e"),
        ({"line": "x"}, "e.type"),
        ({"type": 3}, "e.type"),
        ({"type": "logs", "line": "x"}, "e.type"),
        ({"type": "log"}, "e.line"),
        ({"type": "log", "line": None}, "e.line"),
        ({"type": "log", "line": "x", "level": "info"}, "e.level"),
        ({"type": "log", "line": "x", "ts": 5}, "e.ts"),
        ({"type": "log.gap", "missing": 2, "seq": 1}, "e.seq"),
        ({"type": "status"}, "e.status"),
        ({"type": "status", "status": " "}, "e.status"),
        ({"type": "status", "status": "failed"}, "e.status"),
        ({"type": "status", "status": "ok", "logs": "a"}, "e.logs"),
        ({"type": "status", "status": "ok", "logs": ["a", 1]}, "e.logs[1]"),
        ({"type": "progress", "status": "ok", "updated_at": -1}, "e.updated_at"),
        ({"type": "progress", "status": "ok", "updated_at": True}, "e.updated_at"),
        ({"type": "progress", "status": "ok", "active_node_id": 4}, "e.active_node_id"),
        ({"type": "terminal", "status": "done"}, "e.status"),
        ({"type": "terminal", "status": "failed", "error": ["x"]}, "e.error"),
        ({"type": "terminal", "status": "failed", "reason": "x"}, "e.reason"),
        ({"type": "log.gap"}, "e.missing"),
        ({"type": "log.gap", "missing": 0}, "e.missing"),
        ({"type": "log.gap", "missing": True}, "e.missing"),
        ({"type": "log.gap", "missing": 1.5}, "e.missing"),
        ({"type": "step.started", "x": float("inf")}, "e"),
        ({"type": "step.started", "x": object()}, "e"),
        ({"type": "dataset.lifecycle", "x": "nul\x00"}, "e"),
        ({"type": "dataset.lifecycle", "x": {"deep": "\ud800"}}, "e"),
        ({"type": "log", "line": b"bytes"}, "e.line"),
        ({"type": "terminal", "status": "failed", "play_name": "p\x00"}, "e.play_name"),
        ({"type": "progress", "status": "ok\x00"}, "e.status"),
        ({"type": "progress", "status": "ok", "active_node_id": "n\ud800"}, "e.active_node_id"),
    ],
)
def test_bad_events_name_the_field(event: Any, field: str) -> None:
    assert field_of(event) == field


def test_free_text_is_repaired_not_refused() -> None:
    # A tool may print anything: NUL and lone surrogates become U+FFFD, the rest is kept.
    assert parse_event({"type": "log", "line": "a\x00b \udc00 ok"}).payload == {"line": "a\ufffdb \ufffd ok"}
    status = parse_event({"type": "status", "status": "running", "logs": ["\x00", "fine", "\ud800x"]})
    assert status.payload["logs"] == ["\ufffd", "fine", "\ufffdx"]
    progress = parse_event({"type": "progress", "status": "running", "logs": ["a\x00"]})
    assert progress.payload["logs"] == ["a\ufffd"]
    terminal = parse_event({"type": "terminal", "status": "failed", "error": "boom\x00\udfff"})
    assert terminal.payload["error"] == "boom\ufffd\ufffd"
    assert parse_terminal_state({"status": "failed", "error": "\x00"}, field="").error == "\ufffd"


def test_ingestion_types_are_free_form_objects() -> None:
    raw = {"type": "activity.observed", "activityId": "a", "observedAt": 5, "nested": {"k": [1, None]}}
    assert parse_event(raw).payload == {"activityId": "a", "observedAt": 5, "nested": {"k": [1, None]}}
    assert parse_event({"type": "step.completed"}).payload == {}
    assert parse_event({"type": "log.gap", "missing": 7}).payload == {"missing": 7}


def test_batches_are_validated_whole_and_terminal_comes_last() -> None:
    with pytest.raises(InvalidInput) as info:
        parse_events([{"type": "log", "line": "a"}, {"type": "log", "line": "b"}, {"type": "log"}])
    assert info.value.field == "events[2].line"
    with pytest.raises(InvalidInput) as info:
        parse_events([{"type": "terminal", "status": "failed"}, {"type": "log", "line": "x"}])
    assert info.value.field == "events[0]"
    for bad in ([], "log", {"type": "log"}, None):
        with pytest.raises(InvalidInput) as info:
            parse_events(bad)
        assert info.value.field == "events"
    ok = parse_events([{"type": "log", "line": "x"}, {"type": "terminal", "status": "cancelled"}])
    assert [e.type for e in ok] == ["log", "terminal"]


def test_terminal_state_validation_and_repeats() -> None:
    state = parse_terminal_state({"status": "failed", "error": "boom", "duration_ms": 9}, field="")
    assert state == TerminalState(status="failed", error="boom", duration_ms=9)
    stored = {**state.payload(), "completed_at": 1}
    assert TerminalState(status="failed").agrees_with(stored)
    assert TerminalState(status="failed", error="boom").agrees_with(stored)
    assert not TerminalState(status="failed", error="other").agrees_with(stored)
    assert not TerminalState(status="failed", duration_ms=10).agrees_with(stored)
    assert not TerminalState(status="completed").agrees_with(stored)
    for body, field in [
        ({}, "status"),
        ({"status": "ok"}, "status"),
        ({"status": "completed", "total_rows": "3"}, "total_rows"),
        ({"status": "completed", "result": {1, 2}}, "result"),
        ({"status": "completed", "play_name": 1}, "play_name"),
    ]:
        with pytest.raises(InvalidInput) as info:
            parse_terminal_state(body, field="")
        assert info.value.field == field


def test_read_parameters() -> None:
    assert parse_after(-1) == -1
    assert parse_after("-1") == -1
    assert parse_after("12") == 12
    assert parse_after(12) == 12
    assert parse_after("now") is None
    # What int() would take but a cursor copied from an answer never looks like.
    for bad in (-2, "-2", "later", 1.5, True, None, " 12 ", "1_0", "+1", "\u0661\u0662", "", " now"):
        with pytest.raises(InvalidInput) as info:
            parse_after(bad)
        assert info.value.field == "after"
    assert clamp_timeout_ms(-5) == 0
    assert clamp_timeout_ms(45_000) == 30_000
    assert clamp_timeout_ms(1500) == 1500
    with pytest.raises(InvalidInput):
        clamp_timeout_ms("10")
    assert check_limit(1) == 1 and check_limit(10_000) == 10_000
    for bad_limit in (0, 10_001, "5", False):
        with pytest.raises(InvalidInput):
            check_limit(bad_limit)


def test_cursor_expiry() -> None:
    # Events 5.. retained: a cursor at 4 reads from 5 (fine), 3 would skip event 4 (refused).
    assert not cursor_expired(4, 5)
    assert cursor_expired(3, 5)
    assert cursor_expired(0, 5)
    assert not cursor_expired(-1, 5)  # the "from the oldest retained" sentinel
    assert not cursor_expired(0, 1)
    assert not cursor_expired(100, 5)


def test_run_ids() -> None:
    assert validate_run_id("run-1") == "run-1"
    assert validate_run_id("🙂 run ü") == "🙂 run ü"
    assert validate_run_id("x" * MAX_RUN_ID_LENGTH) == "x" * MAX_RUN_ID_LENGTH
    bad_ids = (
        "",
        "  ",
        5,
        None,
        "a\x00",
        "x" * (MAX_RUN_ID_LENGTH + 1),
        "a/b",
        "tab\there",
        "\x7f",
        "r\ud800",
    )
    for bad in bad_ids:
        with pytest.raises(InvalidInput) as info:
            validate_run_id(bad)
        assert info.value.field == "run_id"


def test_a_checked_run_id_is_typed_and_never_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    checked = validate_run_id("run-1")
    assert type(checked) is RunId and checked == "run-1"
    with pytest.raises(InvalidInput) as info:
        validate_run_id(" ", "run")
    assert info.value.field == "run"
    checks: list[object] = []
    real = validate.run_id

    def counted(field: str, value: object) -> str:
        checks.append(value)
        return real(field, value)

    monkeypatch.setattr(validate, "run_id", counted)
    assert validate_run_id(checked) is checked
    assert validate_new_run_id(checked) is checked
    assert checks == []
    # A plain string (a library caller's) is checked, once.
    assert type(validate_run_id("run-2")) is RunId
    assert checks == ["run-2"]


def test_a_new_run_id_is_not_a_dot_segment_even_when_checked() -> None:
    assert type(validate_new_run_id("r")) is RunId
    assert validate_new_run_id("...") == "..."
    for dots in (".", ".."):
        assert validate_run_id(dots) == dots  # a stored run so named stays readable
        for value in (dots, validate_run_id(dots)):
            with pytest.raises(InvalidInput) as info:
                validate_new_run_id(value, "id")
            assert info.value.field == "id"
    with pytest.raises(InvalidInput) as info:
        validate_new_run_id("a/b")
    assert info.value.field == "run_id"


def test_wire_shape_is_flat() -> None:
    wire = event_to_wire(3, "log", 1000, {"line": "hi"})
    assert wire == {"seq": 3, "type": "log", "ts": 1000, "line": "hi"}


@settings(max_examples=50, deadline=None)
@given(run_id=st.text(min_size=1, max_size=MAX_RUN_ID_LENGTH), seq=st.integers(min_value=1, max_value=2**62))
def test_notify_payload_round_trips_and_fits(run_id: str, seq: int) -> None:
    payload = notify_payload(run_id, seq)
    assert parse_notify_payload(payload) == (run_id, seq)
    assert len(payload.encode()) < 8000  # Postgres' NOTIFY payload limit


@pytest.mark.parametrize("junk", ["", "r1", "[1]", '{"run_id": 1, "seq": 2}', '{"run_id": "r", "seq": true}'])
def test_foreign_notify_payloads_are_ignored(junk: str) -> None:
    assert parse_notify_payload(junk) is None


# No NUL and no lone surrogate: text the ledger stores as it is (it repairs both to U+FFFD).
NO_NUL_TEXT = st.text(alphabet=st.characters(min_codepoint=1, exclude_categories=("Cs",)))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.builds(lambda line: {"type": "log", "line": line}, NO_NUL_TEXT),
            st.builds(lambda n: {"type": "log.gap", "missing": n}, st.integers(min_value=1)),
            st.builds(
                lambda s: {"type": "status", "status": s},
                st.sampled_from(["queued", "running", "mapping"]),
            ),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_valid_batches_keep_order_and_content(events: list[dict[str, Any]]) -> None:
    parsed = parse_events(events)
    assert [e.type for e in parsed] == [e["type"] for e in events]
    assert [{"type": e.type, **e.payload} for e in parsed] == events
    assert all(e.type in EVENT_TYPES for e in parsed)
