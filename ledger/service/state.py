"""What the endpoints share: the library objects of this process and the drain signal."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import Request

from ledger.db import Database
from ledger.pool.store import WarmPool
from ledger.runlog.listener import Listener
from ledger.runlog.store import RunLog
from ledger.service.metrics import ServiceMetrics
from ledger.service.settings import ServiceSettings

__all__ = [
    "Drain",
    "Services",
    "services",
]

_T = TypeVar("_T")


class Drain:
    """Set when the server starts shutting down: waiting readers return at once instead of
    holding the shutdown up for their full timeout (their clients resume with the cursor)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self._racing: set[asyncio.Future[Any]] = set()

    @property
    def draining(self) -> bool:
        return self.event.is_set()

    def start(self) -> None:
        self.event.set()
        # Every race under way gives way: its work is cancelled (on the loop's next turn, so work
        # already scheduled starts first and sees its cancellation), the race answers (False, None).
        loop = asyncio.get_running_loop()
        for task in list(self._racing):
            loop.call_soon(task.cancel)

    async def race(self, work: Awaitable[_T]) -> tuple[bool, _T | None]:
        """Run `work` until it finishes or draining starts: `(True, result)` or `(False, None)`.

        The work is awaited directly (no watcher task per race): a thousand long-polls woken at
        once each resume one step sooner."""
        task = asyncio.ensure_future(work)
        if self.draining:
            task.cancel()
            return False, None
        self._racing.add(task)
        try:
            return True, await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            # Cancelled by `start`, not by our own caller going away: give way.
            if self.event.is_set() and task.cancelled() and (current is None or current.cancelling() == 0):
                return False, None
            raise
        finally:
            self._racing.discard(task)


@dataclass(kw_only=True)
class Services:
    """One per process, built by the lifespan; endpoints reach it through `services(request)`."""

    settings: ServiceSettings
    db: Database
    metrics: ServiceMetrics
    listener: Listener
    runlog: RunLog
    pool: WarmPool
    drain: Drain = field(default_factory=Drain)


# A coroutine: FastAPI runs a plain-function dependency in a worker thread, a thread hop on every
# request for an attribute lookup.
async def services(request: Request) -> Services:
    found = request.app.state.services
    assert isinstance(found, Services)
    return found
