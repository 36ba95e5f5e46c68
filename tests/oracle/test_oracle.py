"""End-to-end truth: for any runner stream and any fault, the ledger ends with what happened.

Each example plays one drawn `Scenario` twice into the same real ledger, on two fresh run ids:

1. the **oracle** — the same stream through one reporter with no faults (for successive attempts:
   the same attempts, no faults), flushed at the same points;
2. the **faulty run** — batched as drawn (the same attempt resumed, or successive attempts), with
   the drawn faults at the transport (requests lost before the ledger, answers lost after commit,
   duplicates, bursts of 503) and disruptions (the service or Postgres restarted, or down while an
   upload is being tried).

The run without faults must end as the runner protocol says (`tests.oracle.contract`: the result
status, settled steps, log lines within their bound). The ledger's final state of the faulty run
must then *equal* the oracle's in the compared
projection (`tests.oracle.projection`): terminal status, each step's outcome and final counts, the
log lines in order (gaps as their missing lines), the dataset lifecycle events in order and the
newest observation per activity. Delivering some of the received uploads once more afterwards must
change nothing. A failure names the part that differs (its exception type) and shows the diff.

Three tests share the harness: the direct transport (most examples), the real service over HTTP
(service restarts and outages too), and a Postgres server of the test's own that is restarted for
real (marked ``own_postgres``).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.cli import report as report_cli
from tests.oracle.contract import contract_problems
from tests.oracle.faults import FaultPlan
from tests.oracle.harness import Backend, DirectBackend, HttpBackend, PlayLog, late_upload, play, redeliver
from tests.oracle.profiles import background_random, budget, tally, timeout
from tests.oracle.projection import differing_parts, read_projection, read_stored, render_diff
from tests.oracle.services import LoopThread
from tests.oracle.strategies import HTTP_DISRUPTIONS, POSTGRES_DISRUPTIONS, Scenario, live_lines, scenarios

EXAMPLE_TIMEOUT_S = 90.0


# -- what a failure says ----------------------------------------------------------------------------


class OracleFailure(AssertionError):
    """The faulty run's ledger state is not the oracle's (one subclass per projection part, so
    Hypothesis reports and shrinks each kind of failure on its own)."""


class TerminalDiffers(OracleFailure):
    pass


class StepsDiffer(OracleFailure):
    pass


class LogsDiffer(OracleFailure):
    pass


class LifecycleDiffers(OracleFailure):
    pass


class ActivitiesDiffer(OracleFailure):
    pass


class OracleRunFailed(OracleFailure):
    """The run without faults did not go through: junk got a run stuck without any fault."""


class ContractBroken(OracleFailure):
    """The run without faults ends other than the runner protocol says (`tests.oracle.contract`)."""


class FaultyRunFailed(OracleFailure):
    """The reporter gave up (or crashed) under faults it should have outlived."""


class InvariantBroken(OracleFailure):
    pass


class RedeliveryChanged(OracleFailure):
    pass


class EndedRunChanged(OracleFailure):
    """An ended run was changed, or reporting it again did not end as the contract says."""


MISMATCH: dict[str, type[OracleFailure]] = {
    "terminal": TerminalDiffers,
    "steps": StepsDiffer,
    "logs": LogsDiffer,
    "lifecycle": LifecycleDiffers,
    "activities": ActivitiesDiffer,
}


def _summary(scenario: Scenario, record: PlayLog | None) -> str:
    lines = [f"batching={scenario.batching} cuts={scenario.cuts} faults={scenario.faults}"]
    if record is not None:
        lines.append(
            f"faulty run: {record.uploads_received} uploads received, injected {record.injected}, "
            f"disruptions {record.disruptions_done}, reporters {record.reporters}"
        )
    return "\n".join(lines)


# -- one example ------------------------------------------------------------------------------------


async def check(scenario: Scenario, backend: Backend) -> None:
    tag = uuid.uuid4().hex[:12]
    oracle_id, faulty_id = f"oracle-{tag}", f"faulty-{tag}"

    try:
        oracle_record = await play(scenario.oracle(), oracle_id, backend)
    except Exception as exc:
        raise OracleRunFailed(f"the run without faults failed: {type(exc).__name__}: {exc}") from exc
    oracle, problems = await read_projection(backend.db, oracle_id)
    if problems:
        raise InvariantBroken(f"oracle run {oracle_id}: {problems}")
    broken = contract_problems(
        scenario.contract,
        scenario.result,
        live_lines(scenario.items),
        oracle,
        oracle_record.exit_code,
        # A new attempt starts from nothing: it cannot settle steps only an older one started.
        steps_settle=scenario.batching != "attempts",
    )
    if broken:
        raise ContractBroken(f"the run without faults ({oracle_id}) breaks the runner protocol: {broken}")
    if scenario.report_again and oracle["terminal"] is not None:
        await report_again(scenario, oracle_id, backend, oracle)

    plan = FaultPlan(scenario.faults)
    record: PlayLog | None = None
    try:
        record = await play(scenario, faulty_id, backend, plan=plan, disruptions=dict(scenario.disruptions))
    except Exception as exc:
        raise FaultyRunFailed(
            f"the faulty run failed: {type(exc).__name__}: {exc}\n"
            f"injected {dict(plan.injected)} over {plan.requests} upload requests"
        ) from exc
    faulty, problems = await read_projection(backend.db, faulty_id)
    if problems:
        raise InvariantBroken(f"faulty run {faulty_id}: {problems}\n{_summary(scenario, record)}")

    if record.exit_code != oracle_record.exit_code:
        raise TerminalDiffers(
            f"ledger report exited {record.exit_code}, without faults {oracle_record.exit_code}: "
            f"{record.warnings}\n{_summary(scenario, record)}"
        )
    parts = differing_parts(oracle, faulty)
    if parts:
        raise MISMATCH[parts[0]](
            f"the ledger differs from the oracle in {parts} (run {faulty_id} vs {oracle_id}; "
            f"- oracle, + faulty)\n{_summary(scenario, record)}\n{render_diff(oracle, faulty)}"
        )

    if scenario.redeliver:
        refused = await redeliver(backend, plan, scenario.redeliver)
        unexpected = [reason for reason in refused if not reason.startswith("StaleAttempt")]
        after, _ = await read_projection(backend.db, faulty_id)
        if unexpected or after != faulty:
            raise RedeliveryChanged(
                f"delivering received uploads again was refused ({unexpected}) or changed the ledger:\n"
                f"{render_diff(faulty, after)}"
            )
        if faulty["terminal"] is not None:
            stored = await read_stored(backend.db, faulty_id)
            refusal = await late_upload(backend, plan)
            after, _ = await read_projection(backend.db, faulty_id)
            stored_after = await read_stored(backend.db, faulty_id)
            if refusal is None or after != faulty or stored_after != stored:
                raise EndedRunChanged(
                    f"a later running upload to the ended run {faulty_id} was "
                    f"{'taken' if refusal is None else 'refused: ' + refusal}; "
                    f"{'its stored progress changed' if stored_after != stored else 'nothing stored changed'}"
                    f"\n{render_diff(faulty, after)}"
                )


async def report_again(scenario: Scenario, run_id: str, backend: Backend, ended: dict[str, Any]) -> None:
    """The whole stream reported once more to the run it ended: exit 4, saying so without an
    Idempotency-Key the runner never set, and nothing changes."""
    again = Scenario(scenario.contract, scenario.mode, scenario.items, scenario.result)
    try:
        record = await play(again, run_id, backend, exits=(report_cli.EXIT_TERMINAL,))
    except Exception as exc:
        raise EndedRunChanged(f"reporting the ended run {run_id} again: {type(exc).__name__}: {exc}") from exc
    after, _ = await read_projection(backend.db, run_id)
    if after != ended or any("Idempotency-Key" in warning for warning in record.warnings):
        raise EndedRunChanged(
            f"reporting the ended run {run_id} again said {record.warnings}; the ledger changed:\n"
            f"{render_diff(ended, after)}"
        )


def run_example(loop_thread: LoopThread, scenario: Scenario, backend: Backend) -> None:
    async def bounded() -> None:
        try:
            await asyncio.wait_for(check(scenario, backend), EXAMPLE_TIMEOUT_S)
        except TimeoutError:
            raise FaultyRunFailed(f"the example did not finish in {EXAMPLE_TIMEOUT_S} s") from None

    try:
        loop_thread.run(bounded())
    except OracleFailure as failure:
        if not tally(backend.name, scenario, failure):
            raise
    else:
        tally(backend.name, scenario, None)


# -- the properties ---------------------------------------------------------------------------------


@timeout
@background_random
@budget("direct")
@given(scenario=scenarios())
def test_oracle_direct(loop_thread: LoopThread, direct_backend: DirectBackend, scenario: Scenario) -> None:
    run_example(loop_thread, scenario, direct_backend)


# A restart that outlasts the service's 1 s shutdown grace (a request still open) closes the event
# loop under uvicorn's accepted sockets; they are closed by the garbage collector later, whose
# ResourceWarning would otherwise fail whichever example happens to be running then.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@timeout
@background_random
@budget("http")
@given(scenario=scenarios(disruption_kinds=HTTP_DISRUPTIONS, disruptions=(0, 2)))
def test_oracle_http(loop_thread: LoopThread, http_backend: HttpBackend, scenario: Scenario) -> None:
    run_example(loop_thread, scenario, http_backend)


@pytest.mark.own_postgres
# The HTTP test's accepted sockets (see above) may be collected while this test runs.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@timeout
@background_random
@budget("postgres_restart")
@given(
    scenario=scenarios(disruption_kinds=POSTGRES_DISRUPTIONS, disruptions=(1, 2)),
    transport=st.sampled_from(("direct", "http")),
)
def test_oracle_postgres_restart(
    loop_thread: LoopThread, restart_backends: dict[str, Backend], scenario: Scenario, transport: str
) -> None:
    run_example(loop_thread, scenario, restart_backends[transport])
