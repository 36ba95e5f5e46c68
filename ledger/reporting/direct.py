"""The direct transport: the ledger's operations called in process, on a `ledger.db.Database`.

For a worker that runs next to the ledger (and for tests against the real ledger without a
server). Uploads go through `ledger.ingest.store.apply_status_upload`; the errors are the
library's own, as the HTTP transport raises them: a refusal is a `LedgerError` (`StaleAttempt`,
`RunTerminal`, ...), a lost or unreachable database (the outcome of the call is then unknown) a
`DatabaseUnavailable` (the stores translate the driver's errors). Within the reporter's
`deadline` block a call is tried again after one until the deadline, by the ledger's one retry
policy (`reporter.transports.protocol.DeadlineRetries`); outside one, once. `upload_once` is one
delivery, without retries.

Sheet outcomes and node observations are read by two injectable async readers (``run_id`` →
list of dicts); by default they come from the ledger's own read functions (`ledger.ingest.sheets`,
`ledger.ingest.observations`), where "unknown run" means "nothing recorded": an empty list.

It is `reporter.DirectTransport` too (a lazy re-export): the reporter package itself never
imports the ledger's database stack.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from ledger.client import RetryPolicy
from ledger.db import Database
from ledger.errors import NotFound
from ledger.ingest.observations import list_observations
from ledger.ingest.sheets import sheet_outcomes
from ledger.ingest.store import apply_status_upload
from ledger.runlog.events import validate_run_id
from ledger.runlog.store import RunLog
from reporter.transports.protocol import DeadlineRetries

__all__ = [
    "DirectTransport",
]

_Reader = Callable[[str], Awaitable[list[dict[str, Any]]]]
_T = TypeVar("_T")


class DirectTransport:
    """`reporter.transports.protocol.Transport` that calls the ledger in this process."""

    def __init__(
        self,
        db: Database,
        *,
        sheet_reader: _Reader | None = None,
        observation_reader: _Reader | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.db = db
        self._sheet_reader = sheet_reader
        self._observation_reader = observation_reader
        self.retries = DeadlineRetries(retry, sleep)

    def deadline(self, seconds: float | None) -> AbstractContextManager[None]:
        return self.retries.deadline(seconds)

    async def _retried(self, call: Callable[[], Awaitable[_T]]) -> _T:
        answer, _ = await self.retries.run(call)
        return answer

    async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
        answer, again = await self.retries.run(lambda: self.upload_once(payload))
        # The seam's word for an answer that came after a retry (`Transport.upload`).
        return {**answer, "redelivered": True} if again else answer

    async def upload_once(self, payload: dict[str, Any]) -> dict[str, Any]:
        """One delivery of the upload, without retries."""
        # The run id enters here: checked once, then trusted by the store (`RunId`).
        run_id = validate_run_id(payload["run_id"])
        return dict(await apply_status_upload(self.db, run_id, payload))

    async def run_state(self, run_id: str) -> dict[str, Any] | None:
        return await self._retried(lambda: self._run_state(run_id))

    async def recent_log_lines(self, run_id: str, limit: int) -> list[str]:
        return await self._retried(lambda: self._recent_log_lines(run_id, limit))

    async def sheet_outcomes(self, run_id: str) -> list[dict[str, Any]]:
        return await self._retried(lambda: self._sheet_outcomes(run_id))

    async def node_observations(self, run_id: str) -> list[dict[str, Any]]:
        return await self._retried(lambda: self._node_observations(run_id))

    async def _run_state(self, run_id: str) -> dict[str, Any] | None:
        try:
            return dict(await RunLog(self.db).get_run(run_id))
        except NotFound:
            return None

    async def _recent_log_lines(self, run_id: str, limit: int) -> list[str]:
        try:
            return await RunLog(self.db).recent_log_lines(run_id, limit)
        except NotFound:
            return []

    async def _sheet_outcomes(self, run_id: str) -> list[dict[str, Any]]:
        if self._sheet_reader is not None:
            return await self._sheet_reader(run_id)
        try:
            return [dict(outcome) for outcome in await sheet_outcomes(self.db, run_id)]
        except NotFound:
            return []  # no rows recorded for the run: nothing to reconcile from

    async def _node_observations(self, run_id: str) -> list[dict[str, Any]]:
        if self._observation_reader is not None:
            return await self._observation_reader(run_id)
        try:
            return [dict(observation) for observation in await list_observations(self.db, run_id)]
        except NotFound:
            return []
