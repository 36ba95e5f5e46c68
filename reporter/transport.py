"""The seam between the reporter and the ledger, and the errors a transport may raise.

A transport delivers one upload (SPEC 2.7) and reads the run's terminal truth (sheet row outcomes
and durable node observations, SPEC 2.8). The reporter never knows whether that happens over HTTP
(`reporter.http_transport`) or in process (`reporter.direct_transport`).
"""

from __future__ import annotations

from typing import Any, Protocol


class TransportError(Exception):
    """An upload or read failed (after the transport's own retries, if any)."""


class StaleAttemptError(TransportError):
    """The ledger refused the upload: a newer producer attempt owns the run. Stop reporting."""


class UploadRejected(TransportError):
    """The ledger refused the request as invalid (a 4xx other than stale attempt); not retried."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(f"ledger refused the request ({status_code}): {message}")
        self.status_code = status_code
        self.message = message


class Transport(Protocol):
    """How the reporter reaches the ledger."""

    async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Deliver one status upload; return the ledger's answer. Raises `TransportError`."""
        ...

    async def sheet_outcomes(self, run_id: str) -> list[dict[str, Any]]:
        """Per-namespace row outcomes ``[{table_namespace, completed, failed, total}]``."""
        ...

    async def node_observations(self, run_id: str) -> list[dict[str, Any]]:
        """The run's durable node observations (SPEC 2.8)."""
        ...
