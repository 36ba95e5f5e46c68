"""What the endpoints share: the library objects of this process and the drain signal."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

from fastapi import Request

from ledger.db import Database
from ledger.pool.store import WarmPool
from ledger.runlog.listener import Listener
from ledger.runlog.store import RunLog
from ledger.service.metrics import ServiceMetrics
from ledger.service.settings import ServiceSettings

T = TypeVar("T")


class Drain:
    """Set when the server starts shutting down: waiting readers return at once instead of
    holding the shutdown up for their full timeout (their clients resume with the cursor)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    @property
    def draining(self) -> bool:
        return self.event.is_set()

    def start(self) -> None:
        self.event.set()

    async def race(self, work: Awaitable[T]) -> tuple[bool, T | None]:
        """Run `work` until it finishes or draining starts: `(True, result)` or `(False, None)`."""
        task = asyncio.ensure_future(work)
        if self.draining:
            task.cancel()
            return False, None
        stopper = asyncio.ensure_future(self.event.wait())
        try:
            done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        finally:
            stopper.cancel()
        if task in done:
            return True, task.result()
        task.cancel()
        return False, None


@dataclass
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
