"""What `ledger report` says: the first failure to reach the ledger (once, at once), the
reporter's own warnings, the summary line a finished report ends with, and why an upload failed."""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterator

import httpx

from ledger.client import URL_VAR
from ledger.errors import LedgerUnavailable
from ledger.text import one_line
from reporter import ProgressReporter
from reporter.folding import JUNK_OUTSIDE_CONTRACT, JUNK_RUNNER_LINE

__all__ = [
    "Failing",
    "FirstFailure",
    "ReporterLog",
    "reporter_log",
    "summary_line",
    "upload_failure",
]


class Failing(str):
    """A line that says why `ledger report` fails (or cannot reach the ledger): printed as
    `Error: ...`, as every command's error line is; the other lines are notices."""

    __slots__ = ()


class FirstFailure:
    """Says the first failure to reach the ledger at once, as one line, and keeps the retries
    after it quiet: the person watching learns of a wrong `LEDGER_URL` now, not at the deadline."""

    def __init__(self, url: str, deadline_s: float, warn: Callable[[str], None]) -> None:
        self.url, self.deadline_s, self.warn = url, deadline_s, warn
        self.said = False

    def __call__(self, problem: BaseException) -> None:
        if self.said:
            return
        self.said = True
        cause = problem.__cause__
        if isinstance(problem, LedgerUnavailable) and problem.status is not None:
            what = f"the ledger at {self.url} answered {problem.status}"
        elif isinstance(cause, httpx.HTTPError):
            what = f"cannot reach the ledger at {self.url} ({type(cause).__name__}: {cause})"
        else:
            what = one_line(problem)
        self.warn(
            Failing(
                f"{what}; check {URL_VAR}. Retrying until {self.deadline_s:g} s after the input ends "
                "(--deadline)"
            )
        )


class ReporterLog(logging.Handler):
    """The reporter's warnings as `ledger report:` lines, the retries of an unreachable ledger
    only through `FirstFailure` (once)."""

    def __init__(self, warn: Callable[[str], None], first_failure: FirstFailure) -> None:
        super().__init__(logging.WARNING)
        self.warn, self.first_failure = warn, first_failure

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        fault = next((a for a in args if isinstance(a, LedgerUnavailable)), None)
        if fault is not None:
            self.first_failure(fault)
        else:
            self.warn(record.getMessage())


@contextlib.contextmanager
def reporter_log(handler: logging.Handler) -> Iterator[None]:
    logger = logging.getLogger("reporter")
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def summary_line(reporter: ProgressReporter, status: str, unreadable: int) -> str:
    """`run R completed: 4 of 6 steps completed (1 failed, 1 not run), 5,939 / 6,000 rows (61
    failed); 2 lines could not be used`: how the run ended as this reporter reported it, by the
    states it sent, and how many runner lines it could not use (unreadable, or not of the runner
    protocol; the first ones were described as they came)."""
    nodes = reporter.state.nodes
    # The contract's steps (those never started included), else the steps the runner named.
    steps_of_run = list(reporter.step_states()) or list(nodes)
    states = Counter(
        (node.state if node is not None and node.state else "pending")
        for node in (nodes.get(node_id) for node_id in steps_of_run)
    )
    others = [
        f"{states[state]:,} {said}"
        for state, said in (("failed", "failed"), ("cancelled", "cancelled"), ("running", "running"))
        if states[state]
    ]
    not_run = sum(states[state] for state in ("pending", "skipped"))
    if not_run:
        others.append(f"{not_run:,} not run")
    steps = (
        f"{states['completed']:,} of {len(steps_of_run):,} steps completed" if steps_of_run else "no steps"
    )
    if others:
        steps += f" ({', '.join(others)})"
    counted = [node for node in nodes.values() if node.total is not None]
    if counted:
        completed = sum(node.completed or 0 for node in counted)
        failed = sum(node.failed or 0 for node in counted)
        total = sum(node.total or 0 for node in counted)
        steps += f", {completed:,} / {total:,} rows" + (f" ({failed:,} failed)" if failed else "")
    junk = reporter.uploader.sanitizer.counts
    unused = unreadable + junk[JUNK_RUNNER_LINE] + junk[JUNK_OUTSIDE_CONTRACT]
    lines = "every line was used"
    if unused:
        lines = f"{unused:,} line{'' if unused == 1 else 's'} could not be used"
    return f"run {reporter.run_id} {status}: {steps}; {lines}"


def upload_failure(failure: BaseException, deadline_s: float) -> str:
    """Why an upload failed, never empty (a deadline's `TimeoutError` says nothing itself)."""
    said = one_line(failure)
    if isinstance(failure, TimeoutError):
        return f"{said or 'no answer'}: the deadline ({deadline_s:g} s, --deadline) passed first"
    return said or type(failure).__name__
