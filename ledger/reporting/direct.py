"""The direct transport: the ledger's operations called in process, on a `ledger.db.Database`.

For a worker that runs next to the ledger (and for tests against the real ledger without a
server). Uploads go through `ledger.ingest.store.apply_status_upload`; the errors are the
library's own, as the HTTP transport raises them: a refusal is a `LedgerError` (`StaleAttempt`,
`RunTerminal`, ...), a lost or unreachable database (the outcome of the call is then unknown) a
`DatabaseUnavailable` (the stores translate the driver's errors), which the reporter retries. The
transport itself never retries.

Sheet outcomes and node observations are read by two injectable async readers (``run_id`` →
list of dicts); by default they come from the ledger's own read functions (`ledger.ingest.sheets`,
`ledger.ingest.observations`), where "unknown run" means "nothing recorded": an empty list.

It is `reporter.DirectTransport` too (a lazy re-export): the reporter package itself never
imports the ledger's database stack.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ledger.db import Database
from ledger.errors import NotFound
from ledger.ingest.observations import list_observations
from ledger.ingest.sheets import sheet_outcomes
from ledger.ingest.store import apply_status_upload
from ledger.runlog.store import RunLog

__all__ = [
    "DirectTransport",
]

_Reader = Callable[[str], Awaitable[list[dict[str, Any]]]]


class DirectTransport:
    """`reporter.transports.protocol.Transport` that calls the ledger in this process."""

    def __init__(
        self,
        db: Database,
        *,
        sheet_reader: _Reader | None = None,
        observation_reader: _Reader | None = None,
    ) -> None:
        self.db = db
        self._sheet_reader = sheet_reader
        self._observation_reader = observation_reader

    async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
        return dict(await apply_status_upload(self.db, str(payload["run_id"]), payload))

    async def run_state(self, run_id: str) -> dict[str, Any] | None:
        try:
            return dict(await RunLog(self.db).get_run(run_id))
        except NotFound:
            return None

    async def recent_log_lines(self, run_id: str, limit: int) -> list[str]:
        try:
            return await RunLog(self.db).recent_log_lines(run_id, limit)
        except NotFound:
            return []

    async def sheet_outcomes(self, run_id: str) -> list[dict[str, Any]]:
        if self._sheet_reader is not None:
            return await self._sheet_reader(run_id)
        try:
            return [dict(outcome) for outcome in await sheet_outcomes(self.db, run_id)]
        except NotFound:
            return []  # no rows recorded for the run: nothing to reconcile from

    async def node_observations(self, run_id: str) -> list[dict[str, Any]]:
        if self._observation_reader is not None:
            return await self._observation_reader(run_id)
        try:
            return [dict(observation) for observation in await list_observations(self.db, run_id)]
        except NotFound:
            return []
