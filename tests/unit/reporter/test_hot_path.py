"""The per-event shortcuts answer exactly what the general code answers."""

from __future__ import annotations

import re
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.validate import UploadBounds, log_line, repair_text
from reporter import wire
from reporter.folding import EventFolder
from reporter.pipeline import StaticPipeline, storable
from reporter.progress import PROGRESS_FIELDS, NodeProgress, grouped, merge_patch, merge_row_counts
from reporter.state import ProgressState
from reporter.wire import LogMode

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
        assert fast.log_bytes == sum(len(line.encode()) for line in fast.logs)
        assert (fast.logs, fast.log_bytes, fast.log_total_count, fast.log_hole_after, fast.dirty) == (
            general.logs,
            general.log_bytes,
            general.log_total_count,
            general.log_hole_after,
            general.dirty,
        )


# -- the tool-batch line, written out in the fold, against the fold's general path ----------------

_FOLD_CONTRACT = {
    "staticPipeline": {
        "substeps": [
            {"type": "dataset", "id": "enrich", "field": "rows", "tableNamespace": "leads"},
            {"type": "dataset", "id": "score", "field": "scores", "tableNamespace": "scores"},
        ]
    }
}
_FOLD_LINE_BYTES = 64


class _CountingClock:
    """A clock that moves on every reading: two folds read it equally only if they read it as
    often, in the same order."""

    def __init__(self) -> None:
        self.ms = 1_000

    def __call__(self) -> int:
        self.ms += 1
        return self.ms


def _folder(
    mode: LogMode, line_bytes: int, unsent: int = 0
) -> tuple[EventFolder, list[bool], _CountingClock]:
    clock = _CountingClock()
    scheduled: list[bool] = []
    bounds = UploadBounds(log_line_bytes=line_bytes, log_tail_bytes=6 * _FOLD_LINE_BYTES)
    # A run continued after 1,000 lines, `unsent` of them not yet carried by an upload.
    state = ProgressState(now_ms=clock, bounds=bounds, initial_live_log_total_count=1_000)
    state.log_sent_through -= unsent
    folder = EventFolder(state, StaticPipeline(_FOLD_CONTRACT), mode=mode, schedule=scheduled.append)
    return folder, scheduled, clock


def _padded(line: str, length: int) -> str:
    return line + " " + "x" * (length - len(line) - 1) if length > len(line) + 1 else line


# The usual line, as the runner writes it (what the written-out fold takes), and the same line with
# one thing changed: where the diagnostic stands, its case and spacing, its count (zero, at and past
# the bigint bound), what follows it (whitespace the tail strips, a control or wider character, NUL,
# another diagnostic), its length about the line bound.
_usual_tool_batch_lines = st.builds(
    lambda marker, calls: f"{marker} b-{calls}:1: {calls} calls",
    st.sampled_from(["Executing tool batch", "eXECUTING tool BATCH"]),
    st.sampled_from([1, 3, 25, 10**17]),
)
_CHANGES: tuple[Callable[[str], str], ...] = (
    lambda line: line,
    lambda line: " " + line,
    lambda line: "]" + line,
    lambda line: "[2026-01-01T00:00:00.000Z] " + line,
    lambda line: "x " + line,
    lambda line: line.replace("tool batch", "tool  batch"),
    lambda line: line.replace("batch", "batc"),
    lambda line: "Executing tool batch b:1: 0 calls",
    lambda line: f"Executing tool batch b:1: {2**63 - 1} calls",
    lambda line: f"Executing tool batch b:1: {2**63} calls",
    lambda line: line + " ",
    lambda line: line + "\t",
    lambda line: line + "\n",
    lambda line: line + "\x01",
    lambda line: line + " é",
    lambda line: line + " \x00 x",
    lambda line: line + " starting map over 9 items x (key: scores)",
    lambda line: line + " [perf] runtime map setup table=scores rows=7",
    lambda line: _padded(line, _FOLD_LINE_BYTES - 1),
    lambda line: _padded(line, _FOLD_LINE_BYTES),
    lambda line: _padded(line, _FOLD_LINE_BYTES + 1),
)
_tool_batch_lines = st.builds(
    lambda line, change: change(line), _usual_tool_batch_lines, st.sampled_from(_CHANGES)
)
_counts = st.none() | st.sampled_from([0, 1, 2, 10, 40, 10**6])
_map_events = st.builds(
    lambda kind, node, total, completed, failed: {
        "type": "execution_event",
        "event": {
            "type": kind,
            "mapNodeId": node,
            "artifactTableNamespace": "leads",
            "totalRows": total,
            "completedRows": completed,
            "failedRows": failed,
        },
    },
    st.sampled_from(
        ["map.started", "map.progress", "map.progress", "map.progress", "map.completed", "map.failed"]
    ),
    st.sampled_from(["enrich", "enrich", "score", None]),
    _counts,
    st.sampled_from([0, 1, 2, 10, 40, 10**6]),  # the protocol's count, never absent
    _counts,
)
_log_events = st.builds(
    lambda line, source: {"type": "log", "line": line, "source": source},
    _tool_batch_lines
    | st.sampled_from(
        [
            "Starting map over 50 items with concurrency 2 (key: leads)",
            "[perf] runtime map setup table=scores rows=7",
            "row 3 enriched",
            "   ",
        ]
    ),
    st.sampled_from([None, "runner", "worker"]),
)
_fold_ops = st.lists(
    _log_events | _log_events | _map_events | st.sampled_from(["upload", "upload the whole tail"]),
    min_size=8,
    max_size=60,
)


def _seen(folder: EventFolder, scheduled: list[bool], clock: _CountingClock) -> tuple[object, ...]:
    state = folder.state
    return (
        state.nodes,
        state.positions,
        list(state.logs),
        state.log_bytes,
        state.log_total_count,
        state.log_sent_through,
        state.log_hole_after,
        state.log_hole_opened_ms,
        state.dirty,
        state.total_rows,
        folder.active_map_node_id,
        folder.step_states(),
        scheduled,
        clock.ms,
    )


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["progress_reporter", "direct_worker"]),
    st.sampled_from([_FOLD_LINE_BYTES, wire.MAX_LOG_LINE_BYTES]),
    st.sampled_from([0, 497, 498, 499, 500]),  # about the backlog that asks for an upload at once
    _fold_ops,
)
def test_the_written_out_tool_batch_fold_is_the_general_fold(
    mode: LogMode, line_bytes: int, unsent: int, ops: list[Any]
) -> None:
    # The same stream folded twice: as decoded JSON (plain dicts: the written-out fold takes the
    # usual tool-batch lines), and as another kind of mapping, which the fold takes through its
    # general path alone. Every reading of the state, the clock and the flushes asked must agree.
    fast, general = _folder(mode, line_bytes, unsent), _folder(mode, line_bytes, unsent)
    for op in ops:
        if isinstance(op, str):
            whole_tail = op == "upload the whole tail"
            assert fast[0].state.snapshot(whole_tail=whole_tail) == general[0].state.snapshot(
                whole_tail=whole_tail
            )
        else:
            fast[0].on_runner_event(op)
            general[0].on_runner_event(MappingProxyType(op))
        assert _seen(*fast) == _seen(*general)


@pytest.mark.parametrize(
    "line",
    [
        "Executing tool batch b:1: 3 calls",
        "eXECUTING tool BATCH b:1: 3 calls",
        f"Executing tool batch b:1: {10**17 + 3} calls",  # 18 digits: always a count
        "Executing tool batch b:1: 1 calls",
        "Executing tool batch b:1: 3 calls (batch 7)",
        _padded("Executing tool batch b:1: 3 calls", _FOLD_LINE_BYTES),  # at the line bound
    ],
)
def test_the_usual_tool_batch_line_takes_the_written_out_fold(line: str) -> None:
    # Held to the general path above, the shortcut must also be taken: the usual line of the
    # active map never reaches the general path; the same line with one thing changed does.
    folder = _folder("progress_reporter", _FOLD_LINE_BYTES)[0]
    folder.on_runner_event(
        {
            "type": "execution_event",
            "event": {"type": "map.progress", "mapNodeId": "enrich", "totalRows": 10**18, "completedRows": 2},
        }
    )
    general: list[str] = []
    folder._fold_log = lambda line, source, lowered: general.append(line)  # type: ignore[method-assign]
    folder.on_runner_event({"type": "log", "line": line, "source": "runner"})
    assert general == []
    assert list(folder.state.logs) == [line]
    calls = int(line.split(": ")[1].split()[0])
    assert folder.state.nodes["enrich"].active_rows == calls
    changed = [
        " " + line,
        line + " ",
        _padded("Executing tool batch b:1: 3 calls", _FOLD_LINE_BYTES + 1),
        f"Executing tool batch b:1: {2**63 - 1} calls",  # 19 digits: the general path checks the bound
        f"Executing tool batch b:1: {2**63} calls",
        "Executing tool batch b:1: 3 calls é",
        "Executing tool batch b:1: 3 calls \x00 x",
        "Executing tool batch b:1: 3 calls starting map over 9 items",
    ]
    for other in changed:
        folder.on_runner_event({"type": "log", "line": other, "source": "runner"})
    assert general == changed


@pytest.mark.parametrize(("unsent", "at_once"), [(498, False), (499, True), (500, True)])
def test_the_written_out_fold_asks_for_an_upload_at_the_backlog(unsent: int, at_once: bool) -> None:
    # Half the live tail unsent (the line itself included) asks for an upload at once.
    folder, scheduled, _ = _folder("progress_reporter", _FOLD_LINE_BYTES, unsent)
    folder.on_runner_event(
        {
            "type": "execution_event",
            "event": {"type": "map.progress", "mapNodeId": "enrich", "completedRows": 0},
        }
    )
    scheduled.clear()
    folder.on_runner_event({"type": "log", "line": "Executing tool batch b:1: 3 calls", "source": None})
    assert folder.state.nodes["enrich"].active_rows == 3
    assert scheduled == [at_once]
