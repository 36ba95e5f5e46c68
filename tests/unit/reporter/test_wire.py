"""The runner log patterns: what matches, what the groups mean, and the near misses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.validate import log_line
from reporter.wire import (
    MAP_START_PATTERN,
    MapSetup,
    MapStart,
    ToolBatch,
    bounded_line,
    has_timestamp_prefix,
    parse_map_setup,
    parse_map_start,
    parse_tool_batch,
    strip_timestamp_prefix,
)

TS = "[2026-03-04T05:06:07.890Z] "


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "Starting map over 5000 items with concurrency 8 (table namespace: leads_r1; "
            "10 already satisfied; 4990 pending)",
            MapStart(total=5000, table_namespace="leads_r1", already_satisfied=10, pending=4990),
        ),
        (
            TS + "Starting map over 12 items in 1 page (key: leads ; 3 duplicate keys skipped; 9 pending)",
            MapStart(total=12, table_namespace="leads", already_satisfied=3, pending=9),
        ),
        (
            "Starting map over 7 items now (table namespace: leads_x)",
            MapStart(total=7, table_namespace="leads_x", already_satisfied=0, pending=None),
        ),
        (
            "starting MAP over 7 items now (TABLE NAMESPACE: leads_x)",
            MapStart(total=7, table_namespace="leads_x", already_satisfied=0, pending=None),
        ),
    ],
)
def test_map_start_matches(line: str, expected: MapStart) -> None:
    assert parse_map_start(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        # Nothing between "items" and the parenthesis: the pattern wants " (", after "items ".
        "Starting map over 7 items (table namespace: leads_x)",
        "Starting map over many items now (table namespace: leads_x)",
        "Starting map over 7 items now (namespace: leads_x)",
        "Starting map over 7 items now (table namespace: leads_x",
        "Starting map over ７ items now (table namespace: leads_x)",  # a non-ASCII digit
        "Started map over 7 items now (table namespace: leads_x)",
    ],
)
def test_map_start_near_misses(line: str) -> None:
    assert parse_map_start(line) is None


def test_map_start_with_a_malformed_tail_is_no_match() -> None:
    # A tail that does not fit the optional group cannot be read as part of the namespace.
    parsed = parse_map_start("Starting map over 7 items now (table namespace: leads_x; lots pending)")
    assert parsed is None


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[perf] runtime map setup table=leads_r1 rows=5000", MapSetup("leads_r1", 5000)),
        (TS + "[perf] runtime map setup table=leads_r1 rows=5000 pages=5", MapSetup("leads_r1", 5000)),
        ("[2026-03-04T05:06:07Z]   [PERF] Runtime Map Setup table=a rows=1", MapSetup("a", 1)),
    ],
)
def test_perf_map_setup_matches_with_or_without_timestamp(line: str, expected: MapSetup) -> None:
    assert parse_map_setup(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        "note: [perf] runtime map setup table=leads rows=5",  # not at the start
        " [perf] runtime map setup table=leads rows=5",  # leading space
        "[perf] runtime map setup table=leads rows=5x",  # no word boundary after the number
        "[perf] runtime map setup table= rows=5",
        "[2026-03-04 05:06:07Z] [perf] runtime map setup table=leads rows=5",  # not ISO with T
        "[2026-03-04T05:06:07+01:00] [perf] runtime map setup table=leads rows=5",  # no Z
        "[perf] runtime map setup rows=5 table=leads",
    ],
)
def test_perf_map_setup_near_misses(line: str) -> None:
    assert parse_map_setup(line) is None


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("Executing tool batch enrich:3: 25 calls", ToolBatch("enrich:3", 25)),
        (TS + "Executing tool batch b-1_x: 4 calls in parallel", ToolBatch("b-1_x", 4)),
        ("[worker]Executing tool batch b: 2 calls", ToolBatch("b", 2)),
        ("executing TOOL batch b:   0 CALLS", ToolBatch("b", 0)),
    ],
)
def test_tool_batch_matches(line: str, expected: ToolBatch) -> None:
    assert parse_tool_batch(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        "now Executing tool batch b: 2 calls",  # neither at the start nor after "]"
        "Executing tool batch b: 2 call",
        "Executing tool batch b: 2 callsites",
        "Executing tool batch b/c: 2 calls",
        "Executing tool batch : 2 calls",
    ],
)
def test_tool_batch_near_misses(line: str) -> None:
    assert parse_tool_batch(line) is None


def test_timestamp_prefix() -> None:
    assert has_timestamp_prefix(TS + "x")
    assert strip_timestamp_prefix(TS + "x") == "x"
    assert not has_timestamp_prefix("[perf] x")
    assert strip_timestamp_prefix("[perf] x") == "[perf] x"
    assert strip_timestamp_prefix("x " + TS) == "x " + TS


# -- any line, in linear time -------------------------------------------------------------------------

# Pieces of the map-start diagnostic, so that random lines come near it in every way.
_PIECES = st.sampled_from(
    [
        "Starting map over ",
        "STARTING MAP OVER ",
        "7",
        "12",
        " items ",
        " items",
        " (",
        "(",
        " (table namespace: ",
        " (key: ",
        "key: ",
        "leads_x",
        "a",
        " ",
        ";",
        ")",
        "; 3 already satisfied",
        "; 4 duplicate keys skipped",
        "; 9 pending",
        " pending)",
        "\n",
        "x",
    ]
)


@settings(max_examples=2_000)
@given(st.lists(_PIECES, max_size=14).map("".join))
def test_map_start_finds_what_the_pattern_finds(line: str) -> None:
    match = MAP_START_PATTERN.search(line)
    expected = None
    if match is not None:
        total, satisfied, pending = match.group(1), match.group(3), match.group(4)
        expected = MapStart(
            total=int(total),
            table_namespace=match.group(2).strip(),
            already_satisfied=int(satisfied or 0),
            pending=None if pending is None else int(pending),
        )
    assert parse_map_start(line) == expected


@pytest.mark.parametrize(
    "unit",
    [
        "Starting map over 1 items ",
        "Starting map over 1 items  (key: ",
        "Starting map over 1 items  (key: a;",
        "Starting map over 1 items  (key: a; 1 already satisfied; ",
        "] Executing tool batch a:",
        "[perf] runtime map setup table=",
    ],
)
def test_a_hostile_line_of_megabytes_is_read_like_any_other(unit: str) -> None:
    # Quadratic on this line took minutes; linear, well under a second. The parse must only end,
    # which the test's timeout checks; the bench compares it with a plain line.
    line = unit * (3_000_000 // len(unit))
    assert parse_map_start(line) is None
    assert parse_tool_batch(line) is None
    assert parse_map_setup(line) is None


def test_a_diagnostic_is_read_from_the_line_as_the_ledger_keeps_it() -> None:
    # Its beginning survives the cut, so it is still read; the middle of a long line is not.
    tail = "Starting map over 3 items now (key: leads)"
    assert parse_map_start(tail + " " + "x" * 200_000) == MapStart(
        total=3, table_namespace="leads", already_satisfied=0, pending=None
    )
    assert parse_map_start("x" * 100_000 + tail + "x" * 100_000) is None
    assert bounded_line("é" * 100_000) == log_line("é" * 100_000)
