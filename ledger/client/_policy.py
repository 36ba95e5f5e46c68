"""The retry policy: which failures are tried again, how soon, and until when.

One named object (`RetryPolicy`), given to a client and used for every request it sends; tests
give it a clock and the client a sleep that move only when they say.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Self, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    stop_any,
    wait_exponential,
)

from ledger.client._errors import handled
from ledger.errors import LedgerUnavailable

if TYPE_CHECKING:
    from ledger.client._operations import Call

__all__ = ["DEFAULT_RETRY", "AsyncSleep", "RetryPolicy", "Sleep"]

_T = TypeVar("_T")

_JITTER: Final = random.Random()

# How each face waits between tries (the sync one is generated from the async one: one name each).
Sleep = Callable[[float], None]
AsyncSleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Which failures are retried and for how long: `LedgerUnavailable` (a 408/429/502/503/504 or
    a connection that fails), with exponential backoff and full jitter, never sooner than the
    service's `Retry-After`; at most `max_attempts` tries (None: no count) within `max_total_s`
    (the deadline: no wait starts that would end past it). One attempt: no retry. A request that
    could create something twice (a write without an `Idempotency-Key`, see `Call.replayable`)
    is sent again only after a failure that proves the service did not handle it (`handled`).

    A caller with a deadline of its own passes it down (`by`, or the client's `deadline` block)
    rather than retrying around the policy: `deadline` is an instant on `clock` past which no wait
    starts, and with it no count applies: the call is tried until then, however many tries that is.

    `on_first_failure` hears of a call's first failure at once, before its retries: a person
    waiting on a command learns that the service is unreachable now, not at the deadline. The
    deadline is measured on `clock` (tests give one that moves only when they say)."""

    max_attempts: int | None = 4
    max_total_s: float = 30.0
    initial_wait_s: float = 0.25
    max_wait_s: float = 5.0
    on_first_failure: Callable[[Exception], None] | None = None
    clock: Callable[[], float] = time.monotonic
    deadline: float | None = None

    @classmethod
    def until(cls, deadline_s: float, on_first_failure: Callable[[Exception], None] | None = None) -> Self:
        """Retries for as long as `deadline_s` allows, however many that is."""
        return cls(max_attempts=None, max_total_s=deadline_s, on_first_failure=on_first_failure)

    def by(self, deadline: float) -> Self:
        """This policy (its waits, clock and first-failure hook) until the instant `deadline` on
        its clock, however many tries that is (`math.inf`: until the call succeeds or is refused)."""
        return dataclasses.replace(self, max_attempts=None, max_total_s=math.inf, deadline=deadline)

    def within(self, seconds: float | None) -> Self:
        """`by` the instant `seconds` from now (None: no deadline, until the call succeeds or is
        refused): what a caller with that much time left passes down."""
        return self.by(self.clock() + (math.inf if seconds is None else max(0.0, seconds)))

    def seconds_left(self) -> float:
        """The time a call may still spend by this policy, from now: its deadline's, else its total."""
        if self.deadline is None:
            return self.max_total_s
        return max(0.0, min(self.max_total_s, self.deadline - self.clock()))

    def first_failure(self, error: BaseException | None) -> None:
        """Tell `on_first_failure` of `error` (the first failure of a call or of a stream)."""
        if self.on_first_failure is not None and isinstance(error, Exception):
            self.on_first_failure(error)

    def _before_sleep(self, state: RetryCallState) -> None:
        if state.attempt_number == 1 and state.outcome is not None:
            self.first_failure(state.outcome.exception())

    def wait(self, state: RetryCallState) -> float:
        # Full jitter, drawn from a generator of our own: a client retrying in a thread must not
        # move the process's shared `random` state under code that replays it (property tests).
        ceiling = wait_exponential(multiplier=self.initial_wait_s, max=self.max_wait_s)(state)
        backoff = _JITTER.uniform(0, ceiling)
        error = state.outcome.exception() if state.outcome is not None else None
        if isinstance(error, LedgerUnavailable) and error.retry_after is not None:
            return max(backoff, error.retry_after)
        return backoff

    def _options(self, replayable: bool = True) -> dict[str, Any]:
        ends = self.clock() + self.seconds_left()

        def out_of_time(state: RetryCallState) -> bool:
            # No wait starts that would end past the deadline.
            return self.clock() + (state.upcoming_sleep or 0.0) >= ends

        stops: list[Any] = [out_of_time]
        if self.max_attempts is not None:
            stops.append(stop_after_attempt(self.max_attempts))
        retry: Any = retry_if_exception_type(LedgerUnavailable)
        if not replayable:
            retry = retry & retry_if_exception(lambda error: not handled(error))
        return {
            "retry": retry,
            "wait": self.wait,
            "stop": stop_any(*stops),
            "before_sleep": self._before_sleep,
            "reraise": True,
        }

    def retrying(self, call: Call[Any], sleep: Sleep) -> Retrying:
        """A fresh tenacity controller for one call."""
        return Retrying(sleep=sleep, **self._options(call.replayable))

    def async_retrying(self, call: Call[Any], sleep: AsyncSleep) -> AsyncRetrying:
        """A fresh tenacity controller for one call, for asyncio."""
        return AsyncRetrying(sleep=sleep, **self._options(call.replayable))

    async def run(
        self,
        operation: Callable[[], Awaitable[_T]],
        sleep: Callable[[float], Awaitable[None]],
        *,
        before_retry: Callable[[BaseException, float], None] | None = None,
    ) -> _T:
        """`operation()`, tried again after a `LedgerUnavailable` as this policy says: for work that
        spans requests (the reporter's final upload, which first resends the uploads whose outcome
        is unknown). `before_retry` hears of each failure and the wait before the next try."""
        options = self._options()
        if before_retry is not None:
            hook = before_retry

            def before_sleep(state: RetryCallState) -> None:
                self._before_sleep(state)
                error = state.outcome.exception() if state.outcome is not None else None
                if error is not None:
                    hook(error, state.upcoming_sleep)

            options["before_sleep"] = before_sleep
        async for attempt in AsyncRetrying(sleep=sleep, **options):
            with attempt:
                return await operation()
        raise AssertionError("unreachable: tenacity returns or re-raises")  # pragma: no cover


DEFAULT_RETRY: Final = RetryPolicy()
