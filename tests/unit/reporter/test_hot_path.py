"""The per-event shortcuts answer exactly what the general code answers."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ledger.validate import repair_text
from reporter import wire
from reporter.pipeline import storable
from reporter.progress import PROGRESS_FIELDS, NodeProgress, grouped, merge_patch, merge_row_counts

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
