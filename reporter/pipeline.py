"""The static pipeline of a contract snapshot: ordered top-level steps and dataset namespaces.

The contract snapshot is ``{"staticPipeline": {"substeps": [...]}}`` (camelCase, as the runner
writes it). A step's node id is its ``id``, else ``"<type>-<position>"`` (position from 0 in the
ordered list, so the same contract always yields the same ids). A dataset step's logical namespace
is its ``tableNamespace``, else its ``field``; a physical table namespace belongs to it when equal
or when it starts with the logical one plus ``_`` (the first matching step in pipeline order wins).
Malformed steps (not an object, no string ``type``) are skipped, without shifting later positions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ledger import validate

__all__ = [
    "PipelineNode",
    "StaticPipeline",
    "static_node_id",
    "storable",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineNode:
    node_id: str
    type: str
    tool_id: str | None = None
    logical_namespace: str | None = None


@dataclass(frozen=True, slots=True)
class _DatasetRef:
    node_id: str
    logical_namespace: str
    artifact_table_namespace: str


def storable(name: str) -> bool:
    """Whether the ledger can store `name` as text (no NUL, no lone surrogate): a name it could
    not store is junk, and a step must not be tracked under it."""
    if name.isascii():  # O(1) in CPython; an ASCII string holds no surrogate, so only NUL is left
        return "\x00" not in name
    try:
        validate.required_text("name", name)
    except validate.InvalidInput:
        return False
    return True


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def static_node_id(substep: Mapping[str, Any], index: int) -> str:
    """The node id of the top-level step at `index`: its ``id``, else ``<type>-<index>``."""
    explicit = _text(substep.get("id"))
    if explicit:
        return explicit
    return f"{_text(substep.get('type')) or 'step'}-{index}"


def _pipeline_substeps(contract: object) -> list[tuple[int, Mapping[str, Any]]]:
    """The well-formed top-level substeps with their positions."""
    if not isinstance(contract, Mapping):
        return []
    pipeline = contract.get("staticPipeline")
    if not isinstance(pipeline, Mapping):
        return []
    substeps = pipeline.get("substeps")
    if not isinstance(substeps, list):
        return []
    return [
        (index, step)
        for index, step in enumerate(substeps)
        if isinstance(step, Mapping) and isinstance(step.get("type"), str)
    ]


class StaticPipeline:
    """The ordered nodes of a contract and the dataset namespace lookup."""

    def __init__(self, contract: object) -> None:
        nodes: list[PipelineNode] = []
        for index, step in _pipeline_substeps(contract):
            step_type = str(step["type"])
            logical = None
            if step_type == "dataset":
                logical = _text(step.get("tableNamespace")) or _text(step.get("field")) or None
            nodes.append(
                PipelineNode(
                    node_id=static_node_id(step, index),
                    type=step_type,
                    tool_id=_text(step.get("toolId")) or None,
                    logical_namespace=logical,
                )
            )
        self.nodes: tuple[PipelineNode, ...] = tuple(nodes)
        self._datasets = [(n.logical_namespace, n.node_id) for n in nodes if n.logical_namespace]
        self._cache: dict[str, _DatasetRef | None] = {}

    def resolve_namespace(self, physical: object) -> _DatasetRef | None:
        """The dataset step a physical table namespace belongs to, or None."""
        # Every map event names its namespace: the answer is remembered per name as sent.
        if isinstance(physical, str):
            try:
                return self._cache[physical]
            except KeyError:
                pass
        found = self._resolve(physical)
        if isinstance(physical, str) and len(self._cache) < 10_000:  # runner namespaces are few
            self._cache[physical] = found
        return found

    def _resolve(self, physical: object) -> _DatasetRef | None:
        name = _text(physical)
        if not name or not storable(name):
            return None
        for logical, node_id in self._datasets:
            if name == logical or name.startswith(logical + "_"):
                return _DatasetRef(node_id, logical, name)
        return None

    def map_node_id(self, record: Mapping[str, Any]) -> str | None:
        """The node a map event or checkpoint frame names: its ``mapNodeId``, else the dataset step
        that owns its table namespace (the inline runner sends ``mapNodeId: null``)."""
        explicit = record.get("mapNodeId")
        if isinstance(explicit, str) and explicit.strip():
            return explicit.strip() if storable(explicit) else None
        ref = self.resolve_namespace(record.get("artifactTableNamespace") or record.get("logicalNamespace"))
        return ref.node_id if ref is not None else None
