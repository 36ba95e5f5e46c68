"""What the warm-pool page reads: availability per pool and version and the entries behind it.

Read-only on purpose: the pool API's own listing collects garbage (entries of other versions) as it
reads, which a page that only watches must never do.
"""

from __future__ import annotations

from typing import Any

from ledger.db import Database
from ledger.pool.rules import PoolSettings
from ledger.runlog import overview

# `condition` splits unexpired entries as `ledger.pool_availability` counts them: available (ready,
# not stale), warming (not ready, or announced ready in the future) and stale (ready too long ago).
POOL_ENTRIES = """
SELECT pool, version, id, state,
    (extract(epoch FROM created_at) * 1000)::bigint AS created_at,
    (extract(epoch FROM ready_at) * 1000)::bigint AS ready_at,
    (extract(epoch FROM expires_at) * 1000)::bigint AS expires_at,
    CASE
        WHEN state = 'warming' OR ready_at > now() THEN 'warming'
        WHEN ready_at < now() - make_interval(secs => %(stale_after_ms)s / 1000.0) THEN 'stale'
        ELSE 'available'
    END AS condition
FROM ledger.pool_entries
WHERE expires_at > now()
ORDER BY pool, version, created_at DESC, id
LIMIT %(limit)s
"""

# A page shows a few thousand rows at most; a bigger pool is summarized by its counts.
MAX_ENTRIES = 2000


async def pools(db: Database) -> dict[str, Any]:
    """`{"now", "versions": [...availability...], "entries": [...], "entries_truncated"}`."""
    versions = await overview.pool_availability(db)
    async with db.connection() as conn:
        cur = await conn.execute(
            POOL_ENTRIES,
            {"stale_after_ms": PoolSettings().ready_max_age_ms, "limit": MAX_ENTRIES + 1},
        )
        entries = list(await cur.fetchall())
        cur = await conn.execute("SELECT (extract(epoch FROM now()) * 1000)::bigint AS now")
        now = await cur.fetchone()
    return {
        "now": now["now"] if now is not None else None,
        "versions": versions,
        "entries": entries[:MAX_ENTRIES],
        "entries_truncated": len(entries) > MAX_ENTRIES,
    }
