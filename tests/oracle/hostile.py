"""Pathological runner content: what a hostile or broken runner may write, as the bytes it writes.

The oracle's strategies (`tests.oracle.strategies`) draw protocol lines and junk a plausible runner
writes; this draws what only a hostile or badly broken one does, for the hostile-runner suite
(`tests.acceptance.test_hostile_suite`) and for the strategies' junk: JSON nested from just under
the reporter's line bound to a hundred thousand levels, log lines of megabytes repeating what
the reporter's diagnostics start with, escape sequences and markup, counts at and past the bigint,
ids past the body limit, contracts of tens of thousands of steps or nested too deep, and every
bound of the line text at its limit and one either side. Everything is drawn from a seeded
`random.Random`, so a failing stream is replayed from its seed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ledger.validate import INT64_MAX, MAX_JSON_DEPTH, MAX_LOG_LINE_BYTES
from reporter.lines import MAX_LINE_DEPTH

# What a reporter diagnostic starts with, or a stretch of one: repeated, each made a backtracking
# search quadratic in the line's length.
REGEX_HOSTILE_UNITS = (
    "Starting map over 1 items ",
    "Starting map over 1 items  (key: ",
    "Starting map over 1 items  (key: a; 1 already satisfied; ",
    "] Executing tool batch a:",
    "]" + " " * 30,
    "[perf] runtime map setup table=",
    "[2026-01-01T00:00:00.000Z] " * 2,
)
# Bytes a terminal acts on, and text rich would read as markup.
ESCAPES = (
    "\x1b]0;pwned\x07",
    "\x1b[2J\x1b[H",
    "\x1b[31mred\x1b[0m",
    "\x07",
    "\x9b31m",
    "\x1bP+q\x1b\\",
    "\x08\x08\x08",
    "\r",
    "[/bold]",
    "[bold red]",
    "[link=http://x]",
    "\\[",
    "\x00",
    "\u202e",
)
LINE_SIZES = (MAX_LOG_LINE_BYTES - 1, MAX_LOG_LINE_BYTES, MAX_LOG_LINE_BYTES + 1, 1_000_000, 3_000_000)
DEPTHS = (MAX_JSON_DEPTH, MAX_LINE_DEPTH - 2, MAX_LINE_DEPTH - 1, MAX_LINE_DEPTH + 1, 1_000, 100_000)
HUGE_COUNTS = (INT64_MAX - 1, INT64_MAX, INT64_MAX + 1, 2**70, -1, 10**30)


def _nested(depth: int, leaf: str = "0") -> str:
    """JSON text nesting `depth` levels (lists and objects by turns), as a runner writes it."""
    opens = "".join("[" if level % 2 else '{"k":' for level in range(depth))
    closes = "".join("]" if level % 2 else "}" for level in reversed(range(depth)))
    return opens + leaf + closes


def _log(line: str, **extra: Any) -> str:
    return json.dumps({"type": "log", "line": line, **extra})


def _event(**event: Any) -> str:
    return json.dumps({"type": "execution_event", "event": event})


def deep_line(rng: random.Random) -> str:
    depth = rng.choice(DEPTHS)
    where = rng.choice(("log", "inputs", "lifecycle", "bare"))
    if where == "log":
        return '{"type": "log", "line": "deep", "extra": ' + _nested(depth - 1) + "}"
    if where == "inputs":
        return (
            '{"type": "execution_event", "event": {"type": "docflow.node.started", "nodeId": "deep", '
            '"attempt": 1, "inputs": ' + _nested(max(1, depth - 3)) + "}}"
        )
    if where == "lifecycle":
        return (
            '{"type": "execution_event", "event": {"type": "dataset.lifecycle", "phase": "x", "v": '
            + _nested(max(1, depth - 2))
            + "}}"
        )
    return _nested(depth)


def long_line(rng: random.Random) -> str:
    size = rng.choice(LINE_SIZES)
    unit = rng.choice((*REGEX_HOSTILE_UNITS, "é", "\U0001f600", "x"))
    text = (unit * (size // len(unit) + 1))[:size]
    return _log(text + rng.choice(("", " end", "Starting map over 3 items now (key: leads)")))


def escape_line(rng: random.Random) -> str:
    text = "".join(rng.choice((*ESCAPES, "plain ", "é", "\n", "\t")) for _ in range(rng.randint(1, 12)))
    kind = rng.choice(("log", "node", "error", "namespace"))
    if kind == "log":
        return _log(text, source=rng.choice(("runner", "worker", text)))
    if kind == "node":
        return _event(type="docflow.node.started", nodeId=text.strip() or "n", attempt=1)
    if kind == "error":
        return _event(type="docflow.node.failed", nodeId="doc-a", attempt=1, error=text)
    return _event(type="map.started", mapNodeId=text.strip() or "m", totalRows=3, completedRows=0)


def huge_count_line(rng: random.Random, counts: tuple[int, ...]) -> str:
    node = rng.choice(("enrich", "huge-a", "huge-b", "x" * rng.choice((1, 70, 1_100))))
    kind = rng.choice(("map.started", "map.progress", "map.completed"))
    return _event(
        type=kind,
        mapNodeId=node,
        totalRows=rng.choice(counts),
        completedRows=rng.choice(counts),
        failedRows=rng.choice((0, *counts)),
    )


def long_id_line(rng: random.Random) -> str:
    size = rng.choice((1_100, 70_000, 1_100_000))
    node = ("n" * size)[:size]
    if rng.random() < 0.5:
        return _event(type="docflow.node.completed", nodeId=node, attempt=1)
    return _event(type="map.progress", mapNodeId=node, totalRows=5, completedRows=1)


def broken_line(rng: random.Random) -> str:
    return rng.choice(
        (
            "{",
            "[1, 2",
            '"just a string"',
            "null",
            '{"type": "log", "line": "\\ud800 lone"}',
            '{"type": "log", "line": NaN}',
            "\ufeff" + _log("bom"),
            "x" * 70_000,
            '{"type": "log", "line": "a", "line": "b"}',
            '{"type": "execution_event", "event": {"type": "map.progress", "completedRows": 1e400}}',
        )
    )


def plain_line(rng: random.Random) -> str:
    return _log(f"plain line {rng.randint(0, 10**6)}")


@dataclass
class HostileStream:
    """One `ledger report` input: its lines, its contract file's text, and what its result says."""

    seed: int
    lines: list[str]
    contract: str | None
    status: str | None  # the result line's status; None: no result line
    kinds: list[str] = field(default_factory=list)

    @property
    def stdin(self) -> str:
        result = [] if self.status is None else [json.dumps({"type": "result", "status": self.status})]
        return "".join(line + "\n" for line in [*self.lines, *result])

    @property
    def contract_refused(self) -> bool:
        """A contract `ledger report` refuses (exit 2): it nests past the line bound."""
        return self.contract is not None and "deep-contract" in self.kinds

    def reported_status(self) -> str | None:
        """The status the run must end with when `ledger report` exits 0 or 1."""
        if self.status in ("completed", "failed", "cancelled"):
            return self.status
        if self.status == "suspended":
            return None
        return "failed"

    def describe(self) -> str:
        return f"seed={self.seed} kinds={self.kinds} status={self.status!r} bytes={len(self.stdin)}"


def _contract(steps: list[dict[str, Any]]) -> str:
    return json.dumps({"staticPipeline": {"substeps": steps}})


def hostile_contract(rng: random.Random) -> tuple[str | None, str]:
    kind = rng.choice(("none", "plain", "many", "long-ids", "one-huge-id", "markup", "deep-contract"))
    if kind == "none":
        return None, kind
    if kind == "plain":
        return _contract([{"id": "load", "type": "code"}, {"id": "enrich", "type": "dataset"}]), kind
    if kind == "many":
        return _contract(
            [{"id": f"step-{i}", "type": "tool"} for i in range(rng.choice((1_001, 30_000)))]
        ), kind
    if kind == "long-ids":
        width = rng.choice((66, 1_100))
        return _contract([{"id": f"{i:04d}" + "s" * width, "type": "tool"} for i in range(1_000)]), kind
    if kind == "one-huge-id":
        return _contract([{"id": "s" * 2_000_000, "type": "tool"}, {"id": "after", "type": "code"}]), kind
    if kind == "markup":
        names = ["[/bold]n", "\x1b]0;t\x07", "[red]x[/red]", "\\[y]"]
        return _contract([{"id": name, "type": "tool"} for name in names]), kind
    depth = rng.choice((MAX_LINE_DEPTH + 1, 5_000, 100_000))
    return '{"staticPipeline": ' + _nested(depth) + "}", kind


def hostile_stream(
    seed: int, *, huge_counts: tuple[int, ...] = HUGE_COUNTS, max_lines: int = 8
) -> HostileStream:
    """The stream of `seed`: a contract, a few plain lines and pathological ones, and a result."""
    rng = random.Random(seed)
    contract, contract_kind = hostile_contract(rng)
    makers: dict[str, Callable[[random.Random], str]] = {
        "deep": deep_line,
        "long": long_line,
        "escape": escape_line,
        "huge-count": lambda r: huge_count_line(r, huge_counts),
        "long-id": long_id_line,
        "broken": broken_line,
        "plain": plain_line,
    }
    kinds = [contract_kind]
    lines: list[str] = []
    for _ in range(rng.randint(1, max_lines)):
        kind = rng.choice(tuple(makers))
        kinds.append(kind)
        lines.append(makers[kind](rng))
    # At most a few megabytes in all: what is tested is the kind of line, not the volume.
    while sum(len(line) for line in lines) > 8_000_000:
        lines.pop(rng.randrange(len(lines)))
    status = rng.choice(("completed", "completed", "failed", "cancelled", "suspended", "succeeded", None))
    return HostileStream(seed, lines, contract, status, kinds)
