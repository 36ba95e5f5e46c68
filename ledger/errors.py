"""The ledger's errors. Each says what is wrong in one sentence a client can show as is.

The HTTP layer maps them by class: `InvalidInput` 422 (400 for unparseable bodies), `NotFound` 404,
`Conflict` 409 (`StaleAttempt` and `RunTerminal` are ones), `CursorExpired` 410, `PayloadTooLarge` 413.
"""

from __future__ import annotations

from typing import Any

# The two that input checks raise live with the checks, which the reporter imports on its own.
from ledger.validate import InvalidInput, LedgerError


class NotFound(LedgerError):
    """The named run (or other object) does not exist."""


class Conflict(LedgerError):
    """The request contradicts the stored state (e.g. a different terminal state is already set)."""


class StaleAttempt(Conflict):
    """An upload from a producer attempt older than the run's current one; the producer must stop."""

    def __init__(self, run_id: str, attempt: int, current: int) -> None:
        super().__init__(
            f"stale producer attempt {attempt} for run {run_id!r}: the run is on attempt {current}"
        )
        self.attempt = attempt
        self.current = current


class RunTerminal(Conflict):
    """The run already ended, and the request would change that: append events to it, or end it
    differently. `terminal` is the stored terminal state (status, error, completed_at, ...), so a
    client can say who ended the run and how."""

    def __init__(self, message: str, run_id: str, terminal: dict[str, Any]) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.terminal = terminal


class CursorExpired(LedgerError):
    """The read cursor points before the oldest retained event; `first_seq` says where to resume."""

    def __init__(self, run_id: str, after: int, first_seq: int) -> None:
        super().__init__(
            f"cursor after={after} of run {run_id!r} is older than the retained events "
            f"(first_seq={first_seq})"
        )
        self.first_seq = first_seq


class PayloadTooLarge(LedgerError):
    """The request body is larger than the configured limit."""


__all__ = [
    "Conflict",
    "CursorExpired",
    "InvalidInput",
    "LedgerError",
    "NotFound",
    "PayloadTooLarge",
    "RunTerminal",
    "StaleAttempt",
]
