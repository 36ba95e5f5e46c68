"""Every error the ledger raises, in the library, the service, the HTTP client and the reporter alike.

The tree::

    LedgerFailure                 a call to the ledger failed (catch this for "any failure")
     ├── LedgerError              refused: the request is wrong or contradicts the stored state
     │    ├── InvalidInput        a field is missing, of the wrong type or out of range
     │    ├── Unauthorized        the bearer token is missing, unknown or outside its scope
     │    │    └── TokenError     a minted token is not one of ours (malformed, bad signature)
     │    │         └── TokenExpired  it was ours, and its time is up
     │    ├── NotFound            the named run (or other object) does not exist
     │    ├── Conflict            the request contradicts the stored state
     │    │    ├── StaleAttempt   a newer producer attempt owns the run
     │    │    ├── RunTerminal    the run already ended
     │    │    ├── InstanceMapped the instance is already placed (a live run, or a pool)
     │    │    └── DuplicateUpload  another reporter already made this upload of the attempt
     │    ├── CursorExpired       the read cursor is older than the retained events
     │    ├── PayloadTooLarge     the request body is larger than the limit
     │    └── StreamRefused       a Durable Streams request the protocol refuses
     │         ├── BadStreamRequest  a header, offset or body the protocol does not take
     │         ├── StaleProducer     the producer's epoch is older than the stream's
     │         ├── StreamNotFound    no such stream (also a `NotFound`)
     │         ├── ReadOnlyStream    a run's event log, read as a stream, takes no writes
     │         ├── StreamConflict    the request contradicts the stream (also a `Conflict`)
     │         └── StreamGone        the stream was deleted (its forks still read it)
     └── LedgerUnavailable        not served: the service or its database cannot answer now
          └── DatabaseUnavailable Postgres cannot be reached
               └── HeldBySession  a maintenance step gave up waiting for a session (named)

    ConfigError                   the environment is unusable (nothing was sent or stored)
     └── SchemaMissing            the database has no ledger schema (not migrated)

The two families tell "fix the request" from "try again later":

- A `LedgerError`, sent again unchanged, fails the same way; nothing was written. Each message is
  one sentence a client can show as is.
- A `LedgerUnavailable` is a fault of the infrastructure, not of the request: the outcome of the
  call is unknown and retrying later may succeed. It is not a `LedgerError`, so
  `except LedgerError` never swallows an outage as if the request had been refused.

No error here carries an HTTP status: the service maps them to statuses at its edge
(`ledger.service.errors`). `ledger.client` raises these same classes for the service's answers
and keeps the status it received as data (`Unauthorized.status`, `LedgerUnavailable.status`).
Database driver errors never leave the stores: `ledger.db.Database` translates them once, where
a connection or transaction block ends, into `DatabaseUnavailable` (a lost connection, a timeout),
a `Conflict` (a constraint the stored rows hold), an `InvalidInput` (a value the database refuses)
or `SchemaMissing`, with the driver's error as the `__cause__`.

A `StreamRefused` carries the protocol's headers (`Producer-Epoch`, `Stream-Next-Offset`, ...) as
data, which the service sends with its answer.

`ConfigError` stands apart: it is raised before anything is sent or stored (a database without
the ledger's schema is one too).

This module imports nothing, so the worker side (`reporter`) shares it with the service.
"""

from __future__ import annotations

from typing import Any


class LedgerFailure(Exception):
    """A call to the ledger failed: refused (`LedgerError`) or not served (`LedgerUnavailable`).
    `message` is the text a person reads."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class LedgerError(LedgerFailure):
    """The ledger refused the request; nothing was written, and the same request fails again."""


class InvalidInput(LedgerError):
    """A request field is missing, of the wrong type or out of range; nothing was written."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class ConfigError(Exception):
    """The configuration (environment) is unusable; the message is one line for a person."""


class SchemaMissing(ConfigError):
    """The database has no ledger schema yet (it was never migrated)."""

    def __init__(self) -> None:
        super().__init__("the database has no ledger schema yet; run `ledger db upgrade` first")


class NotFound(LedgerError):
    """The named run (or other object) does not exist."""


class Unauthorized(LedgerError):
    """The service refused the bearer token (missing, unknown, or not allowed this request).

    `code` says which (`unauthorized`, `token_expired`, `forbidden`); `status` is the HTTP status
    `ledger.client` received (401: no acceptable token, 403: a valid token outside its scope),
    None when raised in process."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class TokenError(Unauthorized):
    """The token is not one of ours (malformed, unknown key id, bad signature)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="unauthorized")


class TokenExpired(TokenError):
    """The token was ours, and its time is up."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = "token_expired"


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


class DuplicateUpload(Conflict):
    """The ledger had already applied this `upload_seq` of the attempt from another reporter (one
    that ran before this one, which was not started with resume): this upload changed nothing."""


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
    """The request body is larger than the limit; `max_body_bytes` is the limit when known."""

    def __init__(self, message: str, max_body_bytes: int | None = None) -> None:
        super().__init__(message)
        self.max_body_bytes = max_body_bytes


class StreamRefused(LedgerError):
    """A request the Durable Streams protocol refuses; `headers` are the protocol's headers that
    go with the refusal (empty when none do)."""

    def __init__(self, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.headers = headers or {}


class BadStreamRequest(StreamRefused):
    """A header, offset, name or body the protocol does not take; nothing was written."""


class StaleProducer(StreamRefused):
    """The idempotent producer's epoch is older than the one the stream holds (its `Producer-Epoch`
    header names the current one): that producer was replaced and must stop."""


class StreamNotFound(StreamRefused, NotFound):
    """No stream has that name (or a fork's source does not exist)."""


class ReadOnlyStream(StreamRefused):
    """The stream is a run's event log, which is read as a stream but written only as a run."""


class StreamConflict(StreamRefused, Conflict):
    """The request contradicts the stream: another configuration, a closed stream, a sequence out
    of order."""


class StreamGone(StreamRefused):
    """The stream was deleted; its name stays taken while forks still read it."""


class LedgerUnavailable(LedgerFailure):
    """The ledger service cannot be reached, or answered that it cannot serve now.

    `retry_after` is the service's `Retry-After` in seconds, None when it gave none (or never
    answered); `status` is the HTTP status `ledger.client` received (None when nothing answered,
    and for every error raised in process)."""

    def __init__(self, message: str, retry_after: float | None = None, *, status: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


class DatabaseUnavailable(LedgerUnavailable):
    """Postgres could not be reached, or lost the statement; the message says what happened."""


class HeldBySession(DatabaseUnavailable):
    """A maintenance step (a partition's detach or drop, a conversion) gave up waiting for another
    session, and was cancelled; the message names who held it (pid, application name, state).
    Nothing is lost: the next attempt finishes it."""


__all__ = [
    "BadStreamRequest",
    "ConfigError",
    "Conflict",
    "CursorExpired",
    "DatabaseUnavailable",
    "DuplicateUpload",
    "HeldBySession",
    "InstanceMapped",
    "InvalidInput",
    "LedgerError",
    "LedgerFailure",
    "LedgerUnavailable",
    "NotFound",
    "PayloadTooLarge",
    "ReadOnlyStream",
    "RunTerminal",
    "SchemaMissing",
    "StaleAttempt",
    "StaleProducer",
    "StreamConflict",
    "StreamGone",
    "StreamNotFound",
    "StreamRefused",
    "TokenError",
    "TokenExpired",
    "Unauthorized",
]
