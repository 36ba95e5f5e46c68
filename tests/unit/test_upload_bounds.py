"""The upload bounds both sides share (`ledger.validate`): truncating a line, the bounds of a body
limit, the size of a value, and the depth of a value the ledger stores one level deeper."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ledger import validate
from ledger.ingest.rules import IngestState, plan_upload
from ledger.ingest.upload import parse_upload
from ledger.runlog.events import parse_events
from ledger.validate import (
    MAX_BODY_BYTES,
    MAX_LOG_LINE_BYTES,
    MAX_WRAPPED_VALUE_DEPTH,
    InvalidInput,
    UploadBounds,
    encode_body,
    truncate_line,
)

MARKER = re.compile(r"\[…(\d+) bytes cut…\]")


def cut_of(line: str, original: str) -> int:
    """The marker's N, checked against what is really missing."""
    [found] = MARKER.findall(line)
    marker = MARKER.search(line)
    assert marker is not None
    assert len(line.encode()) - len(marker[0].encode()) + int(found) == len(original.encode())
    return int(found)


@pytest.mark.parametrize("size", [MAX_LOG_LINE_BYTES - 1, MAX_LOG_LINE_BYTES])
def test_a_line_within_the_bound_is_kept_whole(size: int) -> None:
    line = "a" * size
    assert truncate_line(line) is line


@pytest.mark.parametrize("extra", [1, 2, 10_000, 1_200_000])
def test_a_line_past_the_bound_keeps_its_ends_and_says_how_many_bytes_were_cut(extra: int) -> None:
    line = "B" + "x" * (MAX_LOG_LINE_BYTES + extra - 2) + "E"
    kept = truncate_line(line)
    assert len(kept.encode()) <= MAX_LOG_LINE_BYTES
    assert kept.startswith("Bxx") and kept.endswith("xxE")
    assert cut_of(kept, line) >= extra
    # Both ends of the line survive in about equal parts.
    head, tail = MARKER.split(kept)[0], MARKER.split(kept)[-1]
    assert abs(len(head) - len(tail)) <= 1


@pytest.mark.parametrize("character", ["é", "€", "😀"])
def test_a_multibyte_line_is_cut_on_character_boundaries_counting_utf8_bytes(character: str) -> None:
    width = len(character.encode())
    # Characters fit the bound (in UTF-8 bytes) at limit - 1, limit and one past it.
    for count in (
        MAX_LOG_LINE_BYTES // width - 1,
        MAX_LOG_LINE_BYTES // width,
        MAX_LOG_LINE_BYTES // width + 1,
    ):
        line = character * count
        kept = truncate_line(line)
        if len(line.encode()) <= MAX_LOG_LINE_BYTES:
            assert kept == line
            continue
        assert len(kept.encode()) <= MAX_LOG_LINE_BYTES
        head, _, tail = MARKER.split(kept)
        assert set(head) == set(tail) == {character}  # no character split in two
        assert cut_of(kept, line) % width == 0


def test_a_tiny_bound_still_yields_a_marker_within_it() -> None:
    kept = truncate_line("y" * 1_000, 64)
    assert len(kept.encode()) <= 64 and cut_of(kept, "y" * 1_000) > 0


def test_a_bound_with_no_room_beside_the_marker_keeps_none_of_the_line() -> None:
    kept = truncate_line("y" * 1_000, 10)
    assert MARKER.fullmatch(kept) and cut_of(kept, "y" * 1_000) == 1_000


def test_log_line_bounds_the_line_by_the_bytes_it_is_given() -> None:
    kept = validate.log_line("z" * 1_000, 100)
    assert len(kept.encode()) <= 100 and cut_of(kept, "z" * 1_000) > 0


def test_a_body_is_compact_json_in_utf8_with_non_ascii_unescaped() -> None:
    """The reporter measures an upload by these bytes and sends exactly them."""
    assert encode_body({"a": [1, "é€😀"], "b": None}) == '{"a":[1,"é€😀"],"b":null}'.encode()


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_a_body_with_a_number_json_cannot_hold_is_refused(number: float) -> None:
    with pytest.raises(ValueError):
        encode_body({"n": number})


def test_log_line_repairs_before_it_truncates() -> None:
    assert validate.log_line("bad \x00 byte") == "bad \ufffd byte"
    kept = validate.log_line("\x00" * (MAX_LOG_LINE_BYTES + 1))
    assert kept.startswith("\ufffd") and len(kept.encode()) <= MAX_LOG_LINE_BYTES


def test_the_default_bounds_are_those_of_the_default_body_limit() -> None:
    assert UploadBounds.for_body_limit(MAX_BODY_BYTES) == validate.DEFAULT_UPLOAD_BOUNDS


@pytest.mark.parametrize("limit", [4_096, 65_536, MAX_BODY_BYTES - 1, MAX_BODY_BYTES, MAX_BODY_BYTES + 1])
def test_the_bounds_of_a_smaller_limit_leave_a_line_and_a_value_room_in_one_body(limit: int) -> None:
    bounds = UploadBounds.for_body_limit(limit)
    assert bounds.max_body_bytes == limit
    # A line escapes to at most six bytes per byte; it and a value fit one body with room to spare.
    assert 6 * bounds.log_line_bytes + bounds.value_bytes < limit
    assert (
        bounds.log_line_bytes <= MAX_LOG_LINE_BYTES and bounds.value_bytes <= validate.MAX_UPLOAD_VALUE_BYTES
    )


MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("limit", "line", "tail", "value"),
    [
        # A line a sixteenth of the body, a value a quarter, the tail two bodies.
        (4_096, 256, 8_192, 1_024),
        (65_536, 4_096, 131_072, 16_384),
        (4_101, 256, 8_202, 1_025),  # shares in whole bytes, rounded down
        # No line bound below 64 bytes: room for the cut marker with a few bytes either side.
        (1_008, 64, 2_016, 252),
        (1_024, 64, 2_048, 256),
        (1_040, 65, 2_080, 260),
        # None above its default: the default limit's shares are the defaults themselves.
        (MIB - 16, 65_535, 2 * MIB - 32, 262_140),
        (MIB, 65_536, 2 * MIB, 262_144),
        (MIB + 16, 65_536, 2 * MIB, 262_144),
        (4 * MIB, 65_536, 2 * MIB, 262_144),
    ],
)
def test_the_bounds_of_a_body_limit_are_its_shares_within_the_defaults(
    limit: int, line: int, tail: int, value: int
) -> None:
    bounds = UploadBounds.for_body_limit(limit)
    assert (bounds.max_body_bytes, bounds.log_line_bytes, bounds.log_tail_bytes, bounds.value_bytes) == (
        limit,
        line,
        tail,
        value,
    )


@pytest.mark.parametrize("limit", [-5, 0, 1])
def test_a_body_limit_below_one_byte_is_read_as_one(limit: int) -> None:
    assert UploadBounds.for_body_limit(limit) == UploadBounds(
        max_body_bytes=1, log_line_bytes=64, log_tail_bytes=2, value_bytes=0
    )


@pytest.mark.parametrize(
    ("text", "size"), [("", 0), ("plain", 5), ("é", 2), ("€", 3), ("😀", 4), ("a€b😀", 9), ("\x7f\x80", 3)]
)
def test_utf8_length_counts_the_bytes_of_the_encoded_text(text: str, size: int) -> None:
    assert validate.utf8_length(text) == size == len(text.encode())


@pytest.mark.parametrize(("extra", "kept"), [(-1, True), (0, True), (1, False)])
def test_a_value_bigger_than_an_upload_may_carry_is_refused_at_the_bound(extra: int, kept: bool) -> None:
    bound = 1_000
    value = {"t": "x" * (bound - len(encode_body({"t": ""})) + extra)}
    assert len(encode_body(value)) == bound + extra
    if kept:
        assert validate.upload_value("v", value, bound) is value
    else:
        with pytest.raises(InvalidInput, match="more than the 1000"):
            validate.upload_value("v", value, bound)


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "depth", [MAX_WRAPPED_VALUE_DEPTH - 1, MAX_WRAPPED_VALUE_DEPTH, MAX_WRAPPED_VALUE_DEPTH + 1]
)
def test_what_the_reporter_keeps_at_the_depth_bound_the_ledger_stores(depth: int) -> None:
    """One rule on both sides: a lifecycle event or an observation the check accepts is accepted by
    the upload's parse and, wrapped in its event payload, by the event log."""
    event = {"phase": "ready", "deep": nested(depth - 1)}
    observation = {"activityId": "a", "observedAt": 1, "deep": nested(depth - 1)}
    assert validate.json_depth(event) == validate.json_depth(observation) == depth
    body = {
        "status": "running",
        "upload_seq": 1,
        "dataset_lifecycle_events": [event],
        "activity_observations": [observation],
    }
    if depth > MAX_WRAPPED_VALUE_DEPTH:
        with pytest.raises(InvalidInput, match=f"nests deeper than {MAX_WRAPPED_VALUE_DEPTH}"):
            validate.dataset_lifecycle_event("e", event)
        with pytest.raises(InvalidInput, match=f"nests deeper than {MAX_WRAPPED_VALUE_DEPTH}"):
            validate.activity_observation("o", observation)
        with pytest.raises(InvalidInput):
            parse_upload("r", body)
        return
    validate.dataset_lifecycle_event("e", event)
    validate.activity_observation("o", observation)
    plan = plan_upload("r", IngestState(), parse_upload("r", body))
    stored = parse_events(list(plan.events))
    assert [e.type for e in stored] == ["dataset.lifecycle", "activity.observed"]
