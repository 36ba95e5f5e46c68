"""Many readers of one run woken by one commit: who may share a read, and what each one gets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from ledger import shapes
from ledger.db import Database
from ledger.errors import InvalidInput, NotFound
from ledger.runlog.fanout import SharedPage
from ledger.runlog.listener import Listener
from ledger.runlog.store import RunLog

LONG_MS = 30_000  # the clamp: a test that finishes did not sit out a long-poll


async def until(condition: Callable[[], bool]) -> None:
    """Until `condition` holds (the test's own timeout bounds it); no timing is asserted."""
    while not condition():  # noqa: ASYNC110 - counters, not events, are what we watch
        await asyncio.sleep(0.01)


class HeldRunLog(RunLog):
    """A run log whose reads can be held after their statement ran: a read that took its snapshot
    before a commit and answers after it, the case a shared read must not serve wrongly."""

    def __init__(self, db: Database, listener: Listener) -> None:
        super().__init__(db, listener=listener)
        self.hold: asyncio.Event | None = None
        self.held = asyncio.Event()

    async def _read(self, run_id: str, cursor: int | None, limit: int) -> SharedPage:
        page = await super()._read(run_id, cursor, limit)
        hold, self.hold = self.hold, None
        if hold is not None:
            self.held.set()
            await hold.wait()
        return page


@pytest.fixture
async def runlog(db: Database, listener: Listener) -> HeldRunLog:
    log = HeldRunLog(db, listener)
    await log.open_run("r1")
    return log


@pytest.fixture
async def writer(clean_database_url: str) -> AsyncIterator[RunLog]:
    """Appends from another pool, as another process would."""
    async with Database(clean_database_url, min_size=1, max_size=2) as database:
        yield RunLog(database)


def lines(page: Mapping[str, Any]) -> list[str]:
    return [e["line"] for e in page["events"]]


async def test_readers_of_different_cursors_and_limits_each_get_their_own_page(
    runlog: HeldRunLog, listener: Listener, writer: RunLog
) -> None:
    await writer.append("r1", [{"type": "log", "line": str(n)} for n in (1, 2, 3)])

    def wait(after: int | str, limit: int) -> asyncio.Task[shapes.EventPage]:
        return asyncio.create_task(runlog.list_events("r1", after=after, timeout_ms=LONG_MS, limit=limit))

    groups = {
        (3, 1000): [wait(3, 1000) for _ in range(20)],
        (3, 1): [wait(3, 1) for _ in range(20)],
        (4, 1000): [wait(4, 1000) for _ in range(20)],
        ("now", 2): [wait("now", 2) for _ in range(20)],
    }
    await until(lambda: listener.waits >= 80)
    reads = runlog.reads
    await writer.append("r1", [{"type": "log", "line": str(n)} for n in (4, 5, 6)])
    expected = {(3, 1000): ["4", "5", "6"], (3, 1): ["4"], (4, 1000): ["5", "6"], ("now", 2): ["4", "5"]}
    for key, tasks in groups.items():
        pages = await asyncio.gather(*tasks)
        assert all(lines(page) == expected[key] for page in pages), key
    # One read per page, not one per reader, and never one page for two keys.
    assert runlog.reads == reads + len(groups)
    assert listener.waiter_count == 0


async def test_a_woken_reader_never_takes_a_read_whose_snapshot_predates_the_commit(
    runlog: HeldRunLog, listener: Listener, writer: RunLog
) -> None:
    waiting = asyncio.create_task(runlog.list_events("r1", after=0, timeout_ms=LONG_MS))
    await until(lambda: listener.waits >= 1)
    # A second reader of the same page whose read ran (empty) and is held before answering...
    runlog.hold = release = asyncio.Event()
    late = asyncio.create_task(runlog.list_events("r1", after=0, timeout_ms=LONG_MS))
    await runlog.held.wait()
    # ...while the commit lands and wakes the first reader: it must read anew, not share that read.
    notifications = listener.notifications
    await writer.append("r1", [{"type": "log", "line": "new"}])
    await until(lambda: listener.notifications > notifications)
    assert lines(await waiting) == ["new"]
    release.set()
    # The held reader got a stale empty page; it was woken since its read started, so it reads again.
    assert lines(await late) == ["new"]
    assert listener.timeouts == 0


async def test_a_reader_going_away_leaves_the_others_their_wake_up(
    runlog: HeldRunLog, listener: Listener, writer: RunLog
) -> None:
    staying = [asyncio.create_task(runlog.list_events("r1", after=0, timeout_ms=LONG_MS)) for _ in range(5)]
    leaving = [asyncio.create_task(runlog.list_events("r1", after=0, timeout_ms=LONG_MS)) for _ in range(5)]
    await until(lambda: listener.waits >= 10)
    # Long enough to be sure to wait (its first read done well within it) before timing out.
    impatient = asyncio.create_task(runlog.list_events("r1", after=0, timeout_ms=1000))
    await until(lambda: listener.waits >= 11)
    for task in leaving:
        task.cancel()
    # The impatient reader times out on its own timer; the same page's other readers keep waiting.
    assert lines(await impatient) == []
    assert listener.timeouts == 1 and listener.waiter_count == 5
    await writer.append("r1", [{"type": "log", "line": "still here"}])
    assert all(lines(page) == ["still here"] for page in await asyncio.gather(*staying))
    for task in leaving:
        with pytest.raises(asyncio.CancelledError):
            await task
    assert listener.waiter_count == 0


async def test_readers_woken_together_share_one_page_object_and_get_copies_of_it(
    runlog: HeldRunLog, listener: Listener, writer: RunLog
) -> None:
    shared = [asyncio.create_task(runlog.wait_page("r1", after=0, timeout_ms=LONG_MS)) for _ in range(3)]
    copies = [asyncio.create_task(runlog.list_events("r1", after=0, timeout_ms=LONG_MS)) for _ in range(2)]
    await until(lambda: listener.waits >= 5)
    await writer.append("r1", [{"type": "log", "line": "x"}])
    pages = await asyncio.gather(*shared)
    assert pages[0] is pages[1] is pages[2] and pages[0].after == 0
    encoded = pages[0].encoded(lambda page: repr(page).encode())
    assert pages[2].encoded(lambda page: b"never called") is encoded
    # SSE tails woken together frame each event once: the first tail's framing serves the rest.
    framed = pages[1].frames(lambda event: f"{event['seq']}:{event['type']};")
    assert framed == "1:log;"
    assert pages[0].frames(lambda event: "never called") is framed
    # A plain page is the reader's own: changing it changes nobody else's.
    mine, theirs = await asyncio.gather(*copies)
    mine["events"].clear()
    assert lines(theirs) == ["x"] and lines(pages[0].page) == ["x"]


async def test_readers_timing_out_in_turn_leave_nothing_queued_for_the_next_wake_up(
    runlog: HeldRunLog, listener: Listener, writer: RunLog
) -> None:
    # One reader keeps the run watched throughout; others of another page come and time out.
    holding = asyncio.create_task(runlog.list_events("r1", after=0, timeout_ms=LONG_MS, limit=10))
    await until(lambda: listener.waits >= 1)
    for _ in range(5):
        assert (await runlog.list_events("r1", after=0, timeout_ms=200))["events"] == []
    watch = listener.watch("r1")
    listener.unwatch(watch)
    # Only the holding reader's page waits for the next wake-up.
    assert watch.pending == 1 and listener.timeouts >= 1
    await writer.append("r1", [{"type": "log", "line": "at last"}])
    assert lines(await holding) == ["at last"]


async def test_readers_arriving_together_share_the_read_in_flight(
    runlog: HeldRunLog, listener: Listener, writer: RunLog
) -> None:
    # Nothing was committed since the read started, so it sees all a newcomer must see.
    notifications = listener.notifications
    await writer.append("r1", [{"type": "log", "line": "a"}])
    await until(lambda: listener.notifications > notifications)  # "a"'s wake-up is behind us
    runlog.hold = release = asyncio.Event()
    reads = runlog.reads
    first = asyncio.create_task(runlog.list_events("r1", after=0, timeout_ms=LONG_MS))
    await runlog.held.wait()
    others = [asyncio.create_task(runlog.list_events("r1", after=0, timeout_ms=LONG_MS)) for _ in range(20)]
    await until(lambda: listener.waiter_count >= 21 or any(task.done() for task in others))
    release.set()
    pages = await asyncio.gather(first, *others)
    assert all(lines(page) == ["a"] for page in pages)
    assert runlog.reads == reads + 1


async def test_a_reader_arriving_after_a_wake_up_never_takes_a_read_started_before_it(
    runlog: HeldRunLog, listener: Listener, writer: RunLog
) -> None:
    notifications = listener.notifications
    await writer.append("r1", [{"type": "log", "line": "a"}])
    await until(lambda: listener.notifications > notifications)
    runlog.hold = release = asyncio.Event()
    reads = runlog.reads
    early = asyncio.create_task(runlog.list_events("r1", after=0, timeout_ms=LONG_MS))
    await runlog.held.wait()  # its snapshot has only "a"
    notifications = listener.notifications
    await writer.append("r1", [{"type": "log", "line": "b"}])
    await until(lambda: listener.notifications > notifications)
    # "b"'s notification came before this reader: the read in flight predates it, so it reads anew.
    late = await runlog.list_events("r1", after=0, timeout_ms=LONG_MS)
    assert lines(late) == ["a", "b"]
    release.set()
    assert lines(await early) == ["a"]  # arrived before "b": a page without it is its true answer
    assert runlog.reads == reads + 2


class Pages:
    """A follower's callbacks: the pages it was handed, the task each was handed in, its error."""

    def __init__(self, runlog: RunLog, after: int | str = 0, limit: int = 1000) -> None:
        self.pages: list[SharedPage] = []
        self.tasks: list[asyncio.Task[Any] | None] = []
        self.errors: list[BaseException] = []
        self.follower = runlog.follow(
            "r1", self.on_page, after=after, limit=limit, on_error=self.errors.append
        )

    def on_page(self, shared: SharedPage) -> None:
        self.pages.append(shared)
        self.tasks.append(asyncio.current_task())

    def lines(self) -> list[list[str]]:
        return [lines(shared.page) for shared in self.pages]


async def test_a_thousand_followers_are_handed_one_page_in_the_wake_ups_own_callback(
    runlog: HeldRunLog, listener: Listener, writer: RunLog
) -> None:
    followers = [Pages(runlog) for _ in range(1000)]
    await until(lambda: listener.waits >= 1000)
    assert listener.waiter_count == 1000
    reads = runlog.reads
    await writer.append("r1", [{"type": "log", "line": "x"}])
    await until(lambda: all(f.pages for f in followers))
    first = followers[0].pages[0]
    assert all(f.pages == [first] for f in followers)  # the same object: one read, no copies
    assert lines(first.page) == ["x"] and runlog.reads == reads + 1
    # Called from the delivery's callback, not from a task resumed for each follower.
    assert all(f.tasks == [None] for f in followers)
    # Each waits again from the page's end, and the next commit reaches them all the same way.
    await until(lambda: listener.waits >= 2000)
    await writer.append("r1", [{"type": "log", "line": "y"}])
    await until(lambda: all(len(f.pages) == 2 for f in followers))
    assert all(f.lines() == [["x"], ["y"]] for f in followers)
    assert runlog.reads == reads + 2 and not any(f.errors for f in followers)
    for f in followers:
        f.follower.close()
    assert listener.waiter_count == 0


async def test_a_follower_whose_callback_raises_stops_alone(
    runlog: HeldRunLog, listener: Listener, writer: RunLog, caplog: pytest.LogCaptureFixture
) -> None:
    before = [Pages(runlog) for _ in range(3)]
    failing = Pages(runlog)
    after = [Pages(runlog) for _ in range(3)]

    def boom(shared: SharedPage) -> None:
        raise RuntimeError("a broken consumer")

    failing.follower._on_page = boom
    await until(lambda: listener.waits >= 7)
    await writer.append("r1", [{"type": "log", "line": "x"}])
    await until(lambda: all(f.pages for f in before + after))
    assert failing.follower.closed and "raised on a page" in caplog.text
    assert listener.waiter_count == 6
    await writer.append("r1", [{"type": "log", "line": "y"}])
    await until(lambda: all(len(f.pages) == 2 for f in before + after))
    assert all(f.lines() == [["x"], ["y"]] for f in before + after)
    for f in before + after:
        f.follower.close()


async def test_closed_followers_get_nothing_and_leave_nothing_queued(
    runlog: HeldRunLog, listener: Listener, writer: RunLog
) -> None:
    staying = Pages(runlog, limit=10)
    leaving = [Pages(runlog) for _ in range(5)]
    await until(lambda: listener.waits >= 6)
    watch = listener.watch("r1")
    listener.unwatch(watch)
    assert watch.pending == 2  # one tail per page key
    for f in leaving:
        f.follower.close()
        f.follower.close()  # twice is harmless
    # The page nobody waits for any more is not read at the next wake-up.
    assert watch.pending == 1 and listener.waiter_count == 1
    reads = runlog.reads
    await writer.append("r1", [{"type": "log", "line": "x"}])
    await until(lambda: bool(staying.pages))
    assert staying.lines() == [["x"]] and runlog.reads == reads + 1
    assert all(f.pages == [] for f in leaving)
    staying.follower.close()
    assert listener.waiter_count == 0


async def test_a_follower_closed_by_another_during_the_fan_out_is_not_called(
    runlog: HeldRunLog, listener: Listener, writer: RunLog
) -> None:
    closer = Pages(runlog)
    closed = Pages(runlog)

    def close_the_other(shared: SharedPage) -> None:
        closer.pages.append(shared)
        closed.follower.close()

    closer.follower._on_page = close_the_other
    await until(lambda: listener.waits >= 2)
    await writer.append("r1", [{"type": "log", "line": "x"}])
    await until(lambda: bool(closer.pages))
    assert closed.pages == [] and closed.follower.closed and listener.waiter_count == 1
    closer.follower.close()


async def test_followers_added_during_a_fan_out_read_from_their_own_cursor(
    runlog: HeldRunLog, listener: Listener, writer: RunLog
) -> None:
    first = Pages(runlog)
    added: list[Pages] = []

    def add_followers(shared: SharedPage) -> None:
        first.pages.append(shared)
        if not added:
            added.extend((Pages(runlog, after=0), Pages(runlog, after="now")))

    first.follower._on_page = add_followers
    await until(lambda: listener.waits >= 1)
    await writer.append("r1", [{"type": "log", "line": "x"}])
    # From 0 it has "x" (a read of its own, not the delivered page); from now, nothing yet.
    await until(lambda: bool(added) and bool(added[0].pages))
    from_zero, from_now = added
    assert from_zero.lines() == [["x"]] and from_zero.pages[0] is not first.pages[0]
    await until(lambda: listener.waits >= 4)  # all three wait for what comes next
    assert from_now.pages == []
    await writer.append("r1", [{"type": "log", "line": "y"}])
    await until(lambda: all(len(f.pages) >= n for f, n in ((first, 2), (from_zero, 2), (from_now, 1))))
    assert first.lines() == from_zero.lines() == [["x"], ["y"]] and from_now.lines() == [["y"]]
    for f in (first, from_zero, from_now):
        f.follower.close()


async def test_a_follower_takes_full_pages_in_turn_and_stops_after_the_terminal_event(
    runlog: HeldRunLog, listener: Listener, writer: RunLog
) -> None:
    follower = Pages(runlog, limit=2)
    await until(lambda: listener.waits >= 1)
    # Five events in one commit, pages of two: the rest of a full page is read without a wake-up.
    await writer.append("r1", [{"type": "log", "line": str(n)} for n in range(1, 6)])
    await until(lambda: len(follower.pages) == 3)
    assert follower.lines() == [["1", "2"], ["3", "4"], ["5"]] and follower.follower.cursor == 5
    await writer.set_terminal("r1", "completed")
    await until(lambda: follower.follower.closed)
    last = follower.pages[-1].page
    assert last["terminal"] is not None and last["events"][-1]["type"] == "terminal"
    assert listener.waiter_count == 0 and follower.errors == []
    # A finished run with nothing after the cursor: one page that says so, and the follower stops.
    done = Pages(runlog, after=last["latest_seq"])
    await until(lambda: done.follower.closed)
    assert [(shared.page["events"], shared.page["terminal"] is not None) for shared in done.pages] == [
        ([], True)
    ]


async def test_a_follower_of_an_unknown_run_gets_the_error_and_stops(
    listener: Listener, db: Database
) -> None:
    runlog = RunLog(db, listener=listener)
    errors: list[BaseException] = []
    follower = runlog.follow("nobody", lambda shared: None, on_error=errors.append)
    await until(lambda: follower.closed)
    assert [type(error) for error in errors] == [NotFound] and listener.waiter_count == 0


async def test_following_needs_a_listener_and_a_valid_page(db: Database, listener: Listener) -> None:
    with pytest.raises(ValueError, match="listener"):
        RunLog(db).follow("r1", lambda shared: None)
    with pytest.raises(InvalidInput, match="limit"):
        RunLog(db, listener=listener).follow("r1", lambda shared: None, limit=0)
    assert listener.waiter_count == 0


async def test_a_woken_follower_never_takes_a_read_whose_snapshot_predates_the_commit(
    runlog: HeldRunLog, listener: Listener, writer: RunLog
) -> None:
    waiting = Pages(runlog)
    await until(lambda: listener.waits >= 1)
    # A second follower of the same page whose read ran (empty) and is held before answering...
    runlog.hold = release = asyncio.Event()
    late = Pages(runlog)
    await runlog.held.wait()
    # ...while the commit lands and wakes the first: it must read anew, not share that read.
    notifications = listener.notifications
    await writer.append("r1", [{"type": "log", "line": "new"}])
    await until(lambda: listener.notifications > notifications and bool(waiting.pages))
    assert waiting.lines() == [["new"]]
    release.set()
    # The held read answered empty, from before the wake-up: the late follower reads again.
    await until(lambda: bool(late.pages))
    assert late.lines() == [["new"]]
    for f in (waiting, late):
        f.follower.close()


async def test_followers_poll_while_the_listener_is_down(
    runlog: HeldRunLog, listener: Listener, writer: RunLog
) -> None:
    followers = [Pages(runlog) for _ in range(3)]
    await until(lambda: listener.waits >= 3)
    await listener.stop()  # every reader re-reads, then polls every fallback_poll_s
    await until(lambda: listener.waits >= 6)  # those reads done: the append is theirs to poll for
    timeouts = listener.timeouts
    await writer.append("r1", [{"type": "log", "line": "polled"}])
    await until(lambda: all(f.pages for f in followers))
    assert all(f.lines() == [["polled"]] for f in followers)
    assert listener.timeouts > timeouts and listener.wakeups == 0
    for f in followers:
        f.follower.close()
