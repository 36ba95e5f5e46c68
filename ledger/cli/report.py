"""`ledger report`: a runner's JSON-lines event stream on stdin → the reporter → the ledger over HTTP.

Any runner, in any language, can pipe its events (``{"type": "log", ...}``, ``{"type":
"execution_event", ...}``, ``{"type": "row_update", ...}``, ``{"type": "result", ...}``) into
``ledger report --run-id ID``. The reporter folds them and uploads progress while the stream runs;
on the ``result`` line it reads the run's sheet outcomes and node observations from the ledger,
reconciles, and makes the final upload, ending the run with the result's status (``completed``,
``failed`` or ``cancelled``); a ``suspended`` result ends the batch as ``--no-finalize`` does (the
run stays in flight). End of input without a ``result`` reports the run failed (exit 1, with a line
saying so in the run's log), and so does a result whose status is missing or none of those (exit 1,
the run's error naming it). A line that is not a JSON object is reported on stderr with its line
number and skipped.

A runner that reports one attempt in several batches ends each batch but the last with
``--no-finalize`` (its progress is uploaded, the run stays open) and starts the next with
``--resume`` (it continues after the uploads and log lines the ledger already holds).

Exit codes: 0 reported (whatever the run's outcome), 1 no result line or a result status the
ledger does not take, 3 a newer attempt owns the run (stale attempt), 4 the run had already ended
(whoever ended it: the line says how), 5 the final upload failed (the ledger refused it, or could
not be reached before the deadline), 10 the ledger refused the token (at its first refusal, while
the runner may still be writing), 11 the reporter was interrupted (SIGINT or SIGTERM), 12 the run
was interrupted and waits for a reporter that resumes it (`--resume`). Click's usage errors keep 2,
and so does a contract file that is not one (checked before any input is read).

Interruption. On the first SIGINT or SIGTERM the reporter stops reading, lands what it has within
a short grace (`INTERRUPT_GRACE_S`), leaves the run ``interrupted`` (the ledger records
``reporter.interrupted``; the watchdog still fails it if nobody resumes it) and prints one line
with the command that continues it; `--on-interrupt fail|cancel` ends the run that way instead. A
second signal exits at once (130). A ledger that refuses this reporter for good (a refused token,
a newer attempt, a run someone ended, a run that waits for a resume) stops it at once too, while
the runner may still be writing.

An unreachable ledger (`LEDGER_URL`) is printed at once, as one line, the first time a request
fails; uploads keep being retried, quietly, until `--deadline` seconds after the input ends.

What it prints on stderr: a line that says why it fails (an exit code above, but 11 and 130), and
the first failure to reach the ledger, starts with `Error:`; the others, notices, with
`ledger report:` (`report_words.Failing` tells them apart). Its input is read in
`ledger.cli.report_input`, its words are in `ledger.cli.report_words`, its signals in
`ledger.cli.report_signals`.

The exit code is what the ledger holds: when the final upload's outcome is unknown at the deadline
(no answer yet), no further request starts, the one in flight is waited for (at most
`reporter.uploader.IN_FLIGHT_WAIT_S`, then cancelled) and the ledger is asked how the run stands
(for at most `TRUTH_WAIT_S`, asking again while a cancelled request may still land): a run that
ended as reported exits as reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import IO, Any, TypeVar

import click

from ledger import tracing
from ledger.auth import client_token
from ledger.cli.exits import (
    EXIT_NEEDS_RESUME,
    EXIT_REPORT_INTERRUPTED,
    EXIT_TOKEN,
    EXIT_USAGE,
    CliError,
    token_refused,
)
from ledger.cli.report_input import feed, read_lines
from ledger.cli.report_signals import resume_command, signals
from ledger.cli.report_words import (
    Failing,
    FirstFailure,
    ReporterLog,
    reporter_log,
    summary_line,
    upload_failure,
)
from ledger.cli.shown import shown
from ledger.client import URL_VAR, service_url
from ledger.errors import (
    DuplicateUpload,
    LedgerError,
    LedgerFailure,
    RunTerminal,
    StaleAttempt,
    Unauthorized,
)
from ledger.text import one_line
from reporter import HttpTransport, ProgressReporter
from reporter.lines import decode_line
from reporter.pipeline import contract_problem
from reporter.reporter import (
    DEFAULT_FINALIZE_DEADLINE_S,
    IN_FLIGHT_RESULT_STATUSES,
    INTERRUPT_ENDS,
    NO_RESULT_ERROR,
    RESULT_STATUSES,
    result_status_problem,
)
from reporter.runner_protocol import runner_schema_text
from reporter.transports.http import DEFAULT_RETRY_POLICY
from reporter.transports.protocol import terminal_message

__all__ = [
    "EXIT_NEEDS_RESUME",
    "EXIT_NO_RESULT",
    "EXIT_OK",
    "EXIT_REPORT_INTERRUPTED",
    "EXIT_STALE",
    "EXIT_TERMINAL",
    "EXIT_TOKEN",
    "EXIT_UPLOAD_FAILED",
    "INTERRUPT_GRACE_S",
    "NO_RESULT_LINE",
    "TRUTH_WAIT_S",
    "report",
    "report_command",
]

EXIT_OK = 0
EXIT_NO_RESULT = 1
_EXIT_BAD_RESULT = 1
_EXIT_USAGE = 2
EXIT_STALE = 3
EXIT_TERMINAL = 4
EXIT_UPLOAD_FAILED = 5
# After the deadline, how long the ledger is asked how the run stands when an upload's outcome is
# unknown, and how often while a cancelled request may still land.
TRUTH_WAIT_S = 5.0
_TRUTH_POLL_S = 0.5
# How long an interrupted reporter has to land what it holds before it exits anyway.
INTERRUPT_GRACE_S = 5.0
_T = TypeVar("_T")
NO_RESULT_LINE = (
    "[ledger report] the runner's event stream ended without a result; the run is reported failed"
)


async def _until(
    work: Awaitable[_T], interrupted: asyncio.Future[str], stopped: asyncio.Event
) -> tuple[_T | None, str | None]:
    """`work`'s result, unless a signal (its name) or the uploader stopping (None, None) comes
    first: then `work` is cancelled."""
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(stopped.wait())
    try:
        waited: set[asyncio.Future[Any]] = {task, interrupted, stop}
        await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if task.done():
        return task.result(), None
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return None, interrupted.result() if interrupted.done() else None


async def report(
    reporter: ProgressReporter,
    lines: AsyncIterator[str],
    warn: Callable[[str], None],
    *,
    resume: bool = False,
    finalize: bool = True,
    deadline_s: float = DEFAULT_FINALIZE_DEADLINE_S,
    interrupted: asyncio.Future[str] | None = None,
    on_interrupt: str = "resumable",
    resume_command: str = "",
    grace_s: float = INTERRUPT_GRACE_S,
) -> int:
    """Feed, reconcile and finalize (or only end the batch), retrying faults until `deadline_s`
    after the input ends; the exit code (module docstring). `interrupted` resolves to a signal's
    name when one asks the reporter to stop."""
    if interrupted is None:
        interrupted = asyncio.get_running_loop().create_future()
    stopped = reporter.uploader.stopped_event
    signal_name: str | None = None
    result: dict[str, Any] | None = None
    # What the end of the input decided, and an upload failure whose outcome is still to be asked.
    decided = _Ending()
    failure: BaseException | None = None
    skipped = decided.skipped
    try:
        if resume:
            _, signal_name = await _until(reporter.resume(deadline_s=deadline_s), interrupted, stopped)
        if signal_name is None and not reporter.stopped:
            try:
                feeding = feed(reporter, lines, warn, skipped)
                result, signal_name = await _until(feeding, interrupted, stopped)
            except OSError as exc:
                warn(str(exc))
                result = None
        if reporter.stopped and reporter.uploader.stop_reason is not None:
            raise reporter.uploader.stop_reason
        if signal_name is not None:
            return await _interrupted(reporter, signal_name, on_interrupt, warn, resume_command, grace_s)
        ending = asyncio.ensure_future(
            _end(reporter, result, warn, decided, finalize=finalize, deadline_s=deadline_s)
        )
        either: set[asyncio.Future[Any]] = {ending, interrupted}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not ending.done():
            # Interrupted while ending the run: the end is what lands, given the grace to do it.
            signal_name = interrupted.result()
            await asyncio.wait({ending}, timeout=grace_s)
            if not ending.done():
                ending.cancel()
                warn(
                    f"interrupted ({signal_name}) while ending run {reporter.run_id}: its end could not "
                    f"be landed within {grace_s:g} s; continue it with: {resume_command}"
                )
                return EXIT_REPORT_INTERRUPTED
        return ending.result()
    except StaleAttempt as exc:
        warn(Failing(f"a newer attempt owns run {reporter.run_id}: {exc}"))
        return EXIT_STALE
    except RunTerminal as exc:
        warn(Failing(terminal_message(reporter.run_id, exc.terminal) if exc.terminal else str(exc)))
        return EXIT_TERMINAL
    except Unauthorized as exc:
        url = reporter.transport.base_url if isinstance(reporter.transport, HttpTransport) else None
        needs = f"a run token for run {reporter.run_id} or an admin token"
        refused = token_refused(str(exc), exc.status, url=url, needs=needs, command="ledger report")
        warn(Failing(f"{refused}. Nothing more was read"))
        return EXIT_TOKEN
    except DuplicateUpload as exc:
        if await _run_status(reporter) == "interrupted":
            warn(
                Failing(
                    f"run {reporter.run_id} was interrupted and waits for a reporter that resumes it; "
                    f"continue it with: {resume_command}"
                )
            )
            return EXIT_NEEDS_RESUME
        warn(Failing(str(exc)))
        return EXIT_UPLOAD_FAILED
    except (LedgerFailure, TimeoutError) as exc:
        failure = exc
    finally:
        if signal_name is None:
            # The uploads in flight land or fail first, within the deadline (module docstring).
            await reporter.aclose(timeout_s=decided.left())
        else:
            # An upload stuck retrying must not keep an interrupted reporter past its grace.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reporter.aclose(), grace_s)
    # Only a failed upload gets here (every other way out returned): its outcome may be unknown.
    assert failure is not None
    if not await _ended_as_reported(reporter, decided.reported, failure):
        why = upload_failure(failure, deadline_s)
        warn(Failing(f"the final upload for run {reporter.run_id} failed: {why}"))
        return EXIT_UPLOAD_FAILED
    return _verdict(reporter, decided, warn)


@dataclasses.dataclass(kw_only=True)
class _Ending:
    """What the end of the input decided: the deadline for everything after it, the status
    reported and why it is not the runner's own (no result line, a status the ledger refuses)."""

    ends: float | None = None
    reported: str | None = None
    missing: bool = False
    problem: str | None = None
    # Input lines that were not JSON objects (a list: `_feed` counts into it as it reads).
    skipped: list[int] = dataclasses.field(default_factory=lambda: [0])

    def left(self) -> float | None:
        return None if self.ends is None else max(0.0, self.ends - time.monotonic())


async def _end(
    reporter: ProgressReporter,
    result: dict[str, Any] | None,
    warn: Callable[[str], None],
    decided: _Ending,
    *,
    finalize: bool,
    deadline_s: float,
) -> int:
    """The end of the input: end the batch, or reconcile and finalize the run; the exit code."""
    decided.ends = time.monotonic() + deadline_s

    def left() -> float:
        return max(0.0, (decided.left() or 0.0))

    if not finalize or (result is not None and result.get("status") in IN_FLIGHT_RESULT_STATUSES):
        await reporter.end_batch(deadline_s=left())
        return EXIT_OK
    decided.missing = result is None
    if result is None:
        reporter.on_runner_event({"type": "log", "line": NO_RESULT_LINE, "source": "reporter"})
        result = {"type": "result", "status": "failed"}
    else:
        decided.problem = result_status_problem(result)
        if decided.problem is not None:
            result = {**result, "status": "failed"}
    decided.reported = str(result["status"])
    await reporter.load_terminal_truth(deadline_s=left())
    error = NO_RESULT_ERROR if decided.missing else decided.problem
    await reporter.finalize(result, error=error, deadline_s=left())
    return _verdict(reporter, decided, warn)


def _verdict(reporter: ProgressReporter, decided: _Ending, warn: Callable[[str], None]) -> int:
    """The exit code of a run the ledger holds ended as reported: its line when the run did not
    end as the runner said, then the one summary line."""
    code = EXIT_OK
    if decided.missing:
        warn(Failing(f"no result line: run {reporter.run_id} was reported failed"))
        code = EXIT_NO_RESULT
    elif decided.problem is not None:
        takes = ", ".join(RESULT_STATUSES)
        warn(Failing(f"{decided.problem} (it takes {takes}): run {reporter.run_id} was reported failed"))
        code = _EXIT_BAD_RESULT
    warn(summary_line(reporter, decided.reported or "running", decided.skipped[0]))
    return code


async def _ended_as_reported(
    reporter: ProgressReporter, reported: str | None, failure: BaseException
) -> bool:
    """Whether the ledger holds the run ended with the `reported` status after all: asked only when
    the final upload's outcome is unknown (a refusal changed nothing), for at most `TRUTH_WAIT_S`."""
    if reported is None or reported in IN_FLIGHT_RESULT_STATUSES or isinstance(failure, LedgerError):
        return False
    # A request cancelled in flight may still be applied by the service: ask until it shows.
    again = reporter.uploader.cancelled_in_flight
    try:
        async with asyncio.timeout(TRUTH_WAIT_S):
            while True:
                run = await reporter.transport.run_state(reporter.run_id)
                terminal = run.get("terminal") if run is not None else None
                if isinstance(terminal, dict) or not again:
                    return isinstance(terminal, dict) and terminal.get("status") == reported
                await asyncio.sleep(_TRUTH_POLL_S)
    except (LedgerFailure, TimeoutError):
        return False


async def _interrupted(
    reporter: ProgressReporter,
    signal_name: str,
    on_interrupt: str,
    warn: Callable[[str], None],
    resume_command: str,
    grace_s: float,
) -> int:
    """Land what arrived (or end the run, `--on-interrupt`) within the grace; the one line."""
    end = INTERRUPT_ENDS.get(on_interrupt)
    try:
        await reporter.interrupt(signal_name, end=None if end is None else on_interrupt, deadline_s=grace_s)
    except (StaleAttempt, RunTerminal, Unauthorized):
        raise
    except (LedgerFailure, TimeoutError) as exc:
        why = one_line(exc) or "deadline passed"
        warn(
            f"interrupted ({signal_name}): what had arrived could not be landed within {grace_s:g} s "
            f"({why}); run {reporter.run_id} stays as the ledger had it (the watchdog fails it if "
            f"nobody resumes it); continue it with: {resume_command}"
        )
        return EXIT_REPORT_INTERRUPTED
    if end is None:
        lines = reporter.state.log_total_count
        warn(
            f"interrupted ({signal_name}): run {reporter.run_id} is left interrupted with what had "
            f"arrived ({lines:,} log line{'' if lines == 1 else 's'}); continue it with: {resume_command}"
        )
    else:
        option = f"--on-interrupt {on_interrupt}"
        warn(f"interrupted ({signal_name}): run {reporter.run_id} was reported {end} ({option})")
    return EXIT_REPORT_INTERRUPTED


async def _run_status(reporter: ProgressReporter) -> str | None:
    """The run's status as the ledger has it, or None when it cannot say."""
    try:
        run = await reporter.transport.run_state(reporter.run_id)
    except LedgerFailure:
        return None
    status = run.get("status") if isinstance(run, dict) else None
    return status if isinstance(status, str) else None


def _load_contract(path: Path | None) -> object:
    """The contract file's content, checked before any input is read (one line and exit 2 when
    it is not a contract)."""
    if path is None:
        return None
    try:
        contract, problem = decode_line(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8
        contract, problem = None, str(exc)
    if problem is not None:
        # One line, as for any mistake in what a person passed (Click's usage code).
        raise CliError(f"--contract: cannot read the contract {path}: {problem}", EXIT_USAGE)
    problem = contract_problem(contract)
    if problem is not None:
        raise CliError(f"--contract {path}: the contract {problem}", EXIT_USAGE)
    return contract


async def _main(
    run_id: str,
    contract: object,
    attempt: int,
    mode: str,
    stream: IO[str],
    warn: Callable[[str], None],
    *,
    resume: bool,
    finalize: bool,
    deadline_s: float,
    on_interrupt: str = "resumable",
    resume_command: str = "",
    play_name: str | None = None,
) -> int:
    url = service_url()
    first_failure = FirstFailure(url, deadline_s, warn)
    # The client's one retry policy: outside the reporter's deadline blocks (each phase passes its
    # own), a request retries for no longer than the command's deadline either.
    retry = dataclasses.replace(
        DEFAULT_RETRY_POLICY,
        max_total_s=min(DEFAULT_RETRY_POLICY.max_total_s, deadline_s),
        on_first_failure=first_failure,
    )
    # The uploads below are this span's children (the uploader's task inherits the context), and
    # the service continues each one: the run's story in one trace, the worker's if it passed one.
    tracing.setup("ledger-report")
    with (
        reporter_log(ReporterLog(warn, first_failure)),
        tracing.joined_from_environment(),
        tracing.span("ledger report", run_id=run_id, producer_attempt=attempt),
    ):
        interrupted: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        with signals(interrupted, warn, run_id):
            async with HttpTransport(url, client_token(), retry_policy=retry) as transport:
                reporter = ProgressReporter(
                    run_id,
                    transport,
                    contract=contract,
                    producer_attempt=attempt,
                    mode="direct_worker" if mode == "direct_worker" else "progress_reporter",
                )
                # The run is opened with its play beside the reporting (opening fills a missing
                # play, whoever opened the run first), never holding up the runner's input.
                naming = (
                    None
                    if play_name is None
                    else asyncio.ensure_future(_name_play(transport, run_id, play_name))
                )
                code = await report(
                    reporter,
                    read_lines(stream),
                    warn,
                    resume=resume,
                    finalize=finalize,
                    deadline_s=deadline_s,
                    interrupted=interrupted,
                    on_interrupt=on_interrupt,
                    resume_command=resume_command,
                )
                if naming is not None:
                    # Bounded: an unreachable ledger was said already and must not hold the exit.
                    done, _ = await asyncio.wait({naming}, timeout=INTERRUPT_GRACE_S)
                    problem = naming.result() if done else "no answer in time"
                    naming.cancel()
                    if problem is not None:
                        warn(f"the play name was not set: {problem}")
                return code


async def _name_play(transport: HttpTransport, run_id: str, play_name: str) -> str | None:
    """Open the run with its play name; why it could not be, or None."""
    try:
        await transport.client.open_run(run_id, play_name=play_name)
    except (LedgerFailure, TimeoutError) as exc:
        return one_line(exc) or type(exc).__name__
    return None


def _print_schema(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(runner_schema_text(), nl=False)
        ctx.exit()


@click.command("report")
@click.option(
    "--schema",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_schema,
    help="Print the runner protocol (the JSON Schema of the lines this reads) and exit.",
)
@click.option("--run-id", required=True, help="The run the events belong to.")
@click.option(
    "--contract",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSON contract snapshot whose staticPipeline.substeps lists the steps.",
)
@click.option("--attempt", type=click.IntRange(min=0), default=1, show_default=True, help="Producer attempt.")
@click.option(
    "--mode",
    type=click.Choice(["progress_reporter", "direct_worker"]),
    default="progress_reporter",
    show_default=True,
    help="Which log lines are durable: all (progress_reporter), or not the worker host's own.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue this attempt after what the ledger already holds (a later batch of the same attempt).",
)
@click.option(
    "--no-finalize",
    "no_finalize",
    is_flag=True,
    help="End this batch without finalizing the run (a later `--resume` batch continues it).",
)
@click.option(
    "--deadline",
    "deadline_s",
    default=DEFAULT_FINALIZE_DEADLINE_S,
    show_default=True,
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help=f"After the input ends, keep retrying an unreachable ledger ({URL_VAR}) this long; the "
    "first failure is printed at once.",
)
@click.option(
    "--play",
    "play_name",
    metavar="NAME",
    help="The run's play (its name on every face: ledger runs, the dashboard, run_overview).",
)
@click.option(
    "--on-interrupt",
    "on_interrupt",
    type=click.Choice(["resumable", *INTERRUPT_ENDS]),
    default="resumable",
    show_default=True,
    help="On SIGINT or SIGTERM, after landing what arrived: leave the run interrupted for a "
    "`--resume` (resumable), or end it failed (fail) or cancelled (cancel).",
)
def report_command(
    run_id: str,
    contract: Path | None,
    attempt: int,
    mode: str,
    resume: bool,
    no_finalize: bool,
    deadline_s: float,
    play_name: str | None,
    on_interrupt: str,
) -> None:
    """Report a runner's JSON-lines events from stdin to the ledger (LEDGER_URL).

    Exit codes: 0 reported, 1 no result line (or a result status the ledger does not take), 2 a
    bad option or contract, 3 stale attempt, 4 the run had already ended, 5 the final upload
    failed, 10 the token was refused, 11 interrupted (SIGINT/SIGTERM), 12 the run waits for
    `--resume`.
    """
    if not run_id.strip():
        raise click.BadParameter("must not be empty", param_hint="--run-id")

    def warn(message: str) -> None:
        said = f"Error: {message}" if isinstance(message, Failing) else f"ledger report: {message}"
        click.echo(shown(said, markup=False), err=True)

    code = asyncio.run(
        _main(
            run_id,
            _load_contract(contract),
            attempt,
            mode,
            sys.stdin,
            warn,
            resume=resume,
            finalize=not no_finalize,
            deadline_s=deadline_s,
            on_interrupt=on_interrupt,
            resume_command=resume_command(run_id, contract, attempt, mode),
            play_name=play_name,
        )
    )
    if code != EXIT_OK:
        sys.exit(code)
