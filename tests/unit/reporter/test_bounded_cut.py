"""How a split cuts a line too big for any part: to the most UTF-8 bytes that fit its part whatever
characters the line holds (a character may take six bytes encoded, a control character's \\u
escape), in the live tail as in the result's replay, at every limit byte by byte; the part still
fits; and the cut line is counted at its size, so its part is closed only when the next line would
not fit."""

from __future__ import annotations

import itertools
from typing import Any

from ledger.validate import INT64_MAX, encode_body, truncate_line
from reporter.bounded import split_upload
from tests.unit.reporter.test_bounded import upload

# A line of control characters: each of its bytes takes six encoded, the worst case.
CONTROL = "\x01" * 3_000
PLAIN = "p" * 3_000


def widest_size(part: dict[str, Any]) -> int:
    """A part's bytes with the widest numbers the caller may put in it."""
    widest = {**part, "upload_seq": INT64_MAX, "live_log_total_count": INT64_MAX}
    if widest["terminal_log_replay"] is not None:
        widest["terminal_log_replay"] = {**widest["terminal_log_replay"], "total_count": INT64_MAX}
    return len(encode_body(widest))


def replay(lines: list[str]) -> dict[str, Any]:
    return {"lines": lines, "dedupe_mode": "positional", "total_count": len(lines)}


def live_body(text: str) -> dict[str, Any]:
    return upload(live_logs=[text], live_log_total_count=1)


def replay_body(text: str) -> dict[str, Any]:
    return upload(live_logs=[], live_log_total_count=1, terminal_log_replay=replay([text]))


# What a part takes besides the line, each way the line travels; the line then takes its quotes.
LIVE_FIXED = widest_size(upload(live_logs=[], live_log_total_count=1))
REPLAY_FIXED = widest_size(upload(live_logs=[], live_log_total_count=1, terminal_log_replay=replay([])))


def test_a_live_line_too_big_for_any_part_keeps_the_most_its_part_holds_whatever_it_holds() -> None:
    """The cut keeps (what the part leaves the line, less its quotes and separator) / 6 bytes: at
    every limit (every remainder of that division), a line of control characters still fits, and
    a plain line is cut to the same size. From parts that leave the line room for little more than
    the marker, where a line of control characters kept any longer would take its part past the
    limit, up to roomy ones."""
    for limit in range(LIVE_FIXED + 40, LIVE_FIXED + 1_300):
        budget = (limit - LIVE_FIXED - 3) // 6
        for text in (CONTROL, PLAIN):
            said: list[str] = []
            [part] = split_upload(live_body(text), limit, shrunk=said.append)
            assert said == ["log line"], limit
            assert part["live_logs"] == [truncate_line(text, budget)], limit
            assert widest_size(part) <= limit, limit


def test_a_replayed_line_too_big_for_any_part_keeps_the_most_its_part_holds_beside_the_replay() -> None:
    """A replayed line shares its part with the replay's own fields (its dedupe mode, its widest
    total_count): the cut leaves room for them as well, at every limit."""
    for limit in range(REPLAY_FIXED + 40, REPLAY_FIXED + 1_300):
        budget = (limit - REPLAY_FIXED - 3) // 6
        for text in (CONTROL, PLAIN):
            said: list[str] = []
            [part] = split_upload(replay_body(text), limit, shrunk=said.append)
            assert said == ["log line"], limit
            assert part["terminal_log_replay"]["lines"] == [truncate_line(text, budget)], limit
            assert part["terminal_log_replay"]["total_count"] == 1
            assert widest_size(part) <= limit, limit


def test_the_longest_replayed_line_a_part_holds_is_kept_whole_and_one_byte_more_is_shortened() -> None:
    """A replayed line is measured beside the replay's own fields: the longest kept whole leaves its
    part one byte under the limit (the separator counted before a first line); one byte longer
    does not fit beside them and is cut, and said, and its part still fits."""
    limit = 2_000
    fill = limit - REPLAY_FIXED - len(encode_body(""))
    for extra, shortened in ((-1, []), (0, ["log line"])):
        said: list[str] = []
        text = "q" * (fill + extra)
        # A second line, so the upload is split.
        body = upload(live_logs=[], live_log_total_count=2, terminal_log_replay=replay([text, "n" * 500]))
        first, *_ = split_upload(body, limit, shrunk=said.append)
        assert said == shortened
        kept = first["terminal_log_replay"]["lines"]
        if shortened:
            assert kept[0] == truncate_line(text, (limit - REPLAY_FIXED - 3) // 6)
            assert widest_size(first) < limit
        else:
            assert kept == [text] and widest_size(first) == limit - 1


def test_a_part_holding_a_cut_line_is_closed_only_when_the_next_line_would_reach_the_limit() -> None:
    """A cut line is counted at the size it was cut to (with its separator), like any other: after
    it, short lines fill its part until the next would take it to the limit, at every limit."""
    shorts = [f"{i:02d}" + "s" * (i % 7) for i in range(40)]
    for text in (CONTROL, PLAIN):
        body = upload(live_logs=[text, *shorts], live_log_total_count=41)
        for limit in range(LIVE_FIXED + 150, LIVE_FIXED + 700):
            parts = split_upload(body, limit)
            assert parts[0]["live_logs"][0] == truncate_line(text, (limit - LIVE_FIXED - 3) // 6)
            assert [line for part in parts for line in part["live_logs"]][1:] == shorts
            for part, following in itertools.pairwise(parts):
                assert widest_size(part) < limit, limit
                grown = {**part, "live_logs": [*part["live_logs"], following["live_logs"][0]]}
                assert widest_size(grown) >= limit, limit
