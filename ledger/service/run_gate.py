"""One write per run at a time in this process, so a run whose row is locked cannot starve the pool.

Writes to one run serialize on its row lock in Postgres anyway. Without this gate, every concurrent
write to a run someone holds locked (a stuck transaction, a slow maintenance job) would take a
pooled connection and sit on it for the whole lock timeout; ten such writes take the whole pool and
unrelated requests wait. With it, one of them holds a connection and the others wait here, holding
none, for at most `wait_s` (the lock timeout: no longer than they would have waited on the lock),
then get 503 with `Retry-After`. Reads never pass through the gate.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from urllib.parse import unquote

from starlette.types import ASGIApp, Receive, Scope, Send

from ledger import tracing
from ledger.service.errors import RETRY_AFTER_S
from ledger.service.middleware import send_json_error

__all__ = [
    "RunWriteGate",
]

_RUN_WRITE_PATH = re.compile(r"^/v1/runs/([^/]+)/")
_READS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass
class _Slot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class RunWriteGate:
    """Let one write per run id through at a time; the others wait at most `wait_s`, then 503."""

    def __init__(self, app: ASGIApp, wait_s: float) -> None:
        self.app = app
        self.wait_s = wait_s
        self._slots: dict[str, _Slot] = {}
        self.refused = 0

    @staticmethod
    def run_id(scope: Scope) -> str | None:
        """The run a write request is for (None for reads and for paths naming no run)."""
        if scope["type"] != "http" or scope["method"] in _READS:
            return None
        match = _RUN_WRITE_PATH.match(scope["path"])
        return unquote(match.group(1)) if match else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        run_id = self.run_id(scope)
        if run_id is None:
            await self.app(scope, receive, send)
            return
        slot = self._slots.setdefault(run_id, _Slot())
        slot.users += 1
        try:
            try:
                if slot.lock.locked():
                    with tracing.span("run write gate wait", run_id=run_id):
                        async with asyncio.timeout(self.wait_s):
                            await slot.lock.acquire()
                else:
                    # Free: taken at once, without arming a timer for a wait that cannot happen.
                    await slot.lock.acquire()
            except TimeoutError:
                self.refused += 1
                await send_json_error(
                    send,
                    503,
                    f"run {run_id!r} is busy: another write to it has waited {self.wait_s:g} s "
                    "for its row lock; retry later",
                    headers=[(b"retry-after", str(RETRY_AFTER_S).encode())],
                    code="busy",
                )
                return
            try:
                await self.app(scope, receive, send)
            finally:
                slot.lock.release()
        finally:
            slot.users -= 1
            if slot.users == 0:
                del self._slots[run_id]
