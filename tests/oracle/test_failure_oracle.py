"""The failure oracle: however a run goes wrong, every face tells the story the documents tell.

Each example draws a `FailureScenario` (`tests.oracle.failure_strategies`): a contract, the
runner's lines, and how the story ends — a result line (a status the ledger takes or one it does
not), the stream cut at any line, a signal (SIGINT or SIGTERM) to the real `ledger report`
process at any line (left resumable, or ``--on-interrupt fail|cancel``), or a batch ended with
``--no-finalize``; and then nothing, a ``--resume`` batch with the rest of the lines, the rest
reported again without ``--resume``, the watchdog (a short stall limit of its own: the view of
stalled runs must list the run and the watchdog's pass fail it), or a cancel (`PUT …/terminal`,
or `ledger cancel` once it exists). Failed steps, optional fields left out and lines naming steps
outside the contract come up among the lines. `test_failure_story` plays the named stories of
`tests.oracle.failure_examples` (each reproduction of a false story the faces once told) besides.

The lines go through `ledger report` subprocesses into a real service (uvicorn in a thread) on a
database of the oracle's own. Then the reference model (`tests.oracle.failure_model`, written from
the documents) says what the final record is — the run's terminal status and error, each step's
state, whether it has a reason and its counts, the step totals, the events' types in order — and
every face (`tests.oracle.faces`: the run, its events and its run-list row over HTTP, `ledger run
--json`, `ledger events --json` and `ledger runs --json`, the SQL views and the event log, the
dashboard's data) must equal it, and each other. `ledger report`'s exit codes are the documented
ones, and an interrupted reporter's line names the command that continues the run.

A failure is an exception named after what differs (the model or another face, and which part),
so Hypothesis shrinks each kind on its own; its message names the face and shows both sides.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.cli import app as cli_app
from ledger.cli import report as report_cli
from ledger.db import Database
from ledger.runlog.watchdog import Watchdog
from tests.oracle.faces import PARTS, FaceUnreadable, Record, cli_env, ledger_command, read_faces
from tests.oracle.failure_examples import STORIES
from tests.oracle.failure_model import (
    CANCEL_ERROR,
    Expected,
    FailureScenario,
    events_match,
    expected,
    modelled,
    optional_events,
    signal_marker,
)
from tests.oracle.failure_strategies import failure_scenarios
from tests.oracle.profiles import background_random, budget, tally, timeout
from tests.oracle.services import LoopThread, ServiceThread

REPORT_TIMEOUT_S = 120.0
# The watchdog's limit in the scenarios that call it (the run is idle that long in a moment).
WATCHDOG_STALL_S = 0.5
STALLED_SQL = "SELECT 1 FROM ledger.stalled_runs WHERE run_id = %s"
LANDED_SQL = "SELECT 1 FROM ledger.run_events WHERE run_id = %s AND type = 'log' AND payload ->> 'line' = %s"
LANDED_TIMEOUT_S = 60.0

# `ledger cancel` is drawn beside `PUT …/terminal` once the CLI has it (with a reason to give).
_CANCEL = cli_app.cli.commands.get("cancel")
CANCEL_REASON_OPTION = next(
    (
        opt
        for param in (_CANCEL.params if _CANCEL else [])
        for opt in param.opts
        if opt in ("--reason", "--error")
    ),
    None,
)
CANCEL_VIA = ("http", "cli") if CANCEL_REASON_OPTION else ("http",)
# `--on-interrupt fail|cancel` is drawn once the command has it.
ON_INTERRUPT = any("--on-interrupt" in option.opts for option in report_cli.report_command.params)


# -- what a failure says ----------------------------------------------------------------------------


class FailureOracleError(AssertionError):
    """A face does not tell the story the documents tell (one subclass per kind of difference)."""


class ReportExitDiffers(FailureOracleError):
    pass


class InterruptUnexplained(FailureOracleError):
    pass


class WatchdogDisagrees(FailureOracleError):
    pass


class CancelRefused(FailureOracleError):
    pass


class FaceMissing(FailureOracleError):
    """A face does not show the run at all."""


class HarnessStuck(FailureOracleError):
    """`ledger report` did not land the lines it was given, or did not exit."""


class ModelTerminalDiffers(FailureOracleError):
    pass


class ModelStepsDiffer(FailureOracleError):
    pass


class ModelTotalsDiffer(FailureOracleError):
    pass


class ModelEventsDiffer(FailureOracleError):
    pass


class FacesTerminalDiffer(FailureOracleError):
    pass


class FacesStepsDiffer(FailureOracleError):
    pass


class FacesTotalsDiffer(FailureOracleError):
    pass


class FacesEventsDiffer(FailureOracleError):
    pass


class EventLogBroken(FailureOracleError):
    pass


MODEL_MISMATCH = {
    "terminal": ModelTerminalDiffers,
    "steps": ModelStepsDiffer,
    "totals": ModelTotalsDiffer,
    "events": ModelEventsDiffer,
}
FACES_MISMATCH = {
    "terminal": FacesTerminalDiffer,
    "steps": FacesStepsDiffer,
    "totals": FacesTotalsDiffer,
    "events": FacesEventsDiffer,
}


# -- playing a scenario -----------------------------------------------------------------------------


class Player:
    """Runs one scenario through real `ledger report` processes into the service."""

    def __init__(self, loop_thread: LoopThread, service: ServiceThread, db: Database, workdir: Path) -> None:
        self.loop_thread, self.service, self.db, self.workdir = loop_thread, service, db, workdir
        self.env = cli_env(service.base_url, service.token)
        self.exits: list[int] = []
        self.said: list[str] = []
        self.stderrs: list[str] = []

    def report(
        self,
        run_id: str,
        contract: Path,
        lines: list[dict[str, Any]],
        result: dict[str, Any] | None,
        *,
        resume: bool = False,
        no_finalize: bool = False,
        signal_name: str | None = None,
        on_interrupt: str | None = None,
        cancel_live: Callable[[], None] | None = None,
        then_lines: str = "",
    ) -> None:
        args = [
            *ledger_command(),
            "report",
            "--run-id",
            run_id,
            "--contract",
            str(contract),
            "--deadline",
            "30",
        ]
        if resume:
            args.append("--resume")
        if no_finalize:
            args.append("--no-finalize")
        if on_interrupt is not None:
            args += ["--on-interrupt", on_interrupt]
        text = "".join(json.dumps(line) + "\n" for line in lines)
        if result is not None:
            text += json.dumps(result) + "\n"
        with tempfile.TemporaryFile("w+", encoding="utf-8") as stderr:
            process = subprocess.Popen(
                args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr, env=self.env, text=True
            )
            try:
                assert process.stdin is not None
                if cancel_live is not None:
                    # Cancelled once the lines before the marker have landed; the runner writes on.
                    process.stdin.write(text)
                    process.stdin.flush()
                    self._wait_landed(run_id, signal_marker()["line"], process)
                    cancel_live()
                    with contextlib.suppress(BrokenPipeError):
                        process.stdin.write(then_lines)
                        process.stdin.close()
                elif signal_name is None:
                    # A reporter refused at once (exit 12, 4, ...) may stop reading early.
                    with contextlib.suppress(BrokenPipeError):
                        process.stdin.write(text)
                        process.stdin.close()
                else:
                    # The runner is still running: its stdout stays open. The signal comes once the
                    # last line it wrote (`signal_marker`) has landed, so the lines before it are read.
                    process.stdin.write(text)
                    process.stdin.flush()
                    self._wait_landed(run_id, signal_marker()["line"], process)
                    process.send_signal(getattr(signal, signal_name))
                code = process.wait(REPORT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise HarnessStuck(
                    f"ledger report ({' '.join(args[3:])}) did not exit in {REPORT_TIMEOUT_S} s"
                ) from None
            finally:
                if process.stdin is not None and not process.stdin.closed:
                    with contextlib.suppress(BrokenPipeError):
                        process.stdin.close()
            stderr.seek(0)
            said = stderr.read()
            self.stderrs.append(said)
            self.said.append(f"[{' '.join(args[3:])} → exit {code}] {said.strip()[:1500]}")
        self.exits.append(code)

    def _wait_landed(self, run_id: str, line: str, process: subprocess.Popen[str]) -> None:
        """Wait until the log line `line` is in the run's event log (the reporter read and uploaded
        every line before it)."""

        async def landed() -> bool:
            async with self.db.connection() as conn:
                cur = await conn.execute(LANDED_SQL, (run_id, line))
                return await cur.fetchone() is not None

        deadline = time.monotonic() + LANDED_TIMEOUT_S
        while not self.loop_thread.run(landed()):
            if process.poll() is not None:
                raise HarnessStuck(f"ledger report exited {process.returncode} before it was signalled")
            if time.monotonic() > deadline:
                raise HarnessStuck(f"the line {line!r} did not land within {LANDED_TIMEOUT_S} s")
            time.sleep(0.05)

    def watchdog(self, run_id: str) -> None:
        """The watchdog with a short stall limit of its own, recorded where the view of stalled
        runs reads it: once the view lists the run (it has been idle that long), one pass of the
        watchdog fails it — the view and the watchdog agree."""

        async def listed() -> bool:
            async with self.db.connection() as conn:
                cur = await conn.execute(STALLED_SQL, (run_id,))
                return await cur.fetchone() is not None

        async def one_pass() -> None:
            dog = Watchdog(self.db, stall_after_s=WATCHDOG_STALL_S, retention=None)
            await dog.record_stall_limit()
            deadline = time.monotonic() + LANDED_TIMEOUT_S
            while not await listed():
                if time.monotonic() > deadline:
                    raise WatchdogDisagrees(
                        f"ledger.stalled_runs did not list {run_id} within {LANDED_TIMEOUT_S} s under "
                        f"a stall limit of {WATCHDOG_STALL_S} s"
                    )
                await asyncio.sleep(0.05)
            failed = await dog.run_once()
            if run_id not in failed:
                raise WatchdogDisagrees(f"ledger.stalled_runs lists {run_id}; the watchdog failed {failed}")

        self.loop_thread.run(one_pass())

    def cancel(self, run_id: str, via: str) -> None:
        if via == "cli":
            assert CANCEL_REASON_OPTION is not None
            args = [*ledger_command(), "cancel", run_id, CANCEL_REASON_OPTION, CANCEL_ERROR]
            done = subprocess.run(
                args, env=self.env, capture_output=True, text=True, timeout=REPORT_TIMEOUT_S
            )
            self.said.append(f"[ledger cancel → exit {done.returncode}] {done.stderr.strip()[:500]}")
            if done.returncode != 0:
                raise CancelRefused(f"ledger cancel {run_id} exited {done.returncode}: {done.stderr.strip()}")
            return
        answer = httpx.put(
            f"{self.service.base_url}/v1/runs/{run_id}/terminal",
            json={"status": "cancelled", "error": CANCEL_ERROR},
            headers={"Authorization": f"Bearer {self.service.token}"},
            timeout=30,
        )
        answer.raise_for_status()

    def play(self, scenario: FailureScenario, run_id: str, cancel_via: str = "http") -> None:
        contract = self.workdir / f"{run_id}.contract.json"
        contract.write_text(
            json.dumps({"staticPipeline": {"substeps": list(scenario.contract)}}), encoding="utf-8"
        )
        first = scenario.first_batch
        if scenario.ending == "result":
            self.report(run_id, contract, first, scenario.result)
        elif scenario.ending == "cut":
            self.report(run_id, contract, first, None)
        elif scenario.ending == "cancel-live":
            rest = "".join(json.dumps(line) + "\n" for line in scenario.rest)
            if scenario.result is not None:
                rest += json.dumps(scenario.result) + "\n"
            self.report(
                run_id,
                contract,
                first,
                None,
                cancel_live=lambda: self.cancel(run_id, cancel_via),
                then_lines=rest,
            )
        elif scenario.ending == "signal":
            self.report(
                run_id, contract, first, None, signal_name=scenario.signal, on_interrupt=scenario.on_interrupt
            )
        else:
            self.report(run_id, contract, first, None, no_finalize=True)
        if scenario.then == "resume":
            self.report(run_id, contract, scenario.rest, scenario.result, resume=True)
        elif scenario.then == "watchdog":
            self.watchdog(run_id)
        elif scenario.then == "cancel":
            self.cancel(run_id, cancel_via)
        elif scenario.then == "again":
            self.report(run_id, contract, scenario.rest, scenario.result)


# -- comparing --------------------------------------------------------------------------------------


def _events_diff(want: list[Any], got: list[tuple[str, Any]], limit: int = 80) -> str:
    """The modelled events, wanted and stored, as a unified diff (``-`` model, ``+`` face; a group
    the documents leave unordered is shown sorted)."""
    flat = [e for item in want for e in (sorted(item, key=repr) if isinstance(item, frozenset) else [item])]
    lines = list(
        difflib.unified_diff(
            [repr(e) for e in flat], [repr(e) for e in got], "model", "face", lineterm="", n=2
        )
    )
    more = f"\n… {len(lines) - limit} more diff lines" if len(lines) > limit else ""
    return "\n" + "\n".join(lines[:limit]) + more


def _show(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True, default=repr)


SETTLEMENTS = ("step.completed", "step.failed", "step.cancelled", "step.skipped")


def event_problems(record: Record, signal_name: str | None) -> list[str]:
    """What a face's events say that its run or steps contradict: a settlement event's state and
    reason are the step's, the terminal event's status and error the run's, and an interruption
    names the signal."""
    problems = []
    last: dict[str, dict[str, Any]] = {}
    for event in record.events:
        kind = event["type"]
        if kind in SETTLEMENTS:
            state = kind.removeprefix("step.")
            if event.get("state") != state:
                problems.append(f"{kind} of {event.get('node_id')} carries state {event.get('state')!r}")
            last[str(event.get("node_id"))] = event
        elif kind == "terminal" and (
            event.get("status") != record.terminal_status or event.get("error") != record.terminal_error
        ):
            problems.append(
                f"the terminal event says {event.get('status')!r} / {event.get('error')!r}, the run "
                f"{record.terminal_status!r} / {record.terminal_error!r}"
            )
        elif kind == "reporter.interrupted" and (
            signal_name is None or signal_name not in str(event.get("signal")) or not event.get("reason")
        ):
            problems.append(
                f"reporter.interrupted says signal {event.get('signal')!r}, reason {event.get('reason')!r}"
            )
    for node, event in last.items():
        step = record.steps.get(node)
        if step is not None and (step["state"], step["reason"]) != (event.get("state"), event.get("reason")):
            problems.append(
                f"{node}: its last event says {event.get('state')!r} ({event.get('reason')!r}), the step "
                f"{step['state']!r} ({step['reason']!r})"
            )
    return problems


def model_problems(
    want: Expected, record: Record, optional: frozenset[str], scenario_signal: str | None = None
) -> dict[str, str]:
    """Where one face differs from the model, by part (empty: nowhere)."""
    problems: dict[str, str] = {}
    terminal = []
    if not want.status.holds(record.status):
        terminal.append(f"status {record.status!r}, want {want.status!r}")
    if record.terminal_status != want.terminal_status:
        terminal.append(f"terminal status {record.terminal_status!r}, want {want.terminal_status!r}")
    if not want.error.holds(record.terminal_error):
        terminal.append(f"terminal error {record.terminal_error!r}, want {want.error!r}")
    if terminal:
        problems["terminal"] = "; ".join(terminal)

    steps = []
    if set(record.steps) != set(want.steps):
        steps.append(f"steps {sorted(record.steps)}, want the contract's {sorted(want.steps)}")
    for node, step in want.steps.items():
        got = record.steps.get(node)
        if got is None:
            continue
        if got["state"] != step.state:
            steps.append(f"{node}: state {got['state']!r}, want {step.state!r}")
        if not step.reason.holds(got["reason"]):
            steps.append(f"{node}: reason {got['reason']!r}, want {step.reason!r}")
        for key in ("completed", "failed", "total"):
            pin = getattr(step, key)
            if not pin.holds(got[key]):
                steps.append(f"{node}: {key} {got[key]!r}, want {pin!r}")
    if steps:
        problems["steps"] = "; ".join(steps)

    if record.totals is not None and record.totals != want.totals():
        problems["totals"] = f"{record.totals}, want {want.totals()}"

    story: list[tuple[str, Any]] = []
    for event in record.events:
        kind = event["type"]
        if not modelled(kind, event.get("line")) or kind in optional:
            continue
        if kind == "log":
            key = event.get("line")
        elif kind == "terminal":
            key = event.get("status")
        elif kind.startswith("reporter."):
            key = None
        else:
            key = event.get("node_id")
        story.append((kind, key))
    consistency = event_problems(record, scenario_signal)
    if consistency:
        problems["events"] = "; ".join(consistency)
    elif not events_match(want.events, story):
        problems["events"] = _events_diff(want.events, story)
    return problems


def log_problems(record: Record) -> list[str]:
    seqs = [e["seq"] for e in record.events]
    problems = []
    if seqs != list(range(1, len(seqs) + 1)):
        problems.append(f"{record.face}: event seqs are not 1..{len(seqs)} in order")
    terminals = [i for i, e in enumerate(record.events) if e["type"] == "terminal"]
    if terminals and terminals != [len(record.events) - 1]:
        problems.append(f"{record.face}: terminal events at {terminals} of {len(record.events)}")
    return problems


def check(scenario: FailureScenario, player: Player, cancel_via: str = "http") -> None:
    run_id = f"failure-{uuid.uuid4().hex[:12]}"
    player.play(scenario, run_id, cancel_via)
    context = f"run {run_id}\n{scenario.describe()}\nledger report said:\n" + "\n".join(player.said)

    want = expected(scenario)
    got_exits = player.exits
    if len(got_exits) != len(want.exits) or not all(
        p.holds(c) for p, c in zip(want.exits, got_exits, strict=False)
    ):
        raise ReportExitDiffers(f"ledger report exited {got_exits}, want {want.exits}\n{context}")

    if scenario.ending == "signal" and scenario.on_interrupt in (None, "resumable"):
        # One line says what happened and the exact command that continues the run.
        said = player.stderrs[0]
        if "--resume" not in said or run_id not in said:
            raise InterruptUnexplained(f"the interrupted reporter said {said!r}\n{context}")
    try:
        records = player.loop_thread.run(
            read_faces(player.service.base_url, player.service.token, player.db, run_id)
        )
    except (FaceUnreadable, httpx.HTTPError, TimeoutError) as exc:
        raise FaceMissing(f"{type(exc).__name__}: {exc}\n{context}") from exc
    optional = optional_events(scenario)
    for record in records:
        broken = log_problems(record)
        if broken:
            raise EventLogBroken(f"{broken}\n{context}")
    for record in records:
        problems = model_problems(want, record, optional, scenario.signal)
        if problems:
            part = next(p for p in PARTS if p in problems)
            raise MODEL_MISMATCH[part](
                f"the {record.face} face differs from the model in {part}: {problems[part]}\n{context}"
            )
    reference = records[0]
    for record in records[1:]:
        for part in PARTS:
            mine, theirs = reference.part(part), record.part(part)
            if mine is not None and theirs is not None and mine != theirs:
                raise FACES_MISMATCH[part](
                    f"the {record.face} face differs from the {reference.face} face in {part}:\n"
                    f"{reference.face}: {_show(mine)}\n{record.face}: {_show(theirs)}\n{context}"
                )


# -- the property -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def failure_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("failure-oracle")


def play_and_check(
    loop_thread: LoopThread,
    service: ServiceThread,
    db: Database,
    workdir: Path,
    scenario: FailureScenario,
    cancel_via: str,
) -> None:
    player = Player(loop_thread, service, db, workdir)
    try:
        check(scenario, player, cancel_via)
    except FailureOracleError as failure:
        if not tally("failures", scenario, failure):
            raise
    else:
        tally("failures", scenario, None)


# Each story of `tests.oracle.failure_examples` once, by name (a story whose fix has not landed
# can be marked on its own).
# Stories whose fix has not landed yet, each with why. Strict: a story listed here fails on every
# run; one that fails only on some (when the machine is slow, say) passes or fails by luck and
# needs a deterministic reproduction before it can be listed.
KNOWN_FAILURES: dict[str, str] = {}
STORY_PARAMS = [
    pytest.param(
        name,
        id=name,
        marks=[pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[name])] if name in KNOWN_FAILURES else [],
    )
    for name in STORIES
]


@pytest.mark.parametrize("story", STORY_PARAMS)
def test_failure_story(
    loop_thread: LoopThread,
    failure_service: ServiceThread,
    failure_db: Database,
    failure_workdir: Path,
    story: str,
) -> None:
    if STORIES[story].on_interrupt in ("fail", "cancel") and not ON_INTERRUPT:
        pytest.fail("ledger report has no --on-interrupt option")
    play_and_check(loop_thread, failure_service, failure_db, failure_workdir, STORIES[story], "http")


@timeout
@background_random
@budget("failures")
@given(scenario=failure_scenarios(on_interrupt=ON_INTERRUPT), cancel_via=st.sampled_from(CANCEL_VIA))
def test_failure_oracle(
    loop_thread: LoopThread,
    failure_service: ServiceThread,
    failure_db: Database,
    failure_workdir: Path,
    scenario: FailureScenario,
    cancel_via: str,
) -> None:
    play_and_check(loop_thread, failure_service, failure_db, failure_workdir, scenario, cancel_via)
