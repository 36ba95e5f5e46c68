"""The seam between the reporter and the ledger.

A transport delivers one status upload and reads the run's terminal truth (sheet row outcomes and
durable node observations), which finalize reconciles the reporter's counts with. The reporter
never knows whether that happens over HTTP (`reporter.transports.http`) or in process
(`ledger.reporting.direct`, re-exported as `reporter.DirectTransport`).

A transport raises the library's errors (`ledger.errors`): a `LedgerError` when the ledger refused
(nothing was applied, and the same request fails again: `StaleAttempt`, `RunTerminal`,
`PayloadTooLarge` with the limit, ...), a `LedgerUnavailable` when the outcome is unknown (the
ledger may or may not have applied it, and trying again may work).

Retrying is the transport's, by the ledger's one policy (`ledger.client.RetryPolicy`): the
reporter passes its deadline down (`Transport.deadline`) and keeps no loop of its own, so nothing
retries around a retry. Over HTTP the client retries each request; a transport without a client
(in process, a test double) retries its calls with `DeadlineRetries`, the same policy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol, TypeVar

from ledger.client import RetryPolicy

__all__ = [
    "DeadlineRetries",
    "Transport",
    "terminal_message",
]

_T = TypeVar("_T")


def terminal_message(run_id: str, terminal: dict[str, Any]) -> str:
    """How the run had ended, from its stored terminal state (its error says who, when anyone
    but a reporter ended it: the watchdog, a cancel)."""
    status = terminal.get("status") or "terminal"
    error = terminal.get("error")
    how = f": {error}" if error else ""
    return f"run {run_id} had already ended as {status}{how}"


class Transport(Protocol):
    """How the reporter reaches the ledger."""

    def deadline(self, seconds: float | None) -> AbstractContextManager[None]:
        """Within the block, a call whose outcome is unknown (`LedgerUnavailable`) is tried again
        until `seconds` from now (None: until it succeeds or is refused), never past it; outside
        one, by the transport's own budget. What the reporter must land, it lands in one."""
        ...

    async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Deliver one status upload; return the ledger's answer. Raises a `LedgerFailure`.

        When the transport delivered the request more than once (its own retry after a lost
        answer), the answer carries ``redelivered: True``: a ``duplicate`` answer is then its own.
        """
        ...

    async def run_state(self, run_id: str) -> dict[str, Any] | None:
        """The run as the ledger holds it (``producer_attempt``, ``last_upload_seq``,
        ``live_log_count``, ``live_node_progress``, ``terminal``), or None for an unknown run."""
        ...

    async def recent_log_lines(self, run_id: str, limit: int) -> list[str]:
        """The text of the run's last `limit` log lines, oldest first (empty for an unknown run)."""
        ...

    async def sheet_outcomes(self, run_id: str) -> list[dict[str, Any]]:
        """Per-namespace row outcomes ``[{table_namespace, completed, failed, total}]``."""
        ...

    async def node_observations(self, run_id: str) -> list[dict[str, Any]]:
        """The run's durable node observations (one per node invocation, the newest record kept)."""
        ...


class DeadlineRetries:
    """The retries of a transport without a client of its own: its calls by `policy` (by default
    one try), and within a `deadline` block until the deadline, however many tries that is."""

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.policy = RetryPolicy(max_attempts=1) if policy is None else policy
        self.sleep = sleep

    @contextmanager
    def deadline(self, seconds: float | None) -> Iterator[None]:
        policy = self.policy
        self.policy = policy.within(seconds)
        try:
            yield
        finally:
            self.policy = policy

    async def run(self, call: Callable[[], Awaitable[_T]]) -> tuple[_T, bool]:
        """What `call()` returns, and whether it took more than one try (a write may then have
        been applied by an earlier one: its answer may say "duplicate" of itself)."""
        tries = 0

        async def attempt() -> _T:
            nonlocal tries
            tries += 1
            return await call()

        return await self.policy.run(attempt, self.sleep), tries > 1
