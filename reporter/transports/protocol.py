"""The seam between the reporter and the ledger, and the errors a transport may raise.

A transport delivers one status upload and reads the run's terminal truth (sheet row outcomes and
durable node observations), which finalize reconciles the reporter's counts with. The reporter
never knows whether that happens over HTTP (`reporter.transports.http`) or in process
(`reporter.transports.direct`).
"""

from __future__ import annotations

from typing import Any, Protocol


class TransportError(Exception):
    """An upload or read failed (after the transport's own retries, if any) and its outcome is
    unknown: the ledger may or may not have applied it, and trying again may work."""


class Refused(TransportError):
    """The ledger answered, applied nothing, and would answer the same again: never retried."""


class StaleAttemptError(Refused):
    """The ledger refused the upload: a newer producer attempt owns the run. Stop reporting."""


class RunTerminalError(Refused):
    """The run was already made terminal by someone else (a watchdog, an operator, another
    reporter): nothing more can be reported. `terminal` is the stored state, when the ledger said."""

    def __init__(self, message: str, terminal: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.terminal = terminal or {}


class DuplicateUploadError(Refused):
    """The ledger had already applied this `upload_seq` of the attempt from another reporter (one
    that ran before this one, which was not started with resume): this upload changed nothing."""


class UploadRejected(Refused):
    """The ledger refused the request as invalid (a 4xx other than stale attempt); not retried."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(f"ledger refused the request ({status_code}): {message}")
        self.status_code = status_code
        self.message = message


class BodyTooLarge(UploadRejected):
    """The ledger refused the body as larger than it takes (413); `max_body_bytes` is its limit
    when the answer said it. Nothing was applied."""

    def __init__(self, message: str, max_body_bytes: int | None) -> None:
        super().__init__(413, message)
        self.max_body_bytes = max_body_bytes


def terminal_message(run_id: str, terminal: dict[str, Any]) -> str:
    """Who ended the run and how, from its stored terminal state."""
    status = terminal.get("status") or "terminal"
    error = terminal.get("error")
    how = f": {error}" if error else ""
    return f"run {run_id} was already ended as {status} by someone else{how}"


class Transport(Protocol):
    """How the reporter reaches the ledger."""

    async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Deliver one status upload; return the ledger's answer. Raises `TransportError`.

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
