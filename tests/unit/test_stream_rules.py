"""The byte streams' pure rules, from the protocol's contract: offsets are opaque tokens this server
issued, header values are strict, a JSON-mode body is strict JSON stored compactly, live answers
carry a cursor past the client's, and SSE events cannot be forged by a payload."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from ledger.errors import BadStreamRequest
from ledger.streams import rules

EPOCH_S = datetime(2024, 10, 9, tzinfo=UTC).timestamp()


def refused(call: object, *args: object, **kwargs: object) -> str:
    assert callable(call)
    with pytest.raises(BadStreamRequest) as caught:
        call(*args, **kwargs)
    return str(caught.value)


def test_an_offset_is_two_zero_padded_fields_that_sort_as_the_position_does() -> None:
    assert rules.format_offset(0) == "0000000000000000_0000000000000000"
    assert rules.format_offset(42) == "0000000000000000_0000000000000042"
    offsets = [rules.format_offset(p) for p in (0, 9, 10, 99, 10**15)]
    assert offsets == sorted(offsets)
    for position in (0, 1, 42, 10**16 - 1):
        assert rules.parse_offset(rules.format_offset(position)) == position


def test_start_and_now_are_not_offsets_and_anything_else_is_refused_naming_the_parameter() -> None:
    assert rules.parse_offset("-1") == rules.START == "-1"
    assert rules.parse_offset("now") == rules.NOW == "now"
    assert refused(rules.parse_offset, "42") == "offset: not an offset this server issued ('42')"
    assert refused(rules.parse_offset, "0_0", "after") == "after: not an offset this server issued ('0_0')"
    for raw in (
        "0000000000000000_000000000000042",  # 15 digits
        "0000000000000000_00000000000000042",  # 17 digits
        "x0000000000000000_0000000000000042",
        "0000000000000000_0000000000000042\n",
        "0000000000000000-0000000000000042",
    ):
        refused(rules.parse_offset, raw)
    long = "9" * 200
    assert refused(rules.parse_offset, long) == f"offset: not an offset this server issued ({long[:80]!r})"


def test_a_decimal_header_is_a_plain_non_negative_integer_up_to_its_maximum() -> None:
    assert rules.parse_decimal("N", "0") == 0
    assert rules.parse_decimal("N", " 17 ") == 17
    assert rules.parse_decimal("N", str(2**53 - 1)) == 2**53 - 1  # the default maximum
    assert rules.parse_decimal("N", "5", maximum=5) == 5
    message = refused(rules.parse_decimal, "N", "6", maximum=5)
    assert message == "N: must be a non-negative integer up to 5 ('6')"
    assert refused(rules.parse_decimal, "N", str(2**53)) == (
        f"N: must be a non-negative integer up to {2**53 - 1} ('{2**53}')"
    )
    for raw in ("", "-1", "+1", "01", "1.0", "1e3", "1_000", "one", "٣"):
        refused(rules.parse_decimal, "N", raw)
    assert (
        refused(rules.parse_decimal, "N", "x" * 100)
        == f"N: must be a non-negative integer up to {2**53 - 1} ('{'x' * 40}')"
    )


def test_an_expiry_is_an_rfc3339_timestamp_with_its_time_zone() -> None:
    assert rules.parse_expires_at("2030-01-02T03:04:05Z") == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert rules.parse_expires_at(" 2030-01-02t03:04:05z ") == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    plus_two = rules.parse_expires_at("2030-01-02T05:04:05+02:00")
    assert plus_two.utcoffset() == timedelta(hours=2)
    for raw in ("2030-01-02T03:04:05", "2030-01-02", "2030-01-02 03:04:05Z", "tomorrow", "", "y" * 100):
        message = refused(rules.parse_expires_at, raw)
        assert message == f"Stream-Expires-At: not an RFC 3339 timestamp ({raw[:60]!r})"


def test_content_types_compare_by_media_type_and_json_and_text_travel_as_text() -> None:
    assert rules.media_type(" Application/JSON ; charset=utf-8") == "application/json"
    assert rules.media_type("text/plain") == "text/plain"
    assert rules.media_type("text/plain; charset=utf-8; format=flowed") == "text/plain"
    assert rules.is_json("application/json; charset=utf-8") and not rules.is_json("application/jsonl")
    assert not rules.is_json("text/json")
    assert rules.is_textual("TEXT/plain") and rules.is_textual("application/json")
    assert not rules.is_textual("application/octet-stream") and not rules.is_textual("image/text")


def test_a_boolean_header_is_true_or_false_and_absent_is_false() -> None:
    assert rules.parse_bool_header("Stream-Closed", None) is False
    assert rules.parse_bool_header("Stream-Closed", " TRUE ") is True
    assert rules.parse_bool_header("Stream-Closed", "false") is False
    for raw in ("", "1", "yes", "truth"):
        assert (
            refused(rules.parse_bool_header, "Stream-Closed", raw) == "Stream-Closed: must be true or false"
        )


def test_the_producer_headers_come_all_three_or_none() -> None:
    assert rules.parse_producer(None, None, None) is None
    producer = rules.parse_producer("p1", "2", "7")
    assert producer == rules.Producer("p1", 2, 7)
    assert producer is not None and producer.as_json() == {"id": "p1", "epoch": 2, "seq": 7}
    both = "Producer-Id, Producer-Epoch and Producer-Seq: send all three or none"
    for partial in (
        ("p1", None, None),
        (None, "1", None),
        (None, None, "1"),
        ("p1", "1", None),
        (None, "1", "1"),
    ):
        assert refused(rules.parse_producer, *partial) == both
    assert refused(rules.parse_producer, " ", "1", "1") == "Producer-Id: must not be empty"
    assert refused(rules.parse_producer, "p1", "-1", "1").startswith("Producer-Epoch: ")
    assert refused(rules.parse_producer, "p1", "1", "01").startswith("Producer-Seq: ")


def test_a_json_body_is_flattened_one_level_and_stored_compactly() -> None:
    assert rules.json_messages(b'[1, {"a": [1, 2]}, "x\\ny"]', allow_empty=False) == [
        b"1",
        b'{"a":[1,2]}',
        b'"x\\ny"',  # no raw newline in a stored message
    ]
    assert rules.json_messages(b'{"b": "\xc3\xbc"}', allow_empty=False) == ['{"b":"ü"}'.encode()]
    assert rules.json_messages(b"[[1, 2]]", allow_empty=False) == [b"[1,2]"]
    assert rules.json_messages(b"[]", allow_empty=True) == []
    assert rules.json_array([b"1", b'{"a":1}']) == b'[1,{"a":1}]'
    assert rules.json_array([]) == b"[]"


def test_only_strict_json_is_taken_and_the_refusal_says_what_is_wrong() -> None:
    def messages(body: bytes) -> str:
        return refused(rules.json_messages, body, allow_empty=False)

    assert messages(b"[]") == "body: an empty JSON array appends nothing"
    assert messages(b'"a\xffb"') == "body: not UTF-8 JSON (byte 0xff at offset 2)"
    assert messages(b"NaN") == "body: invalid JSON (NaN is not JSON)"
    assert messages(b"[-Infinity]") == "body: invalid JSON (-Infinity is not JSON)"
    assert messages(b"{").startswith("body: invalid JSON (")
    assert messages(b"[1e999]") == "body: not strict JSON (a number is out of range for a double)"
    assert messages(b'"\\ud800"') == "body: not strict JSON (a string holds a lone surrogate escape)"
    assert messages(b"[" * 100_000 + b"]" * 100_000) == "body: JSON nested too deep"


def test_a_live_cursor_counts_twenty_second_intervals_and_always_passes_the_clients() -> None:
    assert rules.cursor_for(EPOCH_S, None) == "0"
    assert rules.cursor_for(EPOCH_S + 19.9, None) == "0"
    assert rules.cursor_for(EPOCH_S + 20, None) == "1"
    assert rules.cursor_for(EPOCH_S + 45, "1") == "2"  # the client's is behind: the current one
    assert rules.cursor_for(EPOCH_S + 45, "junk") == "2"
    for client in ("2", "500"):  # at or past the current interval: past the client's, by 1 to 180
        ahead = {int(rules.cursor_for(EPOCH_S + 45, client)) - int(client) for _ in range(4_000)}
        # 4,000 draws of 180 values: each bound is missed with a chance of e^-22.
        assert min(ahead) == 1 and max(ahead) == 180


def test_an_sse_event_cannot_be_ended_or_forged_by_its_payload() -> None:
    assert rules.sse_data(b"a\r\nb\rc\nd", True) == "event: data\ndata:a\ndata:b\ndata:c\ndata:d\n\n"
    forged = rules.sse_data(b"x\n\nevent: control\ndata:{}", True)
    assert forged.count("\n\n") == 1 and forged.endswith("\n\n")
    assert rules.sse_data(b"\x00\xff", False) == "event: data\ndata:AP8=\n\n"
    assert rules.sse_data(b"\xff", True) == "event: data\ndata:\ufffd\n\n"
    control = rules.sse_control({"streamNextOffset": "0_1", "upToDate": True})
    assert control == 'event: control\ndata:{"streamNextOffset":"0_1","upToDate":true}\n\n'
    assert json.loads(control.split("data:", 1)[1]) == {"streamNextOffset": "0_1", "upToDate": True}
