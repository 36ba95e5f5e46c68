"""Durable node observations: each docflow node invocation's status, inputs, outputs and error.

One row per `(run_id, node_id, attempt, invocation_seq)`. An observation replaces the stored one
only when it is at least as recent: recency is `settled_at`, else `started_at` (a settled record
beats an unsettled one at the same instant), so a late `started` record never overwrites the
`completed` one of the same invocation. The rule is the `WHERE` of `_UPSERT_OBSERVATIONS_SQL`, the
only place it is decided. A batch is one statement (its observations as arrays, `unnest`), or one
per round when it carries the same invocation more than once: a statement may not update a row
twice, so the n-th observation of each invocation goes in round n, and the rounds apply in batch
order, each under the same rule.

Like sheet rows, observations may arrive before the worker opened the run: recording opens it.
Times are epoch milliseconds on the way in and out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from ledger import jsonb, shapes, validate
from ledger.clock import from_ms, to_ms
from ledger.db import Database
from ledger.errors import InvalidInput
from ledger.ingest.sheets import ensure_run_in_transaction, read_run_rows
from ledger.runlog.events import validate_run_id
from ledger.validate import INT32_MAX

__all__ = [
    "invocation_seq_from_id",
    "list_observations",
    "parse_observation",
    "record_observations",
]

_OBSERVATION_STATUSES: Final = ("started", "completed", "failed")

_UPSERT_OBSERVATIONS_SQL: Final = """
INSERT INTO ledger.node_observations AS o
    (run_id, node_id, attempt, invocation_seq, invocation_id, status, inputs, outputs, error,
     started_at, settled_at, recorded_at)
SELECT %(run_id)s, b.node_id, b.attempt, b.invocation_seq, b.invocation_id, b.status,
       b.inputs::jsonb, b.outputs::jsonb, b.error, b.started_at, b.settled_at, now()
FROM unnest(%(node_ids)s::text[], %(attempts)s::int4[], %(invocation_seqs)s::int4[],
            %(invocation_ids)s::text[], %(statuses)s::text[], %(inputs)s::text[], %(outputs)s::text[],
            %(errors)s::text[], %(started_at)s::timestamptz[], %(settled_at)s::timestamptz[])
    WITH ORDINALITY AS b(node_id, attempt, invocation_seq, invocation_id, status, inputs, outputs,
                         error, started_at, settled_at, ord)
ORDER BY b.ord
ON CONFLICT (run_id, node_id, attempt, invocation_seq) DO UPDATE
SET invocation_id = EXCLUDED.invocation_id, status = EXCLUDED.status, inputs = EXCLUDED.inputs,
    outputs = EXCLUDED.outputs, error = EXCLUDED.error, started_at = EXCLUDED.started_at,
    settled_at = EXCLUDED.settled_at, recorded_at = EXCLUDED.recorded_at
WHERE (COALESCE(EXCLUDED.settled_at, EXCLUDED.started_at, '-infinity'), EXCLUDED.settled_at IS NOT NULL)
   >= (COALESCE(o.settled_at, o.started_at, '-infinity'), o.settled_at IS NOT NULL)
"""

# No row means no such run; one row with a NULL node_id means no observations.
_LIST_OBSERVATIONS_SQL: Final = """
SELECT o.node_id, o.attempt, o.invocation_seq, o.invocation_id, o.status, o.inputs, o.outputs,
       o.error, o.started_at, o.settled_at
FROM ledger.runs AS r
LEFT JOIN ledger.node_observations AS o ON o.run_id = r.run_id
WHERE r.run_id = %(run_id)s
ORDER BY o.node_id, o.attempt, o.invocation_seq
"""


def invocation_seq_from_id(invocation_id: str | None) -> int:
    """The number after the last `:` of the invocation id (`validate.invocation_seq`), else 0."""
    seq = validate.invocation_seq(invocation_id)
    return 0 if seq is None else seq


def parse_observation(field: str, raw: object) -> dict[str, Any]:
    """One validated observation; `invocation_seq` defaults to the one in `invocation_id`."""
    if not isinstance(raw, dict):
        raise InvalidInput(field, "must be an object")
    invocation_id = validate.text(f"{field}.invocation_id", raw.get("invocation_id"), optional=True)
    status = raw.get("status")
    if status not in _OBSERVATION_STATUSES:
        raise InvalidInput(f"{field}.status", f"must be one of {', '.join(_OBSERVATION_STATUSES)}")
    if "attempt" not in raw:
        raise InvalidInput(f"{field}.attempt", "is required")
    seq = raw.get("invocation_seq")
    if seq is None:
        seq = invocation_seq_from_id(invocation_id)
        if seq > INT32_MAX:
            raise InvalidInput(
                f"{field}.invocation_id", f"its sequence number (after the last ':') must be <= {INT32_MAX}"
            )
    return {
        "node_id": validate.text(f"{field}.node_id", raw.get("node_id"), non_empty=True),
        # attempt and invocation_seq are int4 columns.
        "attempt": _int4(f"{field}.attempt", raw["attempt"]),
        "invocation_seq": _int4(f"{field}.invocation_seq", seq),
        "invocation_id": invocation_id,
        "status": status,
        "inputs": validate.json_value(f"{field}.inputs", raw.get("inputs")),
        "outputs": validate.json_value(f"{field}.outputs", raw.get("outputs")),
        # Free text: repaired (U+FFFD for NUL and lone surrogates) and bounded, never refused.
        "error": validate.bounded_text(f"{field}.error", raw.get("error"), optional=True),
        "started_at": validate.epoch_ms(f"{field}.started_at", raw.get("started_at"), optional=True),
        "settled_at": validate.epoch_ms(f"{field}.settled_at", raw.get("settled_at"), optional=True),
    }


def _int4(field: str, value: object) -> int:
    return validate.required_integer(field, value, maximum=INT32_MAX, integral_float=True)


def _parse_observations(observations: object) -> list[dict[str, Any]]:
    """Validate a batch; the first bad observation rejects it whole (`InvalidInput` names it)."""
    batch = validate.items("observations", observations, "observations")
    return [parse_observation(f"observations[{i}]", raw) for i, raw in enumerate(batch)]


def _json_text(value: Any) -> str | None:
    return None if value is None else jsonb.dumps(value)


def _time(ms: int | None) -> datetime | None:
    return None if ms is None else from_ms(ms)


def _rounds(parsed: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """`parsed` (sorted by key) split so that no round holds one invocation twice: the n-th
    observation of each invocation goes in round n, so the rounds keep the batch's order."""
    rounds: list[list[dict[str, Any]]] = []
    seen: dict[tuple[str, int, int], int] = {}
    for obs in parsed:
        key = (obs["node_id"], obs["attempt"], obs["invocation_seq"])
        index = seen.get(key, 0)
        seen[key] = index + 1
        if index == len(rounds):
            rounds.append([])
        rounds[index].append(obs)
    return rounds


def _batch_params(run_id: str, batch: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "node_ids": [obs["node_id"] for obs in batch],
        "attempts": [obs["attempt"] for obs in batch],
        "invocation_seqs": [obs["invocation_seq"] for obs in batch],
        "invocation_ids": [obs["invocation_id"] for obs in batch],
        "statuses": [obs["status"] for obs in batch],
        "inputs": [_json_text(obs["inputs"]) for obs in batch],
        "outputs": [_json_text(obs["outputs"]) for obs in batch],
        "errors": [obs["error"] for obs in batch],
        "started_at": [_time(obs["started_at"]) for obs in batch],
        "settled_at": [_time(obs["settled_at"]) for obs in batch],
    }


async def record_observations(db: Database, run_id: str, observations: list[dict[str, Any]]) -> int:
    """Store observations, keeping the newest per (node, attempt, invocation); returns how many were
    stored (inserted or replacing an older one; an observation older than the stored one counts 0).

    Opens the run if it does not exist yet.
    """
    run_id = validate_run_id(run_id)
    parsed = _parse_observations(observations)
    if not parsed:
        return 0
    # Stable sort by key: concurrent batches lock rows in one order (no deadlock), and repeats of
    # one invocation keep their batch order.
    parsed.sort(key=lambda obs: (obs["node_id"], obs["attempt"], obs["invocation_seq"]))
    stored = 0
    async with db.transaction() as conn:
        await ensure_run_in_transaction(conn, run_id)
        for batch in _rounds(parsed):
            cur = await conn.execute(_UPSERT_OBSERVATIONS_SQL, _batch_params(run_id, batch))
            stored += max(cur.rowcount, 0)
    return stored


async def list_observations(db: Database, run_id: str) -> list[shapes.Observation]:
    """The run's observations ordered by node, attempt, invocation; times in epoch ms.

    Raises `NotFound` for an unknown run.
    """
    rows = await read_run_rows(db, _LIST_OBSERVATIONS_SQL, run_id)
    return [
        {
            "node_id": row["node_id"],
            "attempt": row["attempt"],
            "invocation_seq": row["invocation_seq"],
            "invocation_id": row["invocation_id"],
            "status": row["status"],
            "inputs": row["inputs"],
            "outputs": row["outputs"],
            "error": row["error"],
            "started_at": to_ms(row["started_at"]),
            "settled_at": to_ms(row["settled_at"]),
        }
        for row in rows
        if row["node_id"] is not None
    ]
