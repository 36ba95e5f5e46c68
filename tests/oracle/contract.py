"""What the runner protocol says a run must end with, whatever the implementation does.

The oracle compares the faulty run with a run without faults; this holds the run without faults to
the contract itself (`reporter/schemas/runner-protocol.v1.json`, read through
`tests.oracle.from_schema`), so a bug both runs share is caught too:

* **the result status** — a status the ledger takes as terminal ends the run with it; ``suspended``
  leaves the run in flight; any other status, none, or no result line ends it ``failed``.
  ``ledger report`` exits 0 for the protocol's statuses and 1 otherwise;
* **steps** — on an ended run, no step of the pipeline is left started and unsettled;
* **log lines** — no stored line is longer than the line bound in UTF-8 bytes, and a cut one keeps
  the beginning and the end of a line the runner sent around the marker, which states exactly how
  many bytes it took out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ledger.validate import repair_text
from reporter.pipeline import StaticPipeline
from tests.oracle.from_schema import line_kinds, resolve

_LINE = resolve(line_kinds()["log"]["properties"]["line"])
MAX_LINE_BYTES: int = _LINE["x-maxBytes"]
CUT_MARKER: str = _LINE["x-cutMarker"]
CUT_PATTERN = re.compile(re.escape(CUT_MARKER).replace(re.escape("{cut}"), r"(\d+)"))
_STATUS = resolve(line_kinds()["result"]["properties"]["status"])
STATUSES: tuple[str, ...] = tuple(_STATUS["enum"])
TERMINAL: tuple[str, ...] = tuple(_STATUS["x-terminal"])
EXIT_REPORTED, EXIT_NO_RESULT = 0, 1


def result_status(result: object) -> object:
    """The status of the stream's result line (None: there is none, or it has no status)."""
    if isinstance(result, Mapping) and result.get("type") == "result":
        return result.get("status")
    return None


def expected_terminal(result: object) -> str | None:
    """The run's terminal status once `ledger report` has read the stream (None: in flight)."""
    status = result_status(result)
    if status in TERMINAL:
        return str(status)
    return None if status == "suspended" else "failed"


def expected_exit(result: object) -> int:
    return EXIT_REPORTED if result_status(result) in STATUSES else EXIT_NO_RESULT


def cut_problem(stored: str, sent: Iterable[str]) -> str | None:
    """What is wrong with a stored log line by the line bound (None: nothing)."""
    size = len(stored.encode())
    if size > MAX_LINE_BYTES:
        return f"a stored line of {size} bytes, over the bound of {MAX_LINE_BYTES}"
    marker = CUT_PATTERN.search(stored)
    if marker is None:
        return None
    head, tail, cut = stored[: marker.start()], stored[marker.end() :], int(marker.group(1))
    kept = len(head.encode()) + len(tail.encode())
    for line in sent:
        if line.startswith(head) and line.endswith(tail) and kept + cut == len(line.encode()):
            return None
    return f"a cut line whose ends and count ({cut} bytes cut) match no line sent: {stored[:200]!r}…"


def sent_lines(lines: Iterable[object]) -> set[str]:
    """The over-long lines sent, as the ledger would store them whole (trimmed, repaired)."""
    out = set()
    for line in lines:
        if isinstance(line, str):
            for variant in (line, line.strip()):
                repaired = repair_text(variant)
                if len(repaired.encode()) > MAX_LINE_BYTES:
                    out.add(repaired)
    return out


def contract_problems(
    contract: object,
    result: object,
    lines: Iterable[object],
    projection: Mapping[str, Any],
    exit_code: int | None,
    *,
    steps_settle: bool = True,
) -> list[str]:
    """Where a run's final state (`tests.oracle.projection`) breaks the contract."""
    problems = []
    want = expected_terminal(result)
    if projection["terminal"] != want:
        ended = projection["terminal"]
        problems.append(f"result status {result_status(result)!r}: the run ended {ended!r}, want {want!r}")
    if exit_code != expected_exit(result):
        problems.append(f"ledger report exited {exit_code}, want {expected_exit(result)}")
    if projection["terminal"] is not None and steps_settle:
        for node in StaticPipeline(contract).nodes:
            step = projection["steps"].get(node.node_id)
            if step is not None and step["started"] and step["outcome"] is None:
                problems.append(f"step {node.node_id} is still started on a run that ended")
    logs = list(lines)
    if isinstance(result, Mapping) and isinstance(result.get("logs"), list):
        logs.extend(result["logs"])
    long_lines = sent_lines(logs)
    for stored in projection["logs"]:
        if stored is not None:
            problem = cut_problem(stored, long_lines)
            if problem is not None:
                problems.append(problem)
                break
    return problems
