"""The ledger's errors. Each says what is wrong in one sentence a client can show as is.

The HTTP layer maps them by class: `InvalidInput` 422 (400 for unparseable bodies), `NotFound` 404,
`Conflict` 409 (`StaleAttempt` is one), `CursorExpired` 410, `PayloadTooLarge` 413.
"""

from __future__ import annotations


class LedgerError(Exception):
    """Base class: `message` is the client-facing text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(LedgerError):
    """A request field is missing, of the wrong type or out of range; nothing was written."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


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
