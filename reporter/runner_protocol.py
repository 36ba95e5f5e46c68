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

__all__ = [
    "CONTRACT_FILE",
    "REFERENCE_BEGIN",
    "RUNNER_PROTOCOL_FILE",
    "contract_schema",
    "runner_protocol_id",
    "runner_schema",
    "runner_schema_text",
    "with_reference",
]

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


# -- the reference part of the runner protocol's docs page -------------------------------------------

REFERENCE_BEGIN: Final = "<!-- reference: generated from the runner protocol's schema; do not edit -->"
_REFERENCE_END: Final = "<!-- end of reference -->"


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """`node` with its ``$ref`` followed; its own keys (a description) win over the target's."""
    while "$ref" in node:
        target: Any = root
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **{key: value for key, value in node.items() if key != "$ref"}}
    return node


def _type(node: dict[str, Any]) -> str:
    if "const" in node:
        return f"`{json.dumps(node['const'], ensure_ascii=False)}`"
    if "enum" in node:
        return " or ".join(f"`{value}`" for value in node["enum"])
    if "oneOf" in node:
        return "object"
    kinds = node.get("type")
    if kinds is None:
        return "any JSON"
    names = kinds if isinstance(kinds, list) else [kinds]
    if "array" in names and isinstance(node.get("items"), dict) and "type" in node["items"]:
        names = [f"array of {node['items']['type']}s" if n == "array" else n for n in names]
    return " or ".join(names)


def _bounds(node: dict[str, Any]) -> str:
    out = []
    if "minimum" in node or "maximum" in node:
        out.append(f"{node.get('minimum', '…')} to {node.get('maximum', '…')}")
    if "pattern" in node:
        out.append("non-blank, no NUL")
    elif node.get("minLength"):
        out.append(f"at least {node['minLength']} character")
    if "x-maxBytes" in node:
        out.append(f"cut above {node['x-maxBytes']} UTF-8 bytes")
    if "x-maxDepth" in node:
        out.append(f"dropped when nested deeper than {node['x-maxDepth']} levels")
    return "; ".join(out)


def _fields(node: dict[str, Any], root: dict[str, Any], prefix: str = "") -> list[str]:
    rows = []
    required = set(node.get("required", ()))
    for name, field in node.get("properties", {}).items():
        resolved = _resolve(field, root)
        description = " ".join(resolved.get("description", "").split()).replace("|", "\\|")
        rows.append(
            f"| `{prefix}{name}` | {_type(resolved)} | {'yes' if name in required else ''} "
            f"| {_bounds(resolved)} | {description} |"
        )
        if resolved.get("type") == "object" and "properties" in resolved and name != "event":
            rows.extend(_fields(resolved, root, f"{prefix}{name}."))
    return rows


def _table(title: str, node: dict[str, Any], root: dict[str, Any]) -> list[str]:
    description = " ".join(node.get("description", "").split())
    depth = f" Nested deeper than {node['x-maxDepth']} levels, it is dropped." if "x-maxDepth" in node else ""
    return [
        f"### {title}",
        "",
        *([description + depth, ""] if description else []),
        "| field | type | required | bounds | meaning |",
        "| --- | --- | --- | --- | --- |",
        *_fields(node, root),
        "",
    ]


def _reference_markdown() -> str:
    """The reference part of ``docs/runner-protocol.md``: every line kind and its fields, the
    contract file's, and the bounds, all from the schemas (a test keeps the page up to date)."""
    root = runner_schema()
    out = [REFERENCE_BEGIN, "", f"Runner protocol `{root['$id']}`.", ""]
    for branch in root["oneOf"]:
        line = _resolve(branch, root)
        kind = line["properties"]["type"]["const"]
        if kind != "execution_event":
            out += _table(f"`{kind}`", line, root)
            continue
        out += _table("`execution_event`", line, root)
        for event_branch in _resolve(line["properties"]["event"], root)["oneOf"]:
            event = _resolve(event_branch, root)
            kind_schema = event["properties"]["type"]
            kinds = kind_schema.get("enum", [kind_schema.get("const")])
            out += _table(f"`execution_event`: {', '.join(f'`{k}`' for k in kinds)}", event, root)
    out += _table(
        "a result's map frame (`checkpoint.mapFrames.*`)", _resolve(root["$defs"]["mapFrame"], root), root
    )
    contract = contract_schema()
    out += [f"### The contract file (`{contract['$id']}`)", "", " ".join(contract["description"].split()), ""]
    out += _table("a substep (`staticPipeline.substeps[]`)", contract["$defs"]["substep"], contract)
    out += [_REFERENCE_END]
    return "\n".join(out) + "\n"


def with_reference(page: str) -> str:
    """`page` with its reference part replaced by `_reference_markdown()`."""
    head, _, rest = page.partition(REFERENCE_BEGIN)
    _, _, tail = rest.partition(_REFERENCE_END + "\n")
    return head + _reference_markdown() + tail


if __name__ == "__main__":  # python -m reporter.runner_protocol docs/runner-protocol.md: regenerate
    import sys
    from pathlib import Path

    for name in sys.argv[1:]:
        path = Path(name)
        path.write_text(with_reference(path.read_text(encoding="utf-8")), encoding="utf-8")
