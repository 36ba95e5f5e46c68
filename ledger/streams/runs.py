"""A run's event log read as a Durable Stream: `runs/{run_id}`, read-only, JSON mode.

Positions are seqs: offset `p` reads the events after seq `p`, so a client resumes exactly where
it stopped (and gets 410 when retention trimmed what it asked for). Each event is one JSON message
in the run log's wire shape; the stream is closed once the run has its terminal state.
"""

from __future__ import annotations

import json
from typing import Final

from ledger import shapes
from ledger.runlog.store import RunLog
from ledger.streams.rules import NOW, START
from ledger.streams.store import Chunk, Stream

__all__ = [
    "RUNS_PREFIX",
    "RunStreams",
]

RUNS_PREFIX: Final = "runs/"
_CONTENT_TYPE: Final = "application/json"
_PAGE: Final = 1000


def _stream(run_id: str, page: shapes.EventPage) -> Stream:
    return Stream(
        name=RUNS_PREFIX + run_id,
        content_type=_CONTENT_TYPE,
        ttl_s=None,
        expires_at=None,
        expires=None,
        closed=page["terminal"] is not None,
        closed_by=None,
        tail=int(page["latest_seq"]),
        last_stream_seq=None,
        producers={},
        forked_from=None,
        fork_offset=None,
        fork_sub_offset=0,
        deleted=False,
        expired=False,
        has_forks=False,
    )


class RunStreams:
    """Reads of runs as streams, through the run log (and its single listener for waits)."""

    def __init__(self, runlog: RunLog) -> None:
        self.runlog = runlog

    async def head(self, run_id: str) -> Stream:
        return _stream(run_id, await self.runlog.list_events(run_id, "now", 0, 1))

    async def read(self, run_id: str, offset: int | str, timeout_s: float) -> Chunk:
        """The events after `offset` (a seq, `-1` or `now`), waiting up to `timeout_s` for one."""
        after: int | str = "now" if offset == NOW else (-1 if offset == START else int(offset))
        page = await self.runlog.list_events(run_id, after, int(timeout_s * 1000), _PAGE)
        stream = _stream(run_id, page)
        events = page["events"]
        payloads = [json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode() for e in events]
        if events:
            start = int(events[0]["seq"]) - 1
            return Chunk(stream=stream, start=start, payloads=payloads, next=int(events[-1]["seq"]))
        position = stream.tail if offset in (NOW, START) else min(int(offset), stream.tail)
        return Chunk(stream=stream, start=position, payloads=[], next=position)
