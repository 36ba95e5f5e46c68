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

Followers. A woken task costs asyncio a scheduled step and a resumed coroutine stack (a few
microseconds each), so a thousand tasks woken by one commit answer one after another for
milliseconds. A `Follower` is a reader without a task: a callback that gets each page as
`wait_page` would answer it, again and again from each answer's cursor. It joins a tail like a
task does; the delivery (the one callback that resolves the tasks' futures) decides once what the
page means for every follower of the key, calls each follower's callback, and only then puts each
in its next place (the next tail, or a read when it must read again), so a callback waits only for
the callbacks before it. It keeps `wait_page`'s rules (`_step`): a page that is full or ends the
run, or a wake-up since its read started, means reading again before waiting; while the listener
is down it reads every fallback poll.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ledger import shapes
from ledger.runlog.listener import Listener, RunWatch

__all__ = [
    "Fanout",
    "Follower",
    "SharedPage",
]

_log = logging.getLogger(__name__)

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
    """Readers of one page key waiting for the run's next wake-up (tasks by their futures, and
    followers); `live` of them still wait."""

    key: _Key
    members: list[asyncio.Future[tuple[int, SharedPage] | None]] = field(default_factory=list)
    followers: list[Follower] = field(default_factory=list)
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
        tail = self._join(watch, key)
        future: asyncio.Future[tuple[int, SharedPage] | None] = loop.create_future()
        tail.members.append(future)
        timer = loop.call_later(seconds, _expire, future)
        try:
            return await future
        finally:
            timer.cancel()
            self._leave(watch, tail)

    def _join(self, watch: RunWatch, key: _Key) -> _Tail:
        """The tail of `key` waiting for the run's next wake-up, counting one more member in."""
        tail = self._tails.get(key)
        if tail is None:
            tail = self._tails[key] = _Tail(key=key)
            tail.on_wake = partial(self._serve, tail)
            watch.on_next_wake(tail.on_wake)
        tail.live += 1
        watch.waiting += 1
        self.listener.waits += 1
        return tail

    def _leave(self, watch: RunWatch, tail: _Tail) -> None:
        """A member of `tail` is done waiting (served, timed out, gone)."""
        watch.waiting -= 1
        tail.live -= 1
        # The last member gone before a wake-up: nobody is left to read for (and a run whose
        # readers time out in turn must not pile up callbacks until its next commit).
        if tail.live == 0 and self._tails.get(tail.key) is tail:
            del self._tails[tail.key]
            assert tail.on_wake is not None
            watch.forget(tail.on_wake)

    def _serve(self, tail: _Tail, tick: int) -> None:
        """At a wake-up (tick `tick`): seal the tail and start (or share) one read for its members."""
        if self._tails.get(tail.key) is tail:
            del self._tails[tail.key]
        if tail.live == 0:
            return
        self.shared_read(tail.key, tick).add_done_callback(partial(_deliver, tick, tail))


def _deliver(tick: int, tail: _Tail, task: asyncio.Future[SharedPage]) -> None:
    # Followers first: each is served right here, while a task's future only schedules its step.
    if task.cancelled():
        for follower in tail.followers:
            follower.close()
        for member in tail.members:
            member.cancel()
        return
    error = task.exception()
    if error is not None:
        for follower in tail.followers:
            follower._fail(error)
        for member in tail.members:
            if not member.done():
                member.set_exception(error)
        return
    shared = task.result()
    followers = tail.followers
    if followers:
        # What the page means is the same for every follower of the key: decided once. Every
        # follower has the page before any takes its next place, so none waits on the others'.
        step = _step(tail.key, tick, followers[0]._watch.woken_at, shared)
        if step.answers:
            for follower in followers:
                if not follower.closed:
                    follower._hand(shared)
        for follower in followers:
            if not follower.closed:
                follower._stop_waiting()
                follower._go(step)
    answer = (tick, shared)
    for member in tail.members:
        if not member.done():
            member.set_result(answer)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Step:
    """What a follower does with a page: hand it over (`answers`), then stop (`ended`), or go on
    from `key`, reading again at once (`read`) or waiting for the next wake-up."""

    answers: bool
    ended: bool
    key: _Key
    read: bool


def _step(key: _Key, seen: int, woken_at: int, shared: SharedPage) -> _Step:
    """`wait_page`'s rules for a page of `key` read after tick `seen`, the run last woken at
    `woken_at`: a page answers if it has events or the run has ended; a full page or an ended run
    may have more already, and a wake-up since the read started may be a commit it missed, so
    those read again before waiting."""
    page = shared.page
    events = page["events"]
    ended = page["terminal"] is not None
    run_id, _, limit = key
    return _Step(
        answers=bool(events) or ended,
        ended=ended and (not events or events[-1]["type"] == "terminal"),
        key=(run_id, events[-1]["seq"] if events else shared.after, limit),
        read=ended or len(events) >= limit or woken_at > seen,
    )


class Follower:
    """A reader of one run called back with its pages, without a task of its own.

    `on_page` gets every answer `wait_page` would give from the follower's cursor with an endless
    timeout, each from the cursor the one before ended at: pages of new events, and last the
    page that ends the run (its `terminal` set, ending with the terminal event or empty). Never an
    empty page that is not the end. `on_error` gets a read's failure (an unknown run, a cursor
    behind retention, the database; without it the failure is logged). After the end of the run,
    a failure, `on_page` raising (logged), or `close()`, nothing more is called and the follower
    is closed. The callbacks run on the event loop, for many followers one after another: they
    must not block or await (a slow one delays every follower woken with it).
    """

    __slots__ = ("_fanout", "_key", "_on_error", "_on_page", "_seen", "_tail", "_timer", "_watch", "closed")

    def __init__(
        self,
        fanout: Fanout,
        watch: RunWatch,
        key: _Key,
        on_page: Callable[[SharedPage], None],
        on_error: Callable[[BaseException], None] | None,
    ) -> None:
        self._fanout = fanout
        self._watch = watch
        self._key = key
        self._on_page = on_page
        self._on_error = on_error
        self._tail: _Tail | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._seen = 0
        self.closed = False
        listener = fanout.listener
        # As `wait_page` starts: a read since the run's last wake-up serves it, unless no
        # notification is sure to come (the listener is down).
        self._read(watch.woken_at if listener.connected else listener.tick())

    @property
    def cursor(self) -> int | None:
        """Where the next page starts: the last seq handed over (None: `now`, nothing read yet)."""
        return self._key[1]

    def close(self) -> None:
        """Follow no more: nothing is called after this (safe to call from a callback, twice)."""
        if self.closed:
            return
        self.closed = True
        self._stop_waiting()
        self._fanout.listener.unwatch(self._watch)

    def _stop_waiting(self) -> None:
        tail, self._tail = self._tail, None
        if tail is not None:
            self._fanout._leave(self._watch, tail)
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _read(self, seen: int) -> None:
        self._seen = seen
        self._fanout.shared_read(self._key, seen).add_done_callback(self._landed)

    def _landed(self, read: asyncio.Future[SharedPage]) -> None:
        if self.closed:
            return
        if read.cancelled():  # the loop is going away
            self.close()
            return
        error = read.exception()
        if error is not None:
            self._fail(error)
            return
        shared = read.result()
        self._take(_step(self._key, self._seen, self._watch.woken_at, shared), shared)

    def _wait(self) -> None:
        listener = self._fanout.listener
        tail = self._tail = self._fanout._join(self._watch, self._key)
        tail.followers.append(self)
        if not listener.connected:
            self._timer = asyncio.get_running_loop().call_later(listener.fallback_poll_s, self._poll)

    def _poll(self) -> None:
        """The listener was down: read again, as a waiting task does after its fallback poll."""
        self._timer = None
        self._stop_waiting()
        listener = self._fanout.listener
        listener.timeouts += 1
        self._read(listener.tick())

    def _take(self, step: _Step, shared: SharedPage) -> None:
        if step.answers:
            self._hand(shared)
        if not self.closed:
            self._go(step)

    def _hand(self, shared: SharedPage) -> None:
        try:
            self._on_page(shared)
        except Exception:
            _log.exception("a follower of run %s raised on a page; it follows no more", self._key[0])
            self.close()

    def _go(self, step: _Step) -> None:
        """After a page: stop at the run's end, else read again or wait from the page's end."""
        if step.ended:
            self.close()
            return
        self._key = step.key
        if step.read:
            self._read(self._watch.woken_at)
        else:
            self._wait()

    def _fail(self, error: BaseException) -> None:
        if self.closed:
            return
        self.close()
        if self._on_error is None:
            _log.error("a follower of run %s stopped: %r", self._key[0], error)
            return
        try:
            self._on_error(error)
        except Exception:
            _log.exception("a follower of run %s raised on its error", self._key[0])
