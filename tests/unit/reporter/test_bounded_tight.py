"""Splitting is exact about sizes at every limit: each part fits with the widest numbers the caller
may put in it, and a part is closed only when the next item would not have fitted (so an upload is
not cut into more requests than its size needs)."""

from __future__ import annotations

import itertools
from typing import Any

from ledger.validate import INT64_MAX, encode_body
from reporter.bounded import split_upload
from tests.unit.reporter.test_bounded import big_upload

# What the size accounting may leave unused in a closed part: one separator per field opened.
SLACK = 4
LIMITS = range(1_900, 12_000, 53)


def widest(part: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """`part` as the split measures every part: the widest numbers, the longer status, and the
    fields only the first or last part carries."""
    out = {**part, "upload_seq": INT64_MAX, "live_log_total_count": INT64_MAX}
    out["status"] = max(body["status"], "running", key=len)
    for name in ("error", "dropped_one_shot_events"):
        if name in body:
            out[name] = body[name]
    if out.get("terminal_log_replay") is not None:
        out["terminal_log_replay"] = {**out["terminal_log_replay"], "total_count": INT64_MAX}
    return out


def with_next_item(part: dict[str, Any], following: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """`part` with the first item of the part that follows it."""
    grown = dict(part)
    if following["live_logs"]:
        grown["live_logs"] = [*part["live_logs"], following["live_logs"][0]]
    elif following["live_node_progress"]:
        key, value = next(iter(following["live_node_progress"].items()))
        grown["live_node_progress"] = {**part["live_node_progress"], key: value}
    elif following["dataset_lifecycle_events"]:
        grown["dataset_lifecycle_events"] = [
            *part["dataset_lifecycle_events"],
            following["dataset_lifecycle_events"][0],
        ]
    elif following["activity_observations"]:
        grown["activity_observations"] = [
            *part["activity_observations"],
            following["activity_observations"][0],
        ]
    else:
        replay = part["terminal_log_replay"] or {**body["terminal_log_replay"], "lines": []}
        first = following["terminal_log_replay"]["lines"][0]
        grown["terminal_log_replay"] = {**replay, "lines": [*replay["lines"], first]}
    return grown


def test_every_part_fits_and_none_is_closed_while_the_next_item_still_fitted() -> None:
    for status in ("completed", "running", "failed"):
        body = big_upload(status)
        for limit in LIMITS:
            parts = split_upload(body, limit)
            assert len(parts) > 1
            for part in parts:
                assert len(encode_body(widest(part, body))) <= limit, (status, limit)
            for part, following in itertools.pairwise(parts):
                grown = widest(with_next_item(part, following, body), body)
                assert len(encode_body(grown)) > limit - SLACK, (status, limit)


def test_an_upload_exactly_at_the_limit_is_left_whole_and_one_byte_over_is_split() -> None:
    body = big_upload()
    size = len(encode_body({**body, "upload_seq": INT64_MAX}))
    assert split_upload(body, size) == [body]
    assert len(split_upload(body, size - 1)) > 1


def test_every_part_places_its_lines_where_the_one_upload_would_have() -> None:
    """A part's live_log_total_count is the position of its last line; a part after the tail's last
    line (nodes, events, the replay) still names that position, never nothing. Replayed lines at
    positions before the tail's first go first (they fill what the tail lost), so the tail's lines
    still land at 11 … 60."""
    body = big_upload()
    for limit in (2_500, 4_096, 7_000):
        parts = split_upload(body, limit)
        ends = [part["live_log_total_count"] for part in parts]
        assert all(type(end) is int for end in ends) and ends == sorted(ends) and ends[-1] == 60
        position = 10
        for part in parts:
            if part["live_logs"]:
                position += len(part["live_logs"])
                assert part["live_log_total_count"] == position
        assert position == 60
        replays = [p["terminal_log_replay"] for p in parts if p["terminal_log_replay"] is not None]
        assert [r["total_count"] for r in replays] == sorted(r["total_count"] for r in replays)
        assert replays[-1]["total_count"] == 100
        assert sum(len(r["lines"]) for r in replays) == 100


def test_parts_of_an_upload_without_live_lines_keep_its_log_position() -> None:
    body = big_upload()
    body = {**body, "live_logs": [], "live_log_total_count": 7, "terminal_log_replay": None}
    parts = split_upload(body, 2_500)
    assert len(parts) > 1 and [part["live_log_total_count"] for part in parts] == [7] * len(parts)
