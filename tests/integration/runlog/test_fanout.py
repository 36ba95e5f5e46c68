"""Many readers of one run woken by one commit: who may share a read, and what each one gets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from ledger import shapes
from ledger.db import Database
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
