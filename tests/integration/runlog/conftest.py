"""Fixtures the run-log tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ledger.runlog.listener import Listener


@pytest.fixture
async def listener(clean_database_url: str) -> AsyncIterator[Listener]:
    """A connected listener on this worker's emptied database, falling back to polling quickly."""
    async with Listener(clean_database_url, fallback_poll_s=0.2, keepalive_s=1.0) as listener:
        assert listener.connected
        yield listener
