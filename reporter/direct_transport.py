"""The direct transport: the ledger's operations called in process, on a `ledger.db.Database`.

For a worker that runs next to the ledger (and for tests against the real ledger without a
server). Uploads go through ``ledger.ingest.apply_status_upload``, imported lazily so that the
reporter package itself never needs the ledger's database stack. Ledger errors become transport
errors: `ledger.errors.StaleAttempt` → `StaleAttemptError`, other ledger errors → `UploadRejected`.
There are no retries: an in-process call either worked or will fail the same way again.

Sheet outcomes and node observations are read by two injectable async readers (``run_id`` →
list of dicts); by default they come from the ledger's own read functions (`ledger.sheets`,
`ledger.observations`), where "unknown run" means "nothing recorded": an empty list.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from reporter.transport import StaleAttemptError, UploadRejected

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
        from ledger.errors import LedgerError, StaleAttempt
        from ledger.ingest import apply_status_upload

        try:
            return await apply_status_upload(self.db, str(payload["run_id"]), payload)
        except StaleAttempt as exc:
            raise StaleAttemptError(exc.message) from exc
        except LedgerError as exc:
            raise UploadRejected(422, exc.message) from exc

    async def sheet_outcomes(self, run_id: str) -> list[dict[str, Any]]:
        if self._sheet_reader is not None:
            return await self._sheet_reader(run_id)
        return await _default_sheet_outcomes(self.db, run_id)

    async def node_observations(self, run_id: str) -> list[dict[str, Any]]:
        if self._observation_reader is not None:
            return await self._observation_reader(run_id)
        return await _default_node_observations(self.db, run_id)


async def _default_sheet_outcomes(db: Database, run_id: str) -> list[dict[str, Any]]:
    from ledger.errors import NotFound
    from ledger.sheets import sheet_outcomes

    try:
        return await sheet_outcomes(db, run_id)
    except NotFound:
        return []  # no rows recorded for the run: nothing to reconcile from


async def _default_node_observations(db: Database, run_id: str) -> list[dict[str, Any]]:
    from ledger.errors import NotFound
    from ledger.observations import list_observations

    try:
        return await list_observations(db, run_id)
    except NotFound:
        return []
