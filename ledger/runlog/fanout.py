"""Waking many readers of one run: one read per wake-up, shared by every reader of the same page.

Design note. A notification wakes every long-poll of a run at once, and readers with the same
cursor and limit would all read the same page. So readers wait per page key (run, cursor, limit) in
a `_Tail`; at the run's next wake-up (`RunWatch.on_next_wake`) the tail starts one read and hands its
answer, one `SharedPage`, to every member through each member's own future. A member is then one
task step from its answer: no per-reader event, timer context, read or copy on the wake path.

A shared answer must never reach a reader that needs a newer one. Reads and wake-ups are ordered by
the listener's tick clock: a read started after tick `t` sees every commit whose notification was
dispatched at or before `t`. A reader therefore only takes a read started after the last wake-up it
has not yet read past (`visible_after`), and a tail's read starts after the wake-up that sealed it;
a reader arriving after that joins the next tail. A reader arriving counts from the run's last
wake-up (or from when this process began watching the run), so readers arriving together share the
read in flight; one whose commit's notification is still to come is woken by it. Keys hold the
cursor and the limit, so readers of different pages never share a read (nor, through
`SharedPage.encoded`, an encoding).

Each member waits on a future of its own, so a reader that goes away (timeout, client gone) cancels
only that; the read itself is awaited by nobody and finishes for the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ledger import shapes
from ledger.runlog.listener import Listener, RunWatch

__all__ = [
    "Fanout",
    "SharedPage",
]

_Key = tuple[str, int | None, int]


class SharedPage:
    """One read's answer, handed to every reader it serves: read-only once built.

    `after` is the cursor the page was read after (`now` resolved to the run's last seq). `copy`
    gives a reader a page of its own; `encoded` encodes the page once for all its readers, and
    `frames` its events once for all the SSE tails it wakes.
    """

    __slots__ = ("_encoded", "_frames", "after", "page")

    def __init__(self, page: shapes.EventPage, after: int) -> None:
        self.page = page
        self.after = after
        self._encoded: bytes | None = None
        self._frames: str | None = None

    def copy(self) -> shapes.EventPage:
        return {**self.page, "events": list(self.page["events"])}

    def encoded(self, encode: Callable[[Any], bytes]) -> bytes:
        """The page as `encode` writes it, computed by the first reader who asks (one encoder is
        used per process, so the cache does not need to know which)."""
        if self._encoded is None:
            self._encoded = encode(self.page)
        return self._encoded

    def frames(self, frame: Callable[[shapes.Event], str]) -> str:
        """Its events framed by `frame` and joined (an SSE tail's next chunk), built by the first
        tail who asks: a thousand tails of one run woken together share one encoding of each event."""
        if self._frames is None:
            self._frames = "".join(frame(event) for event in self.page["events"])
        return self._frames


_Read = Callable[[str, int | None, int], Awaitable[SharedPage]]


@dataclass(eq=False)
class _Flight:
    """A read in progress that readers with `visible_after` before `started` may share."""

    started: int
    task: asyncio.Future[SharedPage]


@dataclass(eq=False, kw_only=True)
class _Tail:
    """Readers of one page key waiting for the run's next wake-up; `live` of them still wait."""

    key: _Key
    members: list[asyncio.Future[tuple[int, SharedPage] | None]] = field(default_factory=list)
    live: int = 0
    on_wake: Callable[[int], None] | None = None


def _expire(future: asyncio.Future[tuple[int, SharedPage] | None]) -> None:
    if not future.done():
        future.set_result(None)


class Fanout:
    """Shared reads and wake-up tails for the readers of one `RunLog` on one listener."""

    def __init__(self, listener: Listener, read: _Read) -> None:
        self.listener = listener
        self._read = read
        self._flights: dict[_Key, _Flight] = {}
        self._tails: dict[_Key, _Tail] = {}

    def shared_read(self, key: _Key, visible_after: int) -> asyncio.Future[SharedPage]:
        """A read of `key` started after tick `visible_after`: the one in flight if it qualifies,
        else a new one. Await it shielded: the read is not this reader's to cancel."""
        flight = self._flights.get(key)
        if flight is None or flight.started <= visible_after:
            flight = _Flight(self.listener.tick(), asyncio.ensure_future(self._read(*key)))
            self._flights[key] = flight
            flight.task.add_done_callback(partial(self._land, key))
        return flight.task

    async def read(self, key: _Key, visible_after: int) -> SharedPage:
        # Shielded: one reader giving up (a client went away) must not cancel the others' read.
        return await asyncio.shield(self.shared_read(key, visible_after))

    def _land(self, key: _Key, task: asyncio.Future[SharedPage]) -> None:
        flight = self._flights.get(key)
        if flight is not None and flight.task is task:
            del self._flights[key]
        # Mark a failed shared read's error as seen even if every reader has gone away.
        if not task.cancelled():
            task.exception()

    async def next_page(self, watch: RunWatch, key: _Key, seconds: float) -> tuple[int, SharedPage] | None:
        """The page of `key` read after the run's next wake-up, with that wake-up's tick; None
        after `seconds` (the caller reads again). The caller checked that no wake-up came since
        its last read started, with no await in between."""
        loop = asyncio.get_running_loop()
        tail = self._tails.get(key)
        if tail is None:
            tail = self._tails[key] = _Tail(key=key)
            tail.on_wake = partial(self._serve, tail)
            watch.on_next_wake(tail.on_wake)
        future: asyncio.Future[tuple[int, SharedPage] | None] = loop.create_future()
        tail.members.append(future)
        tail.live += 1
        watch.waiting += 1
        self.listener.waits += 1
        timer = loop.call_later(seconds, _expire, future)
        try:
            return await future
        finally:
            timer.cancel()
            watch.waiting -= 1
            tail.live -= 1
            # The last member gone before a wake-up: nobody is left to read for (and a run whose
            # readers time out in turn must not pile up callbacks until its next commit).
            if tail.live == 0 and self._tails.get(key) is tail:
                del self._tails[key]
                assert tail.on_wake is not None
                watch.forget(tail.on_wake)

    def _serve(self, tail: _Tail, tick: int) -> None:
        """At a wake-up (tick `tick`): seal the tail and start (or share) one read for its members."""
        if self._tails.get(tail.key) is tail:
            del self._tails[tail.key]
        if tail.live == 0:
            return
        self.shared_read(tail.key, tick).add_done_callback(partial(_deliver, tick, tail.members))


def _deliver(
    tick: int,
    members: list[asyncio.Future[tuple[int, SharedPage] | None]],
    task: asyncio.Future[SharedPage],
) -> None:
    if task.cancelled():
        for member in members:
            member.cancel()
        return
    error = task.exception()
    if error is not None:
        for member in members:
            if not member.done():
                member.set_exception(error)
        return
    answer = (tick, task.result())
    for member in members:
        if not member.done():
            member.set_result(answer)
