"""The per-event shortcuts answer exactly what the general code answers."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ledger.validate import UploadBounds, log_line, repair_text
from reporter import wire
from reporter.pipeline import storable
from reporter.progress import PROGRESS_FIELDS, NodeProgress, grouped, merge_patch, merge_row_counts
from reporter.state import ProgressState

ROW_FIELDS = (
    "completed",
    "failed",
    "total",
    "started_rows",
    "active_rows",
    "waiting_rows",
    "completed_rows",
    "artifact_table_namespace",
    "message",
)


@given(st.integers(min_value=-(10**12), max_value=10**21))
def test_grouped_is_the_format_mini_language(number: int) -> None:
    assert grouped(number) == f"{number:,}"


def test_grouped_at_the_table_edges() -> None:
    for number in (0, 999, 1000, 999_999, 1_000_000, 1_001_001, 999_999_999, 1_000_000_000, -1):
        assert grouped(number) == f"{number:,}"


counts = st.none() | st.integers(min_value=0, max_value=10**6)
texts = st.none() | st.text(max_size=5)
existing = st.fixed_dictionaries(
    {name: st.none() | st.integers(min_value=0, max_value=10**6) for name in ("completed", "total")},
    optional={"completed_at": st.integers(min_value=0, max_value=10**6), "message": st.text(max_size=3)},
)


@given(existing, st.tuples(counts, counts, counts, counts, counts, counts, counts, texts, texts))
def test_merge_row_counts_is_merge_patch(start: dict[str, Any], values: tuple[Any, ...]) -> None:
    fast, general = NodeProgress(**start), NodeProgress(**start)
    merge_row_counts(fast, 77, *values)
    merge_patch(general, dict(zip(ROW_FIELDS, values, strict=True)), 77)
    assert fast == general
    assert set(ROW_FIELDS) <= set(PROGRESS_FIELDS)


MARKED = (
    (wire.MAP_START_PATTERN, wire.MAP_START_MARKER),
    (wire.PERF_MAP_SETUP_PATTERN, wire.PERF_MAP_SETUP_MARKER),
    (wire.TOOL_BATCH_PATTERN, wire.TOOL_BATCH_MARKER),
)

lines = st.one_of(
    st.text(),
    st.sampled_from(
        [
            "Executing tool batch enrich:1: 25 calls",
            "[x] eXeCuTiNg TOOL batch a: 3 calls",
            "Starting map over 5 items with concurrency 2 (key: t_1)",
            "[perf] RUNTIME map setup table=t rows=4",
            "\u212aStarting map over 5 items x (key: a)",
        ]
    ).flatmap(
        lambda base: st.builds(lambda pre, post: pre + base + post, st.text(max_size=4), st.text(max_size=4))
    ),
)


@given(lines)
def test_a_line_without_its_marker_never_matches(line: str) -> None:
    lowered = line.lower()
    for pattern, marker in MARKED:
        if pattern.search(line) is not None or pattern.match(wire.strip_timestamp_prefix(line)):
            assert marker in lowered


@given(st.text(alphabet=st.characters(codec=None, exclude_categories=())))
def test_the_text_shortcuts_agree_with_the_full_checks(text: str) -> None:
    assert repair_text(text) == re.sub("[\x00\ud800-\udfff]", "\ufffd", text)
    unstorable = "\x00" in text or any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    assert storable(text) is not unstorable


def _general_calls(line: str) -> int | None:
    batch = wire.parse_tool_batch(line)
    return None if batch is None else batch.calls


# The tool-batch diagnostic's parts and near misses: a case, a prefix, whitespace, an id, digits at
# and past the bigint bound, a following word; pieces a generator joins into lines.
_BATCH_PIECES = st.sampled_from(
    [
        "Executing tool batch",
        "eXECUTING TOOL BATCH",
        "Executing tool batc",
        "Executing  tool batch",
        "executing tool batchx",
        "]",
        "[w]",
        "] \t",
        " ",
        "\n",
        "\x0b",
        "\xa0",
        "\u2003",
        "\x00",
        "\ud800",
        "\u0130",
        "\u212a",
        "enrich:1",
        "b-1_x",
        "b/c",
        ":",
        ": ",
        "25",
        "0",
        "٣",
        str(2**63 - 1),
        str(2**63),
        "0" * 19 + "7",
        " calls",
        " call",
        "s",
        " calls in parallel",
    ]
)
batch_lines = st.one_of(
    st.lists(_BATCH_PIECES, max_size=12).map("".join),
    st.builds(
        lambda pre, calls, post: f"{pre}Executing tool batch enrich:{calls}: {calls} calls{post}",
        st.text(max_size=4),
        st.integers(min_value=0, max_value=2**64),
        st.text(max_size=4),
    ),
    st.text(),
)


@given(batch_lines)
def test_the_tool_batch_shortcut_answers_as_the_general_parse(line: str) -> None:
    assert wire.tool_batch_calls(line, line.lower()) == _general_calls(line)


def test_the_tool_batch_shortcut_at_the_line_bound() -> None:
    # The general parse reads the line as stored: repaired (a NUL takes three bytes then) and cut
    # in its middle past the bound. A diagnostic in the middle of a line around the bound, of one
    # byte a character, of NULs and wider than ASCII, is found as it finds it.
    limit = wire.MAX_LOG_LINE_BYTES
    middle = "] Executing tool batch b: 3 calls "
    for length in (limit - 1, limit, limit + 1, limit // 3 - 1, limit // 3 + 1, limit // 2 + 1):
        for fill in ("x", "\x00", "\u0130"):
            side = (length - len(middle)) // 2
            line = fill * side + middle + fill * (length - len(middle) - side)
            assert wire.tool_batch_calls(line, line.lower()) == _general_calls(line)


def test_a_lower_case_form_of_another_length_takes_the_general_parse() -> None:
    # "\u0130" lowers to two characters: positions in the lowered form are not the line's.
    for line in ("\u0130]Executing tool batch a: 1 calls", "\u0130\u0130 ]Executing tool batch a: 2 calls x"):
        assert wire.tool_batch_calls(line, line.lower()) == _general_calls(line) is not None


def test_the_tool_batch_shortcut_finds_the_leftmost_diagnostic() -> None:
    # Near misses first, each refused, then the first that matches; a too-large count ends the
    # search as the general parse's first match does.
    lines = {
        "x Executing tool batch a: 1 calls ] Executing tool batch b: 2 calls": 2,
        "] Executing tool batch a: 1 call ]\tExecuting tool batch b: 3 calls": 3,
        "]  Executing tool batch a:  5 calls [x] Executing tool batch b: 6 calls": 5,
        f"] Executing tool batch a: {2**63} calls ] Executing tool batch b: 6 calls": None,
        f"Executing tool batch a: {2**63 - 1} calls": 2**63 - 1,
        " Executing tool batch a: 1 calls": None,
        " Executing tool batch a: 1 calls]": None,
    }
    for line, calls in lines.items():
        assert wire.tool_batch_calls(line, line.lower()) == _general_calls(line) == calls


# Log lines around a small line bound: ASCII of the bound's length and one either side, NULs (three
# bytes once repaired), wider characters, lone surrogates, whitespace the tail strips.
_LINE_BYTES = 48
log_texts = st.one_of(
    st.text(max_size=60),
    st.builds(
        lambda length, fill, pad: pad + fill * length + pad,
        st.sampled_from([_LINE_BYTES - 1, _LINE_BYTES, _LINE_BYTES + 1, _LINE_BYTES // 3 + 1]),
        st.sampled_from(["x", "\x00", "é", "\ud800", " ", "a\x00"]),
        st.sampled_from(["", " ", "\t\n"]),
    ),
)


@given(st.lists(log_texts, max_size=10))
def test_the_log_tail_shortcut_keeps_what_the_general_path_keeps(texts: list[str]) -> None:
    # The general path: every line bounded by `log_line` and kept by `_keep_log`, as `append_log`
    # does for a line its shortcut does not take. A small tail makes the trim drop lines too.
    bounds = UploadBounds(log_line_bytes=_LINE_BYTES, log_tail_bytes=3 * _LINE_BYTES)
    fast, general = (
        ProgressState(now_ms=lambda: 0, bounds=bounds),
        ProgressState(now_ms=lambda: 0, bounds=bounds),
    )
    for text in texts:
        fast.append_log(text)
        if text.strip():
            general.log_total_count += 1
            general._keep_log(log_line(text.strip(), _LINE_BYTES))
            general.dirty = True
        assert (fast.logs, fast.log_bytes, fast.log_total_count, fast.log_hole_after, fast.dirty) == (
            general.logs,
            general.log_bytes,
            general.log_total_count,
            general.log_hole_after,
            general.dirty,
        )
