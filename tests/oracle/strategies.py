"""Hypothesis strategies: a contract, a runner stream with junk in it, its batching and its faults.

A `Scenario` is everything one example needs, drawn so that it shrinks towards "no junk, no
faults, one batch": the contract (`staticPipeline.substeps`), the runner's stream in wire format
(camelCase) as *items* — an event, a forced flush point, or a burst of log lines expanded at play
time — the final ``result``, how the stream is split into reporter batches (one reporter; the
same attempt resumed; successive attempts), sheet row outcomes recorded before finalize, and the
fault schedule of the faulty run: one fault per status upload request in order, disruptions
(service or Postgres restarts and outages) at flush points, and payloads delivered once more
after the end.

Valid lines come from the runner protocol's schema (`tests.oracle.from_schema`): every kind it
defines, bounds at their edges (counts and times at their limits, stored values nested at the depth
bound and beyond the request's, log lines at the line bound and several MB long, values bigger than
a request body), with the contract's names mixed in. Junk, mixed among them: lines with one rule of
the schema broken, unknown kinds, non-objects, NUL and lone surrogates in free text, and what only
a hostile runner writes (`tests.oracle.hostile`: diagnostics' heads repeated past the line bound,
escape sequences and markup). Bursts of
log lines may be long ones (a tail bigger than a request body), and the result carries every
status the protocol defines and some it does not.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from ledger.validate import LIVE_LOG_TAIL_LIMIT, MAX_LOG_LINE_BYTES
from reporter.pipeline import StaticPipeline
from tests.oracle import from_schema, hostile

Item = tuple[Any, ...]  # ("event", obj) | ("flush",) | ("burst", n, tag, width)
FLUSH: Item = ("flush",)
# Where a batch of the faulty run ended: a flush that, as the batch's last upload does, takes the
# whole live tail (the lines past a hole in it too).
BATCH_END: Item = ("flush", "batch end")

STEP_TEMPLATES: tuple[dict[str, Any], ...] = (
    {"type": "code", "id": "load", "field": "input"},
    {"type": "dataset", "id": "enrich", "field": "leads", "tableNamespace": "leads"},
    {"type": "tool", "id": "notify", "toolId": "slack.post"},
    {"type": "dataset", "field": "scores"},  # node id from its position: "dataset-<i>"
    {"type": "tool", "toolId": "mail.send"},
    {"type": "code", "id": "on_error", "field": "alert"},
)
JUNK_SUBSTEPS: tuple[Any, ...] = ("not a step", None, {"id": "no-type"}, {"type": 5}, [])

BATCHINGS = ("single", "resume", "attempts")
MODES = ("progress_reporter", "direct_worker")
FAULT_KINDS = ("ok", "lost_before", "lost_after", "duplicate", "503")
HTTP_DISRUPTIONS = ("service_restart", "service_outage")
POSTGRES_DISRUPTIONS = ("pg_restart", "pg_outage")

RUNNER_STAMP = "[2026-01-01T00:00:00.000Z] "
LINE_BOUND = MAX_LOG_LINE_BYTES
PLAIN_CHARS = tuple("abcdefxyz ABC0123456789:-_.,")
JUNK_CHARS = ("\x00", "\ud800", "\udfff", "\ud83d", "\ufffd", "é", "\u2603", "\U0001f600", "\n", "\t", "\x1b")
JUNK_NUMBERS: tuple[Any, ...] = (
    "12",
    True,
    None,
    1.5,
    7.0,
    -3,
    2**63,
    2**70,
    -(2**70),
    float("nan"),
    float("inf"),
    [],
    {},
    "2026-11-30T00:00:00Z",
)


def chance(percent: int) -> st.SearchStrategy[bool]:
    """True with about `percent` % probability; shrinks to False."""
    return st.integers(0, 99).map(lambda n: n >= 100 - percent)


def weighted(*pairs: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """`one_of` with integer weights (repeating a branch is how Hypothesis weighs it)."""
    return st.one_of(*[strategy for weight, strategy in pairs for _ in range(weight)])


def _join(chars: list[str]) -> str:
    return "".join(chars)


plain_text = st.lists(st.sampled_from(PLAIN_CHARS), max_size=12).map(_join)
junk_text = st.lists(st.sampled_from(PLAIN_CHARS + JUNK_CHARS), min_size=1, max_size=10).map(_join)
text = weighted((4, plain_text), (1, junk_text))
junk_number = st.sampled_from(JUNK_NUMBERS)


def count(upper: int = 3_000) -> st.SearchStrategy[Any]:
    """A row count: mostly a plausible integer, sometimes junk of another type or size."""
    return weighted((5, st.integers(0, upper)), (1, junk_number))


# -- the contract and what its events may name ---------------------------------------------------


@dataclass(frozen=True)
class Vocabulary:
    """Names a stream for this contract may use (known ones and some the pipeline does not know)."""

    namespaces: tuple[str, ...]
    logical: tuple[str, ...]
    tool_ids: tuple[str, ...]
    node_ids: tuple[str, ...]


def vocabulary(contract: object) -> Vocabulary:
    pipeline = StaticPipeline(contract)
    logical = tuple(n.logical_namespace for n in pipeline.nodes if n.logical_namespace)
    physical = tuple(name for ns in logical for name in (ns, f"{ns}_r1", f"{ns}_r2"))
    tools = tuple(n.tool_id for n in pipeline.nodes if n.tool_id)
    return Vocabulary(
        namespaces=(*physical, "other_t1"),
        logical=logical,
        tool_ids=(*tools, "unknown.tool"),
        node_ids=(*(n.node_id for n in pipeline.nodes), "doc-a", "doc-b"),
    )


@st.composite
def contracts(draw: st.DrawFn) -> Any:
    picks = draw(st.lists(st.integers(0, len(STEP_TEMPLATES) - 1), unique=True, max_size=len(STEP_TEMPLATES)))
    substeps: list[Any] = [dict(STEP_TEMPLATES[i]) for i in picks]
    if draw(chance(10)):
        substeps.insert(draw(st.integers(0, len(substeps))), draw(st.sampled_from(JUNK_SUBSTEPS)))
    if draw(chance(4)):
        return draw(st.sampled_from((None, {}, {"staticPipeline": []}, {"staticPipeline": {"substeps": 3}})))
    return {"staticPipeline": {"substeps": substeps}}


# -- runner events ---------------------------------------------------------------------------------
#
# Every valid line is drawn from the runner protocol's schema (`tests.oracle.from_schema`), so a kind
# added to it is drawn here too, with its bounds at their edges (counts, times, depths, line bytes,
# sizes past the body limit). The contract's vocabulary and the progress-carrying log diagnostics
# are mixed into the fields that name them, so streams reach real steps.


def log_texts(v: Vocabulary) -> st.SearchStrategy[str]:
    """A log line's text: plain, junk characters, or one of the diagnostics that carry progress."""
    prefix = st.sampled_from(("", RUNNER_STAMP))
    ns = weighted((4, st.sampled_from(v.namespaces)), (1, text))
    number = st.integers(0, 3_000)
    plain = st.builds(lambda p, t: p + t, prefix, text)
    map_start = st.builds(
        lambda p, n, name, k, q: (
            f"{p}Starting map over {n} items with concurrency 8 "
            f"(table namespace: {name}; {k} already satisfied; {q} pending)"
        ),
        prefix,
        number,
        ns,
        number,
        number,
    )
    map_start_short = st.builds(
        lambda p, n, name: f"{p}Starting map over {n} items with concurrency 4 (key: {name})",
        prefix,
        number,
        ns,
    )
    perf = st.builds(
        lambda p, name, n: f"{p}[perf] runtime map setup table={name} rows={n}", prefix, ns, number
    )
    batch = st.builds(
        lambda p, i, n: f"{p}Executing tool batch enrich:{i}: {n} calls", prefix, st.integers(0, 9), number
    )
    trace = st.builds(lambda t: "[perf-trace] " + t, text)
    blank = st.sampled_from(("", "   ", "\t"))
    # What only a hostile runner writes (`tests.oracle.hostile`): a diagnostic's head repeated past
    # the line bound (a backtracking search was quadratic on it), escape sequences and markup.
    regex_hostile = st.builds(
        lambda unit, size: (unit * (size // len(unit) + 1))[:size],
        st.sampled_from(hostile.REGEX_HOSTILE_UNITS),
        st.sampled_from((100, LINE_BOUND - 1, LINE_BOUND, LINE_BOUND + 1, 200_000)),
    )
    escapes = st.lists(st.sampled_from((*hostile.ESCAPES, "plain ")), min_size=1, max_size=6).map(_join)
    return weighted(
        (6, plain),
        (3, map_start),
        (1, map_start_short),
        (2, perf),
        (2, batch),
        (1, trace),
        (1, blank),
        (1, regex_hostile),
        (1, escapes),
    ).filter(bool)


def names(v: Vocabulary) -> dict[str, st.SearchStrategy[Any]]:
    """Values for the schema's named fields that this contract's pipeline knows."""
    plausible = st.integers(0, 3_000)
    return {
        "line": log_texts(v),
        "source": st.sampled_from(("runner", "runner", "worker")),
        "artifactTableNamespace": st.sampled_from(v.namespaces),
        "logicalNamespace": st.sampled_from(v.logical or v.namespaces),
        "tableNamespace": st.sampled_from(v.namespaces),
        "mapNodeId": st.none() | st.sampled_from(v.node_ids),
        "totalRows": plausible,
        "completedRows": plausible,
        "failedRows": st.integers(0, 300),
        "toolId": st.sampled_from(v.tool_ids),
        "outcome": st.sampled_from(("succeeded", "failed", "failed")),
        "nodeId": st.sampled_from(v.node_ids),
        "attempt": st.integers(0, 3),
        "invocationId": st.integers(0, 5).map(lambda n: f"inv:{n}"),
        "at": st.integers(1_767_225_600_000, 1_767_225_700_000),
        "activityId": st.sampled_from(("act-1", "act-2", "act-3")),
        "observedAt": st.integers(0, 40),
        "phase": st.sampled_from(("created", "populated", "dropped")),
    }


# How often each kind of line comes up (a kind the schema adds weighs 1; results end the stream).
LINE_WEIGHTS = {
    "log": 8,
    "map.progress": 3,
    "map.started": 2,
    "map.completed": 2,
    "dataset.lifecycle": 3,
    "activity.observed": 3,
    "result": 0,
}

JUNK_EVENTS: tuple[Any, ...] = (
    None,
    42,
    "log",
    [],
    {},
    {"type": 5},
    {"type": "log"},
    {"type": "log", "line": ["x"]},
    {"type": "execution_event"},
    {"type": "execution_event", "event": "x"},
    {"type": "execution_event", "event": {"type": 7}},
    {"type": "execution_event", "event": {"type": "mystery.event", "x": 1}},
    {"type": "execution_event", "event": {"type": "map.progress"}},
    {"type": "mystery"},
)


def junk_events() -> st.SearchStrategy[Any]:
    unknown = st.builds(lambda t: {"type": "execution_event", "event": {"type": t}}, junk_text)
    broken = from_schema.broken_lines(exclude=("result",)).map(lambda pair: pair[1])
    return weighted((1, st.sampled_from(JUNK_EVENTS)), (1, unknown), (2, broken))


def events(v: Vocabulary) -> st.SearchStrategy[Any]:
    return weighted((12, from_schema.valid_lines(names(v), weights=LINE_WEIGHTS)), (1, junk_events()))


MAX_ITEMS = 40
# A burst's lines: short, or long enough that a thousand of them are more than a request body.
LONG_LINE_BYTES = 1_100
burst_widths = st.sampled_from((0, 0, 0, LONG_LINE_BYTES))


def items(v: Vocabulary, max_items: int = MAX_ITEMS) -> st.SearchStrategy[list[Item]]:
    item = weighted(
        (12, events(v).map(lambda e: ("event", e))),
        (3, st.just(FLUSH)),
        (
            1,
            st.tuples(
                st.just("burst"),
                st.sampled_from(
                    (3, 40, LIVE_LOG_TAIL_LIMIT - 1, LIVE_LOG_TAIL_LIMIT, LIVE_LOG_TAIL_LIMIT + 1, 1_150)
                ),
                burst_widths,
            ),
        ),
    )
    # Hypothesis's lists average a handful of elements; a list of lists averages about
    # `max_items` / 2 items and still shrinks element by element.
    chunks = st.lists(st.lists(item, max_size=max(1, max_items // 4)), max_size=8)
    return chunks.map(lambda parts: [i for part in parts for i in part][:max_items])


def burst_lines(tag: int, n: int, width: int = 0) -> list[str]:
    """`n` log lines, each padded to `width` bytes when it is shorter."""
    return [f"burst {tag} line {i} ".ljust(width, "x") for i in range(n)]


def live_lines(stream: Sequence[Item]) -> list[str]:
    """The log lines (raw) of the stream, bursts expanded, in order."""
    lines: list[str] = []
    for item in stream:
        if item[0] == "burst":
            lines.extend(burst_lines(item[2], item[1], item[3]))
        elif item[0] == "event":
            event = item[1]
            if isinstance(event, dict) and event.get("type") == "log" and isinstance(event.get("line"), str):
                lines.append(event["line"])
    return lines


# -- the result ----------------------------------------------------------------------------------


def map_frames(v: Vocabulary) -> st.SearchStrategy[dict[str, Any]]:
    frame = st.fixed_dictionaries(
        {
            "status": weighted((5, st.sampled_from(("completed", "failed"))), (1, st.just("running"))),
            "mapNodeId": weighted((5, st.none()), (1, st.sampled_from(v.node_ids))),
            "artifactTableNamespace": st.sampled_from(v.namespaces),
            "totalRows": count(),
            "failedRowsCount": count(300),
        },
        optional={
            "completedRowsCount": count(),
            "completedRowKeys": st.lists(st.integers(0, 99).map(lambda n: f"row-{n}"), max_size=4),
        },
    )
    return st.dictionaries(st.sampled_from(("f1", "f2", "f3")), frame, max_size=3)


# Every status the protocol defines, and some it does not (each ends the run failed).
RESULT_STATUSES: tuple[str, ...] = tuple(
    from_schema.resolve(from_schema.line_kinds()["result"]["properties"]["status"])["enum"]
)
ODD_STATUSES: tuple[Any, ...] = ("succeeded", "COMPLETED", "", 5, None)


@st.composite
def results(draw: st.DrawFn, v: Vocabulary, lines: list[str]) -> Any:
    if draw(chance(4)):
        return draw(st.sampled_from((None, {}, {"type": "result", "status": "completed"}, "done")))
    logs = draw(
        weighted(
            (6, st.just(lines)),
            (1, st.lists(text, max_size=3).map(lambda extra: [*lines, *extra])),
            (1, st.integers(0, len(lines)).map(lambda k: lines[:k])),
            (1, st.just([*lines, None, 5])),
            (1, st.none()),
        )
    )
    result = {
        "type": "result",
        "status": draw(weighted((8, st.sampled_from(RESULT_STATUSES)), (1, st.sampled_from(ODD_STATUSES)))),
        "logs": logs,
        "checkpoint": {"mapFrames": draw(map_frames(v))},
    }
    if draw(chance(3)):
        del result["status"]
    return result


def nesting(value: Any) -> int:
    """How many levels deep `value` nests (lists and objects)."""
    depth, level = 0, [value]
    while level:
        children = [
            c for v in level if isinstance(v, list | dict) for c in (v.values() if isinstance(v, dict) else v)
        ]
        if not any(isinstance(v, list | dict) for v in level):
            break
        depth, level = depth + 1, children
    return depth


def abbreviate(value: Any, budget: int = 6) -> Any:
    """`value` for a failure message: JSON nested deeper than `budget` levels is summarised."""
    if not isinstance(value, list | dict):
        return value
    if budget <= 0:
        return f"<{type(value).__name__} nested {nesting(value)} levels>"
    if isinstance(value, dict):
        return {k: abbreviate(v, budget - 1) for k, v in value.items()}
    return [abbreviate(v, budget - 1) for v in value]


# -- the scenario --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """One example: the runner's stream, how it is batched, and the faulty run's faults."""

    contract: Any
    mode: str
    items: tuple[Item, ...]
    result: Any
    batching: str = "single"
    cuts: tuple[int, ...] = ()
    sheet: tuple[str, int, int, int] | None = None  # (table namespace, completed, failed, pending)
    faults: tuple[str, ...] = ()
    disruptions: tuple[tuple[int, str], ...] = ()
    redeliver: tuple[int, ...] = ()
    report_again: bool = False  # the whole stream reported once more to the ended run

    def batches(self) -> list[tuple[Item, ...]]:
        bounds = [0, *self.cuts, len(self.items)]
        return [self.items[a:b] for a, b in itertools.pairwise(bounds)]

    @property
    def attempts(self) -> list[int]:
        n = len(self.batches())
        return list(range(1, n + 1)) if self.batching == "attempts" else [1] * n

    def sheet_rows(self) -> list[dict[str, str]]:
        if self.sheet is None:
            return []
        namespace, completed, failed, pending = self.sheet
        statuses = ["completed"] * completed + ["failed"] * failed + ["pending"] * pending
        return [
            {"table_namespace": namespace, "row_key": f"row-{i}", "status": status}
            for i, status in enumerate(statuses)
        ]

    def without_faults(self) -> Scenario:
        return Scenario(
            self.contract, self.mode, self.items, self.result, self.batching, self.cuts, self.sheet
        )

    def oracle(self) -> Scenario:
        """What the faulty run must end up equal to: the same stream through one reporter with no
        faults, flushed where the batches ended. Successive attempts stay successive (a newer
        attempt has a positional log channel of its own), without faults."""
        if self.batching != "resume":
            return self.without_faults()
        stream = list(self.items)
        for cut in reversed(self.cuts):
            stream.insert(cut, BATCH_END)
        return Scenario(self.contract, self.mode, tuple(stream), self.result, "single", (), self.sheet)

    def describe(self) -> str:
        def show(value: Any) -> str:
            try:
                shown = json.dumps(abbreviate(value), ensure_ascii=True, default=repr)
            except ValueError:  # a circular structure
                shown = repr(value)
            return shown if len(shown) <= 3_000 else shown[:3_000] + f"... ({len(shown)} chars)"

        out = [
            f"Scenario(batching={self.batching!r}, cuts={self.cuts}, mode={self.mode!r},",
            f"  contract={show(self.contract)},",
            f"  sheet={self.sheet!r}, faults={self.faults!r},",
            f"  disruptions={self.disruptions!r}, redeliver={self.redeliver!r},"
            f" report_again={self.report_again!r},",
            "  items=[",
        ]

        def batch_starts(index: int) -> None:
            for batch, cut in enumerate(self.cuts, start=2):
                if cut == index:
                    how = "resumed" if self.batching == "resume" else f"attempt {batch}"
                    out.append(f"    --- batch {batch} ({how}) ---")

        for index, item in enumerate(self.items):
            batch_starts(index)
            body = show(item[1]) if item[0] == "event" else ""
            if item[0] == "burst":
                body = f"{item[1]} lines" + (f" of {item[3]} bytes" if item[3] else "")
            out.append(f"    {index:3d} {item[0]} {body}".rstrip())
        batch_starts(len(self.items))
        out.append("  ],")
        out.append(f"  result={show(self.result)})")
        return "\n".join(out)

    def __repr__(self) -> str:
        return self.describe()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.describe())


def flush_points(stream_items: Sequence[Item], cuts: Sequence[int]) -> int:
    """How many flush points the play has before finalize (flush items and batch ends)."""
    return sum(1 for item in stream_items if item[0] == "flush") + len(cuts)


@st.composite
def scenarios(
    draw: st.DrawFn,
    *,
    batchings: Sequence[str] = BATCHINGS,
    disruption_kinds: Sequence[str] = (),
    disruptions: tuple[int, int] = (0, 0),
    max_faults: int = 8,
) -> Scenario:
    contract = draw(contracts())
    v = vocabulary(contract)
    mode = draw(weighted((4, st.just(MODES[0])), (1, st.just(MODES[1]))))
    batching = draw(st.sampled_from(batchings))
    # Successive attempts would report again as a stale one: the contract of an ended run is
    # looked at with the attempt that ended it.
    report_again = batching != "attempts" and draw(chance(20))
    # Batches are drawn one by one (not cut at drawn indices), so shrinking one batch leaves the
    # others alone.
    n_batches = 1 if batching == "single" else draw(st.integers(2, 3))
    batches = [draw(items(v, MAX_ITEMS // n_batches)) for _ in range(n_batches)]
    cuts = tuple(itertools.accumulate(len(batch) for batch in batches[:-1]))
    # A burst's lines are tagged with its position, so they stay the same when items move.
    stream = [
        ("burst", it[1], i, it[2]) if it[0] == "burst" else it
        for i, it in enumerate(it for batch in batches for it in batch)
    ]
    result = draw(results(v, live_lines(stream)))
    sheet = None
    if draw(chance(30)):
        sheet = (
            draw(st.sampled_from(v.namespaces)),
            draw(st.integers(0, 30)),
            draw(st.integers(0, 10)),
            draw(st.integers(0, 5)),
        )
    fault_runs = draw(
        st.lists(st.tuples(st.sampled_from(FAULT_KINDS), st.integers(1, 3)), max_size=max_faults)
    )
    faults = tuple(kind for kind, repeat in fault_runs for _ in range(repeat))
    points = flush_points(stream, cuts)
    chosen: list[tuple[int, str]] = []
    if disruption_kinds:
        low, high = disruptions
        chosen = draw(
            st.lists(
                st.tuples(
                    # the last point is finalize: weigh it so "just before finalize" comes up often
                    weighted((2, st.integers(0, points)), (1, st.just(points))),
                    st.sampled_from(tuple(disruption_kinds)),
                ),
                min_size=low,
                max_size=high,
                unique_by=lambda d: d[0],
            )
        )
    redeliver = tuple(draw(st.lists(st.integers(0, 30), max_size=3)))
    return Scenario(
        contract=contract,
        mode=mode,
        items=tuple(stream),
        result=result,
        batching=batching,
        cuts=cuts,
        sheet=sheet,
        faults=faults,
        disruptions=tuple(sorted(chosen)),
        redeliver=redeliver,
        report_again=report_again,
    )
