"""The runner protocol and the contract file as JSON Schemas, shipped with the package.

``schemas/runner-protocol.v1.json`` is every line a runner may write to ``ledger report``: each kind,
its fields and their bounds, and the ``result`` line with its statuses. ``schemas/contract.v1.json``
is the contract file (``staticPipeline.substeps``). Each schema's ``$id`` ends in its version, so a
runner can say which one it speaks.

The schemas are the contract, not the parser: the reporter reads lines with plain checks
(`reporter.lines`) that its tests hold against the runner schema, so no validator runs per line.
Bounds JSON Schema cannot say are annotations: ``x-maxBytes`` (a string's UTF-8 length, longer ones
cut around ``x-cutMarker``), ``x-maxDepth`` (a stored value's nesting) and ``x-bodyLimitBytes``.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any, Final

RUNNER_PROTOCOL_FILE: Final = "runner-protocol.v1.json"
CONTRACT_FILE: Final = "contract.v1.json"


@cache
def _text(name: str) -> str:
    return resources.files("reporter").joinpath("schemas", name).read_text(encoding="utf-8")


def runner_schema_text() -> str:
    """The runner protocol schema as shipped (what ``ledger report --schema`` prints)."""
    return _text(RUNNER_PROTOCOL_FILE)


def runner_schema() -> dict[str, Any]:
    """The runner protocol schema (a fresh copy: callers may change it)."""
    schema: dict[str, Any] = json.loads(runner_schema_text())
    return schema


def contract_schema() -> dict[str, Any]:
    """The contract file's schema (a fresh copy)."""
    schema: dict[str, Any] = json.loads(_text(CONTRACT_FILE))
    return schema


def runner_protocol_id() -> str:
    """The runner protocol's ``$id``, its version last."""
    return str(runner_schema()["$id"])
