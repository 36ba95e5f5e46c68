"""What only one part of a split upload carries: the contract's step list only the first (the ledger
keeps it for the parts after it), the reason an interrupted run stopped only the last (with its
status)."""

from __future__ import annotations

import itertools

import pytest

from ledger.validate import INT64_MAX, encode_body
from reporter.bounded import split_upload
from tests.unit.reporter.test_bounded import applied, big_upload, logs, numbered, upload


def test_the_step_list_travels_only_in_the_first_part() -> None:
    parts = split_upload({**big_upload("completed"), "pipeline_steps": ["load", "enrich"]}, 4_096)
    assert len(parts) > 2
    assert [p.get("pipeline_steps") for p in parts] == [["load", "enrich"]] + [None] * (len(parts) - 1)


def test_the_reason_an_interrupted_run_stopped_travels_only_in_the_last_part() -> None:
    reason = {"reason": "SIGTERM", "message": "the worker was stopped"}
    body = {**big_upload("interrupted"), "interruption": reason}
    del body["error"]
    parts = split_upload(body, 4_096)
    assert len(parts) > 2
    assert [p.get("interruption") for p in parts] == [None] * (len(parts) - 1) + [reason]
    assert [p["status"] for p in parts] == ["running"] * (len(parts) - 1) + ["interrupted"]


def line(position: int) -> str:
    return f"{position:03d} " + "x" * 200


def replay_of_the_last(lines: int, total: int) -> dict[str, object]:
    """The result's logs as a runner gives them: only the last `lines` of a log of `total`."""
    return {
        "lines": [line(i) for i in range(total - lines + 1, total + 1)],
        "dedupe_mode": "positional",
        "total_count": total,
    }


@pytest.mark.parametrize("limit", [2_000, 2_500, 3_000])
@pytest.mark.parametrize(("replayed", "live_from"), [(50, 80), (50, 40), (10, 95)])
def test_a_replay_of_a_logs_last_lines_is_placed_where_the_one_upload_places_it(
    limit: int, replayed: int, live_from: int
) -> None:
    """The result's logs cover the log's last lines only (positions after 100 - `replayed`), the live
    tail those after `live_from`: split or whole, the ledger holds the same lines at the same
    positions."""
    live = [line(i) for i in range(live_from + 1, 101)]
    body = upload(
        status="completed",
        live_logs=live,
        live_log_total_count=100,
        terminal_log_replay=replay_of_the_last(replayed, 100),
    )
    parts = split_upload(body, limit)
    assert len(parts) > 1
    whole_events, whole_state = applied([body])
    split_events, split_state = applied(numbered(parts))
    assert logs(split_events) == logs(whole_events)
    assert split_state.live_log_count == whole_state.live_log_count == 100
    gaps = [e for e in split_events if e["type"] == "log.gap"]
    assert gaps == [e for e in whole_events if e["type"] == "log.gap"]


def test_a_part_of_replayed_lines_only_says_the_position_of_its_last_line() -> None:
    """A part that carries no live line says no more of the log than its own lines: up to the
    position of its last replayed line (once that is past the live tail's first, the tail's end)."""
    live_from = 80
    live = [line(i) for i in range(live_from + 1, 101)]
    body = upload(
        status="completed",
        live_logs=live,
        live_log_total_count=100,
        terminal_log_replay=replay_of_the_last(50, 100),
    )
    ended_at_the_tails_start = 0
    for limit in range(1_500, 4_000, 7):
        for part in split_upload(body, limit):
            replay = part["terminal_log_replay"]
            if part["live_logs"] or replay is None or replay["total_count"] > live_from:
                continue
            assert part["live_log_total_count"] == replay["total_count"]
            ended_at_the_tails_start += replay["total_count"] == live_from
    assert ended_at_the_tails_start > 0


def test_a_part_of_live_lines_is_closed_only_when_the_next_line_would_reach_the_limit() -> None:
    """Every part fits with the widest numbers the caller may give it, and is closed only when its
    next line would take it to the limit or past it: the accounting counts a separator for each
    line, one more than the part holds, and nothing else, at every limit byte by byte."""
    lines = [f"{i:03d} " + "l" * (50 + i * 7 % 40) for i in range(60)]
    body = upload(status="running", live_logs=lines, live_log_total_count=60)
    for limit in range(600, 2_500):
        parts = split_upload(body, limit)
        assert len(parts) > 1
        for part in parts:
            assert (
                len(encode_body({**part, "upload_seq": INT64_MAX, "live_log_total_count": INT64_MAX})) < limit
            )
        for part, following in itertools.pairwise(parts):
            grown = {**part, "live_logs": [*part["live_logs"], following["live_logs"][0]]}
            size = len(encode_body({**grown, "upload_seq": INT64_MAX, "live_log_total_count": INT64_MAX}))
            assert size >= limit, limit


def widest_size(part: dict[str, object]) -> int:
    return len(encode_body({**part, "upload_seq": INT64_MAX, "live_log_total_count": INT64_MAX}))


def test_the_longest_line_a_part_holds_is_kept_whole_and_one_byte_more_is_shortened() -> None:
    """A line is measured with the separator before it (a part's first line has none: one byte the
    accounting keeps spare), so the longest line kept whole leaves its part one byte under the
    limit; a line one byte longer fits no part and is shortened, and said."""
    limit = 2_000
    fill = limit - widest_size(upload(live_logs=[""], live_log_total_count=2))
    for extra, shortened in ((-1, []), (0, ["log line"])):
        said: list[str] = []
        text = "q" * (fill + extra)
        body = upload(live_logs=[text, "n" * 500], live_log_total_count=2)
        first, *_ = split_upload(body, limit, shrunk=said.append)
        assert said == shortened
        if shortened:
            assert first["live_logs"][0] != text and widest_size(first) < limit
        else:
            assert first["live_logs"] == [text] and widest_size(first) == limit - 1


def test_a_line_of_control_characters_too_big_for_any_part_is_cut_to_fit_at_every_limit() -> None:
    """Each control character takes six bytes encoded (its \\u escape): the cut is budgeted for that
    worst case, so the part holding the line still fits, at every limit byte by byte, in the live
    tail as in the result's replay."""
    text = "\x01" * 3_000
    for limit in range(1_200, 1_800):
        for body in (
            upload(live_logs=[text], live_log_total_count=1),
            upload(
                live_logs=[],
                live_log_total_count=1,
                terminal_log_replay={"lines": [text], "dedupe_mode": "positional", "total_count": 1},
            ),
        ):
            said: list[str] = []
            for part in split_upload(body, limit, shrunk=said.append):
                assert widest_size(part) <= limit, limit
            assert said == ["log line"]


def test_a_part_of_nodes_is_closed_only_when_the_next_node_with_its_positions_would_not_fit() -> None:
    """A node and its step positions travel together and are measured together; the accounting
    counts a separator before the first of each (two bytes it keeps spare), and nothing else."""
    nodes = {
        f"node-{i}": {"completed": i, "total": 10, "message": "m" * (40 + i * 7 % 30)} for i in range(40)
    }
    positions = {node_id: {"started": i, "progress": i + 1} for i, node_id in enumerate(nodes)}
    body = upload(status="running", live_node_progress=nodes, step_positions=positions)
    for limit in range(700, 2_000):
        parts = split_upload(body, limit)
        assert all(widest_size(part) <= limit for part in parts)
        for part, following in itertools.pairwise(parts):
            node_id, node = next(iter(following["live_node_progress"].items()))
            grown = {
                **part,
                "live_node_progress": {**part["live_node_progress"], node_id: node},
                "step_positions": {**part["step_positions"], node_id: following["step_positions"][node_id]},
            }
            assert widest_size(grown) > limit - 2, limit


def test_the_biggest_node_a_part_holds_is_kept_and_one_byte_more_is_dropped_and_said() -> None:
    """After a part with something in it, a node that fits only a part of its own starts one: the
    biggest that does leaves it one byte under the limit (its separator is counted); one byte more
    fits no part and is dropped, and said."""
    limit = 2_000
    fill = limit - widest_size(upload(live_node_progress={"big": {"message": ""}}))
    for extra, dropped in ((-1, []), (0, ["node"])):
        said: list[str] = []
        nodes = {"small": {"message": "s" * 600}, "big": {"message": "m" * (fill + extra)}}
        parts = split_upload(upload(live_node_progress=nodes), limit, shrunk=said.append)
        assert said == dropped
        kept = [(list(part["live_node_progress"]), widest_size(part)) for part in parts]
        assert kept == [(["small"], 910)] + ([] if dropped else [(["big"], limit - 1)])
