"""Test doubles for the reporter: a clock that moves only when told, and a recording transport."""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager
from typing import Any

from ledger.client import RetryPolicy
from ledger.errors import LedgerUnavailable
from reporter.transports.protocol import DeadlineRetries


class FakeClock:
    """Monotonic seconds + wall milliseconds + a sleep that wakes only when `advance` passes it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def monotonic(self) -> float:
        return self.now

    def wall_ms(self) -> int:
        return int(self.now * 1000)

    async def sleep(self, delay: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + delay, future))
        await future

    @property
    def sleepers(self) -> int:
        return sum(1 for _, f in self._sleepers if not f.done())

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [(t, f) for t, f in self._sleepers if t <= self.now]
        self._sleepers = [(t, f) for t, f in self._sleepers if t > self.now]
        for _, future in due:
            if not future.done():
                future.set_result(None)
        await settle()


async def settle(rounds: int = 20) -> None:
    """Let ready tasks run (no real time passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class FakeTransport:
    """Records uploads; can hold them at a gate and fail them on demand; checks single flight.

    It retries as a real transport does (within the reporter's `deadline` block, by the ledger's
    one policy), each try taking the next of `failures`; its waits pass on a clock of its own
    (`now`) at once, so a test never waits for them."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.gate: asyncio.Event | None = None
        self.failures: list[BaseException] = []
        self.fail_calls: dict[int, BaseException] = {}  # the n-th call (from 1) fails
        self.answers: list[dict[str, Any]] = []  # the next answers, then {"applied": True}
        self.outcomes: list[dict[str, Any]] = []
        self.runs: dict[str, dict[str, Any]] = {}
        self.log_lines: dict[str, list[str]] = {}
        self.observations: list[dict[str, Any]] = []
        self.started = 0
        self.now = 0.0
        self.retries = DeadlineRetries(RetryPolicy(max_attempts=1, clock=lambda: self.now), self._wait)

    async def _wait(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)

    def deadline(self, seconds: float | None) -> AbstractContextManager[None]:
        return self.retries.deadline(seconds)

    def hold(self) -> None:
        self.gate = asyncio.Event()

    def release(self) -> None:
        assert self.gate is not None
        self.gate.set()
        self.gate = None

    async def upload(self, payload: dict[str, Any]) -> dict[str, Any]:
        answer, again = await self.retries.run(lambda: self.upload_once(payload))
        return {**answer, "redelivered": True} if again else answer

    async def upload_once(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.in_flight += 1
        self.started += 1
        call = self.started
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.gate is not None:
                await self.gate.wait()
            if call in self.fail_calls:
                raise self.fail_calls.pop(call)
            if self.failures:
                raise self.failures.pop(0)
            self.payloads.append(payload)
            return self.answers.pop(0) if self.answers else {"applied": True}
        finally:
            self.in_flight -= 1

    async def run_state(self, run_id: str) -> dict[str, Any] | None:
        return self.runs.get(run_id)

    async def recent_log_lines(self, run_id: str, limit: int) -> list[str]:
        return list(self.log_lines.get(run_id, []))[-limit:]

    async def sheet_outcomes(self, run_id: str) -> list[dict[str, Any]]:
        return list(self.outcomes)

    async def node_observations(self, run_id: str) -> list[dict[str, Any]]:
        return list(self.observations)


def boom(message: str = "ledger down") -> LedgerUnavailable:
    return LedgerUnavailable(message)
