"""The direct transport: the ledger's operations called in process, on a `ledger.db.Database`.

For a worker that runs next to the ledger (and for tests against the real ledger without a
server). Uploads go through ``ledger.ingest.store.apply_status_upload``, imported lazily so that the
reporter package itself never needs the ledger's database stack. Ledger errors become transport
errors: `ledger.errors.StaleAttempt` → `StaleAttemptError`, a run already terminal →
`RunTerminalError`, other ledger errors → `UploadRejected`; a lost or unreachable database (the
outcome of the call is then unknown) → `TransportError`, which the reporter retries. The transport
itself never retries.

Sheet outcomes and node observations are read by two injectable async readers (``run_id`` →
list of dicts); by default they come from the ledger's own read functions (`ledger.ingest.sheets`,
`ledger.ingest.observations`), where "unknown run" means "nothing recorded": an empty list.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from reporter.transports.protocol import (
    RunTerminalError,
    StaleAttemptError,
    TransportError,
    UploadRejected,
    terminal_message,
)

if TYPE_CHECKING:
    from ledger.db import Database

Reader = Callable[[str], Awaitable[list[dict[str, Any]]]]


class DirectTransport:
    """`Transport` that calls the ledger in this process."""

    def __init__(
        self,
        db: Database,
        *,
        sheet_reader: Reader | None = None,
        observation_reader: Reader | None = None,
    ) -> None:
        self.db = db
        self._sheet_reader = sheet_reader
        self._observation_reader = observation_reader

    async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
        from ledger.ingest.store import apply_status_upload

        run_id = str(payload["run_id"])
        async with _ledger_errors(run_id):
            return dict(await apply_status_upload(self.db, run_id, payload))
        raise AssertionError("unreachable: _ledger_errors re-raises")  # pragma: no cover

    async def run_state(self, run_id: str) -> dict[str, Any] | None:
        from ledger.errors import NotFound
        from ledger.runlog.store import RunLog

        async with _ledger_errors(run_id):
            try:
                return dict(await RunLog(self.db).get_run(run_id))
            except NotFound:
                return None
        raise AssertionError("unreachable: _ledger_errors re-raises")  # pragma: no cover

    async def recent_log_lines(self, run_id: str, limit: int) -> list[str]:
        from ledger.errors import NotFound
        from ledger.runlog.store import RunLog

        async with _ledger_errors(run_id):
            try:
                return await RunLog(self.db).recent_log_lines(run_id, limit)
            except NotFound:
                return []
        raise AssertionError("unreachable: _ledger_errors re-raises")  # pragma: no cover

    async def sheet_outcomes(self, run_id: str) -> list[dict[str, Any]]:
        async with _ledger_errors(run_id):
            if self._sheet_reader is not None:
                return await self._sheet_reader(run_id)
            return await _default_sheet_outcomes(self.db, run_id)
        raise AssertionError("unreachable: _ledger_errors re-raises")  # pragma: no cover

    async def node_observations(self, run_id: str) -> list[dict[str, Any]]:
        async with _ledger_errors(run_id):
            if self._observation_reader is not None:
                return await self._observation_reader(run_id)
            return await _default_node_observations(self.db, run_id)
        raise AssertionError("unreachable: _ledger_errors re-raises")  # pragma: no cover


@asynccontextmanager
async def _ledger_errors(run_id: str) -> AsyncIterator[None]:
    """The ledger's errors as transport errors (see the module docstring)."""
    from ledger.db import DB_FAULTS
    from ledger.errors import LedgerError, RunTerminal, StaleAttempt

    try:
        yield
    except StaleAttempt as exc:
        raise StaleAttemptError(exc.message) from exc
    except RunTerminal as exc:
        raise RunTerminalError(terminal_message(run_id, exc.terminal), exc.terminal) from exc
    except LedgerError as exc:
        raise UploadRejected(422, exc.message) from exc
    except DB_FAULTS as exc:
        raise TransportError(f"the ledger's database is unreachable: {exc}") from exc


async def _default_sheet_outcomes(db: Database, run_id: str) -> list[dict[str, Any]]:
    from ledger.errors import NotFound
    from ledger.ingest.sheets import sheet_outcomes

    try:
        return [dict(outcome) for outcome in await sheet_outcomes(db, run_id)]
    except NotFound:
        return []  # no rows recorded for the run: nothing to reconcile from


async def _default_node_observations(db: Database, run_id: str) -> list[dict[str, Any]]:
    from ledger.errors import NotFound
    from ledger.ingest.observations import list_observations

    try:
        return [dict(observation) for observation in await list_observations(db, run_id)]
    except NotFound:
        return []
