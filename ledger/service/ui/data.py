"""What the warm-pool page reads: availability per pool and version and the entries behind it.

Read-only on purpose: the pool API's own listing collects garbage (entries of other versions) as it
reads, which a page that only watches must never do.
"""

from __future__ import annotations

from typing import Any

from ledger.db import Database
from ledger.runlog import overview

__all__ = [
    "pools",
]

# The condition of each entry (available, warming, stale) is the view's, with the windows of
# `ledger.pool_windows()`: the page splits entries exactly as `ledger.pool_availability` counts them.
_POOL_ENTRIES = """
SELECT pool, version, id, state,
    (extract(epoch FROM created_at) * 1000)::bigint AS created_at,
    (extract(epoch FROM ready_at) * 1000)::bigint AS ready_at,
    (extract(epoch FROM expires_at) * 1000)::bigint AS expires_at,
    condition
FROM ledger.pool_entry_conditions
ORDER BY pool, version, created_at DESC, id
LIMIT %(limit)s
"""

# A page shows a few thousand rows at most; a bigger pool is summarized by its counts.
_MAX_ENTRIES = 2000


async def pools(db: Database) -> dict[str, Any]:
    """`{"now", "versions": [...availability...], "entries": [...], "entries_truncated"}`."""
    versions = await overview.pool_availability(db)
    async with db.connection() as conn:
        cur = await conn.execute(_POOL_ENTRIES, {"limit": _MAX_ENTRIES + 1})
        entries = list(await cur.fetchall())
        cur = await conn.execute("SELECT (extract(epoch FROM now()) * 1000)::bigint AS now")
        now = await cur.fetchone()
    return {
        "now": now["now"] if now is not None else None,
        "versions": versions,
        "entries": entries[:_MAX_ENTRIES],
        "entries_truncated": len(entries) > _MAX_ENTRIES,
    }
