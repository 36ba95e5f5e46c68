"""An upload refused before anything was sent (the attempt check itself refused) counts as a failed
upload each time, and, not being a stop, leaves the uploader trying again."""

from __future__ import annotations

import contextlib

from ledger.errors import NotFound
from tests.unit.reporter.test_uploader import make, touch


async def test_each_refusal_of_the_attempt_check_counts_one_failed_upload_and_stops_nothing() -> None:
    async def is_current() -> bool:
        raise NotFound("run r1 not found")

    uploader, state, transport, _ = make(is_current_attempt=is_current)
    for failed in (1, 2, 3):
        touch(state)
        with contextlib.suppress(NotFound):  # a waiter may be told; the counter is what this checks
            await uploader.flush(force=True)
        assert not uploader.has_unacked  # nothing was unacknowledged: the refusal took the other branch
        assert uploader.failed_uploads == failed and not uploader.stopped
    assert transport.started == 0
