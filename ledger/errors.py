"""Every error the ledger raises, in the library, the service and the HTTP client alike.

Two families, so a caller can tell "fix the request" from "try again later":

- `LedgerError` and its subclasses: the request is wrong or contradicts the stored state; sending
  it again unchanged fails the same way. Each message is one sentence a client can show as is.
  Over HTTP each has its status: `InvalidInput` 422 (400 for unparseable bodies), `Unauthorized`
  401/403, `NotFound` 404, `Conflict` 409 (`StaleAttempt` and `RunTerminal` are ones, told apart
  by the answer's `code`), `CursorExpired` 410, `PayloadTooLarge` 413. `ledger.client` raises the
  same classes for those statuses.
- `LedgerUnavailable` (the service cannot be reached, or answered 503 with `Retry-After`) and
  `DatabaseUnavailable` (Postgres cannot be reached): a fault of the infrastructure, not of the
  request; retrying later may succeed. They are not `LedgerError`s, so `except LedgerError`
  never swallows an outage as if the request had been refused.

`ConfigError` (the environment is unusable) stands apart: nothing is sent or stored.
"""

from __future__ import annotations

from typing import Any

# The two that input checks raise live with the checks, which the reporter imports on its own.
from ledger.validate import InvalidInput, LedgerError


class ConfigError(Exception):
    """The configuration (environment) is unusable; the message is one line for a person."""


class NotFound(LedgerError):
    """The named run (or other object) does not exist."""


class Unauthorized(LedgerError):
    """The service refused the bearer token (missing, unknown, or not allowed this request).

    `status` is 401 (no acceptable token) or 403 (a valid token outside its scope); `code` the
    answer's (`unauthorized`, `token_expired`, `forbidden`) when a client learned it over HTTP."""

    def __init__(self, message: str, *, status: int = 401, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class Conflict(LedgerError):
    """The request contradicts the stored state (e.g. a different terminal state is already set)."""


class StaleAttempt(Conflict):
    """An upload from a producer attempt older than the run's current one; the producer must stop.

    `current` is the run's producer attempt; `attempt` the refused one (None when a client only
    learned of the refusal from the service's answer)."""

    def __init__(self, run_id: str, attempt: int | None, current: int, message: str | None = None) -> None:
        super().__init__(
            message or f"stale producer attempt {attempt} for run {run_id!r}: the run is on attempt {current}"
        )
        self.run_id = run_id
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


class InstanceMapped(Conflict):
    """The instance is already placed: it serves another live run (mapped, not expired, not
    ended), or it is a live entry of a pool. An instance runs one run at a time and waits in one
    pool at a time, and only a claim takes it from a pool to a run; a second place would hand one
    worker two runs. `reason` says which place holds it."""

    def __init__(self, instance_id: str, reason: str = "is mapped to another live run") -> None:
        super().__init__(f"instance {instance_id!r} {reason}")
        self.instance_id = instance_id


class CursorExpired(LedgerError):
    """The read cursor points before the oldest retained event; `first_seq` says where to resume."""

    def __init__(self, run_id: str, after: int | None, first_seq: int, message: str | None = None) -> None:
        super().__init__(
            message
            or f"cursor after={after} of run {run_id!r} is older than the retained events "
            f"(first_seq={first_seq})"
        )
        self.run_id = run_id
        self.first_seq = first_seq


class PayloadTooLarge(LedgerError):
    """The request body is larger than the configured limit."""


class LedgerUnavailable(Exception):
    """The ledger service cannot be reached, or answered that it cannot serve now (503).

    `retry_after` is the service's `Retry-After` in seconds, None when it gave none (or never
    answered)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class DatabaseUnavailable(LedgerUnavailable):
    """Postgres could not be reached; the message says where it was looked for."""


__all__ = [
    "ConfigError",
    "Conflict",
    "CursorExpired",
    "DatabaseUnavailable",
    "InstanceMapped",
    "InvalidInput",
    "LedgerError",
    "LedgerUnavailable",
    "NotFound",
    "PayloadTooLarge",
    "RunTerminal",
    "StaleAttempt",
    "Unauthorized",
]
