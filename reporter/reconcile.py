"""Terminal reconciliation: the data plane's truth overrides the event-fed counters.

Live counters can be stale or missing (a dropped ``map.completed``, a node id that did not
resolve, a run that streamed no events at all). At the end of a completed or failed run the
reporter therefore rewrites each map node from, in order:

1. the runner result's ``checkpoint.mapFrames`` — the map executor's settled account. Only frames
   whose status is ``completed``/``failed`` count; the ``*Count`` fields are trusted and the key
   arrays (emptied at completion) are used only when a count is absent;
2. the ledger's sheet row outcomes per table namespace — the reconciliation of record: applied
   last, so they win when the two disagree, and they alone give a zero-event run real progress.

Durable docflow node observations are folded in separately and only when at least as recent as
what the node already shows (later attempt, or same attempt and a >= invocation sequence).

Each function returns ``(node_id, patch)`` pairs for `ProgressState.set_node_progress`; none of
them touches the state, so they are tested as plain functions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from reporter.pipeline import StaticPipeline
from reporter.progress import NodeProgress, settled_map_patch
from reporter.wire import as_count, as_int, invocation_sequence

__all__ = [
    "checkpoint_patches",
    "observation_patches",
    "sheet_outcome_patches",
]

_Patch = dict[str, Any]


def _count(value: object) -> int | None:
    # A count may arrive as a float (JavaScript), even NaN or Infinity: those count as absent.
    if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
        value = int(value)
    return as_count(value)


def checkpoint_patches(
    result: Mapping[str, Any] | None,
    pipeline: StaticPipeline,
    nodes: Mapping[str, NodeProgress],
    now_ms: int,
) -> list[tuple[str, _Patch]]:
    """Patches from ``result.checkpoint.mapFrames`` for the settled map frames."""
    checkpoint = result.get("checkpoint") if isinstance(result, Mapping) else None
    frames = checkpoint.get("mapFrames") if isinstance(checkpoint, Mapping) else None
    if not isinstance(frames, Mapping):
        return []
    patches: list[tuple[str, _Patch]] = []
    for frame in frames.values():
        if not isinstance(frame, Mapping) or frame.get("status") not in ("completed", "failed"):
            continue
        node_id = pipeline.map_node_id(frame)
        if node_id is None:
            continue
        failed = _count(frame.get("failedRowsCount")) or 0
        completed = _count(frame.get("completedRowsCount"))
        if completed is None:
            keys = frame.get("completedRowKeys")
            completed = len(keys) if isinstance(keys, list) else 0
        total = _count(frame.get("totalRows")) or 0
        if total <= 0:
            total = completed + failed
        existing = nodes.get(node_id) or NodeProgress()
        patch = settled_map_patch(completed, failed, total)
        namespace = frame.get("artifactTableNamespace")
        patch["artifact_table_namespace"] = (
            namespace if isinstance(namespace, str) and namespace else existing.artifact_table_namespace
        )
        # Settled, so started: at the latest when it settled (as a sheet outcome has it).
        patch["started_at"] = existing.started_at if existing.started_at is not None else now_ms
        patch["completed_at"] = existing.completed_at if existing.completed_at is not None else now_ms
        patches.append((node_id, patch))
    return patches


def sheet_outcome_patches(
    outcomes: Iterable[object],
    pipeline: StaticPipeline,
    nodes: Mapping[str, NodeProgress],
    now_ms: int,
) -> list[tuple[str, _Patch]]:
    """Patches from per-namespace sheet outcomes ``{table_namespace, completed, failed, total}``.

    Keys are accepted in snake_case (the ledger's API) or camelCase (the runner's wire format). Outcomes of
    namespaces no dataset step owns, and all-zero outcomes, are skipped.
    """
    patches: list[tuple[str, _Patch]] = []
    for outcome in outcomes:
        if not isinstance(outcome, Mapping):
            continue
        namespace = outcome.get("table_namespace", outcome.get("tableNamespace"))
        ref = pipeline.resolve_namespace(namespace)
        if ref is None:
            continue
        completed = _count(outcome.get("completed")) or 0
        failed = _count(outcome.get("failed")) or 0
        total = _count(outcome.get("total")) or 0
        if total <= 0:
            total = completed + failed
        if total <= 0:  # nothing counted: completed + failed is 0 as well
            continue
        existing = nodes.get(ref.node_id) or NodeProgress()
        patch = settled_map_patch(completed, failed, total)
        patch["artifact_table_namespace"] = existing.artifact_table_namespace or ref.artifact_table_namespace
        patch["started_at"] = existing.started_at if existing.started_at is not None else now_ms
        patch["completed_at"] = existing.completed_at if existing.completed_at is not None else now_ms
        patches.append((ref.node_id, patch))
    return patches


def _field(record: Mapping[str, Any], snake: str, camel: str) -> Any:
    return record[snake] if snake in record else record.get(camel)


def observation_patches(
    observations: Iterable[object],
    nodes: Mapping[str, NodeProgress],
    now_ms: int,
) -> list[tuple[str, _Patch]]:
    """Patches from durable docflow observations that are at least as recent as the node's I/O.

    Records are ``{node_id, attempt, invocation_seq, invocation_id?, status started|completed|
    failed, inputs?, outputs?, error?, started_at?, settled_at?}`` (camelCase accepted too).
    Observations are applied in the given order, each compared with the result of the previous.
    """
    latest: dict[str, tuple[int | None, int, int | None]] = {}
    patches: list[tuple[str, _Patch]] = []
    for record in observations:
        if not isinstance(record, Mapping):
            continue
        raw_node = _field(record, "node_id", "nodeId")
        attempt = as_int(record.get("attempt"))
        status = record.get("status")
        # Attempts count from 0: a negative one is junk, like a missing one.
        if not isinstance(raw_node, str) or not raw_node.strip() or attempt is None or attempt < 0:
            continue
        if status not in ("started", "completed", "failed"):
            continue
        node_id = raw_node.strip()
        seq = as_int(_field(record, "invocation_seq", "invocationSeq"))
        seq = -1 if seq is None else seq
        if node_id in latest:
            current_attempt, current_seq, current_started = latest[node_id]
        else:
            node = nodes.get(node_id)
            io = node.node_io if node is not None and node.node_io else {}
            # None when the node holds no attempt: then every observation is more recent.
            current_attempt = as_int(io.get("attempt"))
            current_seq = invocation_sequence(io.get("invocation_id"))
            current_started = node.started_at if node is not None else None
        if current_attempt is not None and (
            attempt < current_attempt or (attempt == current_attempt and seq < current_seq)
        ):
            continue
        started_at = as_int(_field(record, "started_at", "startedAt"))
        settled_at = as_int(_field(record, "settled_at", "settledAt"))
        at = settled_at if settled_at is not None else started_at if started_at is not None else now_ms
        node_io: dict[str, Any] = {"attempt": attempt}
        invocation_id = _field(record, "invocation_id", "invocationId")
        if invocation_id:
            node_io["invocation_id"] = invocation_id
        if record.get("inputs") is not None:
            node_io["inputs"] = record["inputs"]
        if status == "completed":
            if record.get("outputs") is not None:
                node_io["outputs"] = record["outputs"]
            node_io["error"] = None
        elif status == "failed":
            node_io["error"] = record.get("error") or "Docflow node failed."
        first_start = current_started if current_started is not None else started_at
        patch: _Patch = {"started_at": first_start if first_start is not None else at, "node_io": node_io}
        if status != "started":
            patch["completed_at"] = at
        patches.append((node_id, patch))
        latest[node_id] = (attempt, seq, patch["started_at"])
    return patches
