"""Sheet row outcomes: the data plane's per-row status and the per-namespace counts, which the
reporter's final reconciliation trusts over its own.

Rows are upserted by `(run_id, table_namespace, row_key)`; the last write of a row wins (the data
plane retries a failed row into `completed`). A batch is one statement, with its rows deduplicated
(last occurrence wins) and sorted by key so that concurrent batches touching the same rows lock
them in the same order and cannot deadlock.

The data plane may report before the worker opened the run: recording opens the run (idempotent,
like a status upload does) rather than refusing the rows.
"""

from __future__ import annotations

from typing import Any, Final

from ledger import shapes, validate
from ledger.db import Conn, Database, Row
from ledger.errors import InvalidInput, NotFound
from ledger.runlog.events import validate_run_id
from ledger.runlog.store import open_run_in_transaction

__all__ = [
    "ensure_run_in_transaction",
    "read_run_rows",
    "record_sheet_rows",
    "sheet_outcomes",
]

_SHEET_STATUSES: Final = ("pending", "completed", "failed")

_RUN_EXISTS_SQL: Final = "SELECT 1 FROM ledger.runs WHERE run_id = %(run_id)s"

_UPSERT_ROWS_SQL: Final = """
INSERT INTO ledger.sheet_rows (run_id, table_namespace, row_key, status, updated_at)
SELECT %(run_id)s, r.table_namespace, r.row_key, r.status, now()
FROM unnest(%(namespaces)s::text[], %(keys)s::text[], %(statuses)s::text[])
    AS r(table_namespace, row_key, status)
ON CONFLICT (run_id, table_namespace, row_key)
DO UPDATE SET status = EXCLUDED.status, updated_at = EXCLUDED.updated_at
"""

# One statement: no row means no such run; a single row with a NULL namespace means no sheet rows.
_OUTCOMES_SQL: Final = """
SELECT s.table_namespace,
       count(*) FILTER (WHERE s.status = 'completed') AS completed,
       count(*) FILTER (WHERE s.status = 'failed') AS failed,
       count(s.row_key) AS total
FROM ledger.runs AS r
LEFT JOIN ledger.sheet_rows AS s ON s.run_id = r.run_id
WHERE r.run_id = %(run_id)s
GROUP BY s.table_namespace
ORDER BY s.table_namespace
"""


async def ensure_run_in_transaction(conn: Conn, run_id: str) -> None:
    """Open the run if it does not exist yet, without locking an existing run's row.

    Opening an existing run through the upsert would lock its row and serialize every data-plane
    writer of the run behind one another (and behind status uploads); a plain read does not.
    """
    cur = await conn.execute(_RUN_EXISTS_SQL, {"run_id": run_id})
    if await cur.fetchone() is None:
        await open_run_in_transaction(conn, run_id)


async def read_run_rows(db: Database, sql: str, run_id: str) -> list[Row]:
    """The rows of a per-run read whose statement LEFT JOINs from `ledger.runs` (so a known run
    always yields a row); `NotFound` when there is none. The run id is validated first."""
    run_id = validate_run_id(run_id)
    async with db.connection() as conn:
        cur = await conn.execute(sql, {"run_id": run_id})
        rows = await cur.fetchall()
    if not rows:
        raise NotFound(f"unknown run {run_id!r}")
    return rows


def _parse_sheet_rows(rows: object) -> list[tuple[str, str, str]]:
    """Validated `(table_namespace, row_key, status)` rows, one per key (last wins), sorted by key."""
    rows = validate.items("rows", rows, "rows")
    latest: dict[tuple[str, str], str] = {}
    for index, row in enumerate(rows):
        field = f"rows[{index}]"
        if not isinstance(row, dict):
            raise InvalidInput(field, "must be an object")
        namespace = validate.required_text(
            f"{field}.table_namespace", row.get("table_namespace"), non_empty=True
        )
        key = validate.required_text(f"{field}.row_key", row.get("row_key"))
        status = row.get("status")
        if status not in _SHEET_STATUSES:
            raise InvalidInput(f"{field}.status", f"must be one of {', '.join(_SHEET_STATUSES)}")
        latest[(namespace, key)] = str(status)
    return [(namespace, key, status) for (namespace, key), status in sorted(latest.items())]


async def record_sheet_rows(db: Database, run_id: str, rows: list[dict[str, Any]]) -> int:
    """Upsert row outcomes `{table_namespace, row_key, status}`; returns how many rows were recorded.

    Opens the run if it does not exist yet. A bad row rejects the whole batch (`InvalidInput`).
    Repeated keys in one batch count once (the last one wins).
    """
    run_id = validate_run_id(run_id)
    parsed = _parse_sheet_rows(rows)
    if not parsed:
        return 0
    async with db.transaction() as conn:
        await ensure_run_in_transaction(conn, run_id)
        await conn.execute(
            _UPSERT_ROWS_SQL,
            {
                "run_id": run_id,
                "namespaces": [row[0] for row in parsed],
                "keys": [row[1] for row in parsed],
                "statuses": [row[2] for row in parsed],
            },
        )
    return len(parsed)


async def sheet_outcomes(db: Database, run_id: str) -> list[shapes.SheetOutcome]:
    """Per-namespace counts `[{table_namespace, completed, failed, total}]` for the run, by namespace.

    `total` counts every row, pending ones included. Raises `NotFound` for an unknown run.
    """
    rows = await read_run_rows(db, _OUTCOMES_SQL, run_id)
    return [
        {
            "table_namespace": row["table_namespace"],
            "completed": int(row["completed"]),
            "failed": int(row["failed"]),
            "total": int(row["total"]),
        }
        for row in rows
        if row["table_namespace"] is not None
    ]
