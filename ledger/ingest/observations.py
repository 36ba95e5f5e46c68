"""Durable node observations: each docflow node invocation's status, inputs, outputs and error.

One row per `(run_id, node_id, attempt, invocation_seq)`. An observation replaces the stored one
only when it is at least as recent: recency is `settled_at`, else `started_at` (a settled record
beats an unsettled one at the same instant), so a late `started` record never overwrites the
`completed` one of the same invocation. The rule is the `WHERE` of `UPSERT_OBSERVATION_SQL`, the
only place it is decided; observations of one batch are applied in order, one statement each, so
a batch that carries the same invocation twice follows the same rule.

Like sheet rows, observations may arrive before the worker opened the run: recording opens it.
Times are epoch milliseconds on the way in and out.
"""

from __future__ import annotations

from typing import Any, Final

from psycopg.types.json import Jsonb

from ledger import shapes, validate
from ledger.clock import from_ms, to_ms
from ledger.db import Database
from ledger.errors import InvalidInput
from ledger.ingest.sheets import ensure_run_in_transaction, read_run_rows
from ledger.runlog.events import validate_run_id
from ledger.validate import INT32_MAX

OBSERVATION_STATUSES: Final = ("started", "completed", "failed")

UPSERT_OBSERVATION_SQL: Final = """
INSERT INTO ledger.node_observations AS o
    (run_id, node_id, attempt, invocation_seq, invocation_id, status, inputs, outputs, error,
     started_at, settled_at, recorded_at)
VALUES (%(run_id)s, %(node_id)s, %(attempt)s, %(invocation_seq)s, %(invocation_id)s, %(status)s,
        %(inputs)s, %(outputs)s, %(error)s, %(started_at)s, %(settled_at)s, now())
ON CONFLICT (run_id, node_id, attempt, invocation_seq) DO UPDATE
SET invocation_id = EXCLUDED.invocation_id, status = EXCLUDED.status, inputs = EXCLUDED.inputs,
    outputs = EXCLUDED.outputs, error = EXCLUDED.error, started_at = EXCLUDED.started_at,
    settled_at = EXCLUDED.settled_at, recorded_at = EXCLUDED.recorded_at
WHERE (COALESCE(EXCLUDED.settled_at, EXCLUDED.started_at, '-infinity'), EXCLUDED.settled_at IS NOT NULL)
   >= (COALESCE(o.settled_at, o.started_at, '-infinity'), o.settled_at IS NOT NULL)
"""

# No row means no such run; one row with a NULL node_id means no observations.
LIST_OBSERVATIONS_SQL: Final = """
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
    if status not in OBSERVATION_STATUSES:
        raise InvalidInput(f"{field}.status", f"must be one of {', '.join(OBSERVATION_STATUSES)}")
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
        # Free text: repaired (U+FFFD for NUL and lone surrogates), never refused.
        "error": validate.free_text(f"{field}.error", raw.get("error"), optional=True),
        "started_at": validate.epoch_ms(f"{field}.started_at", raw.get("started_at"), optional=True),
        "settled_at": validate.epoch_ms(f"{field}.settled_at", raw.get("settled_at"), optional=True),
    }


def _int4(field: str, value: object) -> int:
    return validate.required_integer(field, value, maximum=INT32_MAX, integral_float=True)


def parse_observations(observations: object) -> list[dict[str, Any]]:
    """Validate a batch; the first bad observation rejects it whole (`InvalidInput` names it)."""
    batch = validate.items("observations", observations, "observations")
    return [parse_observation(f"observations[{i}]", raw) for i, raw in enumerate(batch)]


def _params(run_id: str, obs: dict[str, Any]) -> dict[str, Any]:
    return {
        **obs,
        "run_id": run_id,
        "inputs": None if obs["inputs"] is None else Jsonb(obs["inputs"]),
        "outputs": None if obs["outputs"] is None else Jsonb(obs["outputs"]),
        "started_at": None if obs["started_at"] is None else from_ms(obs["started_at"]),
        "settled_at": None if obs["settled_at"] is None else from_ms(obs["settled_at"]),
    }


async def record_observations(db: Database, run_id: str, observations: list[dict[str, Any]]) -> int:
    """Store observations, keeping the newest per (node, attempt, invocation); returns how many were
    stored (inserted or replacing an older one; an observation older than the stored one counts 0).

    Opens the run if it does not exist yet.
    """
    validate_run_id(run_id)
    parsed = parse_observations(observations)
    if not parsed:
        return 0
    # Stable sort by key: concurrent batches lock rows in one order (no deadlock), and repeats of
    # one invocation keep their batch order.
    parsed.sort(key=lambda obs: (obs["node_id"], obs["attempt"], obs["invocation_seq"]))
    stored = 0
    async with db.transaction() as conn:
        await ensure_run_in_transaction(conn, run_id)
        for obs in parsed:
            cur = await conn.execute(UPSERT_OBSERVATION_SQL, _params(run_id, obs))
            stored += max(cur.rowcount, 0)
    return stored


async def list_observations(db: Database, run_id: str) -> list[shapes.Observation]:
    """The run's observations ordered by node, attempt, invocation; times in epoch ms.

    Raises `NotFound` for an unknown run.
    """
    rows = await read_run_rows(db, LIST_OBSERVATIONS_SQL, run_id)
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
