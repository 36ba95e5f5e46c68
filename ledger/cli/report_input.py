"""`ledger report`'s input: the runner's lines, read off a blocking stream on a thread, and folded
into the reporter one event at a time; a line that is not a JSON object is described (the first
few) or only counted, never fatal."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import IO, Any

from reporter import ProgressReporter
from reporter.lines import decode_line

__all__ = [
    "DESCRIBED_SKIPS",
    "feed",
    "read_lines",
]

# Between two yields of the input loop to the uploads (lines arriving faster than they are read
# would otherwise hold the event loop until the input pauses).
_YIELD_EVERY = 256
# How many unreadable lines `ledger report` describes one by one before it only counts them.
DESCRIBED_SKIPS = 3


async def read_lines(stream: IO[str], *, buffered: int = 10_000) -> AsyncIterator[str]:
    """Lines of a blocking text stream, read on a thread so the event loop keeps uploading.

    At most `buffered` lines wait in memory (the reader blocks beyond that); when the consumer
    stops early (the ``result`` line came), the reader thread winds down on its own.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    slots = threading.Semaphore(buffered)
    stop = threading.Event()
    failures: list[Exception] = []

    def post(item: str | None) -> bool:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            return False
        return True

    def pump() -> None:
        try:
            for line in stream:
                while not slots.acquire(timeout=0.2):
                    if stop.is_set():
                        return
                if stop.is_set() or not post(line):
                    return
        except (OSError, ValueError) as exc:  # ValueError covers undecodable input
            failures.append(exc)
        finally:
            post(None)

    threading.Thread(target=pump, name="ledger-report-stdin", daemon=True).start()
    try:
        while (line := await queue.get()) is not None:
            slots.release()
            yield line
    finally:
        stop.set()
    if failures:
        raise OSError(f"cannot read the input: {failures[0]}")


async def feed(
    reporter: ProgressReporter, lines: AsyncIterator[str], warn: Callable[[str], None], skipped: list[int]
) -> dict[str, Any] | None:
    """Fold every event line into `reporter`; return the ``result`` event (None if there was none).
    The first `DESCRIBED_SKIPS` lines that are not JSON objects are described, the rest counted in
    `skipped` (the summary line says how many): a runner printing junk cannot flood the terminal."""
    number = 0
    async for raw in lines:
        number += 1
        if number % _YIELD_EVERY == 0:
            await asyncio.sleep(0)
        text = raw.strip()
        if not text:
            continue
        event, problem = decode_line(text)
        if problem is None and not isinstance(event, dict):
            problem = "not a JSON object"
        if problem is not None:
            skipped[0] += 1
            if skipped[0] <= DESCRIBED_SKIPS:
                more = " (the others are only counted)" if skipped[0] == DESCRIBED_SKIPS else ""
                warn(f"line {number}: {problem}; skipped{more}")
            continue
        assert isinstance(event, dict)
        if event.get("type") == "result":
            return event
        reporter.on_runner_event(event)
    return None
