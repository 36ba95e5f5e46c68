"""The static pipeline of a contract snapshot: ordered top-level steps and dataset namespaces.

The contract snapshot is ``{"staticPipeline": {"substeps": [...]}}`` (camelCase, as the runner
writes it). A step's node id is its ``id``, else ``"<type>-<position>"`` (position from 0 in the
ordered list, so the same contract always yields the same ids). A dataset step's logical namespace
is its ``tableNamespace``, else its ``field``; a physical table namespace belongs to it when equal
or when it starts with the logical one plus ``_`` (the first matching step in pipeline order wins).
Malformed steps (not an object, no string ``type``) are skipped, without shifting later positions.

`contract_problem` checks a contract file against its shipped schema (``schemas/contract.v1.json``,
whose rules it restates as plain checks; the tests hold the two together) and that no two steps
share a node id: ``ledger report`` refuses such a contract before it reads any input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from ledger import validate

__all__ = [
    "PipelineNode",
    "StaticPipeline",
    "contract_problem",
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


_STEP_TEXT_FIELDS = ("id", "field", "tableNamespace", "toolId")


def _kind(value: object) -> str:
    """What a decoded JSON value is, in JSON's words."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null" if value is None else "a string"


def _step_problem(step: object) -> str | None:
    if not isinstance(step, Mapping):
        return f"must be an object, not {_kind(step)}"
    if "type" not in step:
        return "has no type"
    for name in ("type", *_STEP_TEXT_FIELDS):
        if name in step and not isinstance(step[name], str):
            return f"{name} must be a string, not {_kind(step[name])}"
    if "id" in step and not step["id"].strip():
        return "id must not be blank"
    return None


def contract_problem(contract: object) -> str | None:
    """What is wrong with a contract file's content (one line naming the place), or None."""
    if not isinstance(contract, Mapping):
        return f"must be a JSON object holding staticPipeline.substeps, not {_kind(contract)}"
    pipeline = contract.get("staticPipeline")
    if "staticPipeline" not in contract:
        return "has no staticPipeline (an object whose substeps lists the steps)"
    if not isinstance(pipeline, Mapping):
        return f"staticPipeline must be an object, not {_kind(pipeline)}"
    if "substeps" not in pipeline:
        held = ", ".join(sorted(map(str, pipeline))) or "nothing"
        return f"staticPipeline has no substeps (the list of steps); it holds {held}"
    substeps = pipeline["substeps"]
    if not isinstance(substeps, list):
        return f"staticPipeline.substeps must be a list, not {_kind(substeps)}"
    seen: dict[str, int] = {}
    for index, step in enumerate(substeps):
        problem = _step_problem(step)
        if problem is not None:
            return f"staticPipeline.substeps[{index}] {problem}"
        node_id = static_node_id(cast("Mapping[str, Any]", step), index)
        if node_id in seen:
            return (
                f"staticPipeline.substeps[{seen[node_id]}] and substeps[{index}] have the same node id "
                f"{node_id!r} (give each step an id of its own)"
            )
        seen[node_id] = index
    return None


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
