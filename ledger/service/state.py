"""What the endpoints share: the library objects of this process and the drain signal."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
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
        # The tasks racing now, and those of them `start` has cancelled.
        self._racing: set[asyncio.Task[Any]] = set()
        self._cancelled: set[asyncio.Task[Any]] = set()

    @property
    def draining(self) -> bool:
        return self.event.is_set()

    def start(self) -> None:
        self.event.set()
        # Every race under way gives way: its work is cancelled (on the loop's next turn, so work
        # already scheduled starts first and sees its cancellation), the race answers (False, None).
        loop = asyncio.get_running_loop()
        for task in list(self._racing):
            loop.call_soon(self._cancel, task)

    def _cancel(self, task: asyncio.Task[Any]) -> None:
        # Only a task still in its race: one that has left it is doing something else by now.
        if task in self._racing and task not in self._cancelled:
            self._cancelled.add(task)
            task.cancel()

    async def race(self, work: Coroutine[Any, Any, _T]) -> tuple[bool, _T | None]:
        """Run `work` until it finishes or draining starts: `(True, result)` or `(False, None)`.

        The work is awaited by the caller's own task, which `start` cancels while it races (no
        task per race, nor one watching: a thousand long-polls woken at once each answer a task
        step sooner, and each tail's wait costs no task of its own)."""
        task = asyncio.current_task()
        if self.draining or task is None:
            work.close()
            return False, None
        self._racing.add(task)
        try:
            return True, await work
        except asyncio.CancelledError:
            # Cancelled by `start`, and not by our own caller going away too: give way.
            if task in self._cancelled:
                self._cancelled.discard(task)
                if task.uncancel() == 0:
                    return False, None
            raise
        finally:
            self._racing.discard(task)
            if task in self._cancelled:
                # The work finished in spite of the cancellation: it is not pending any more.
                self._cancelled.discard(task)
                task.uncancel()


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
