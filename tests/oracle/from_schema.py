"""Runner lines drawn from the runner protocol's JSON Schema, with every bound probed at its edges.

A walk of the part of JSON Schema the protocol uses (``$ref``, ``oneOf``/``anyOf``, ``const``,
``enum``, ``type`` lists, ``properties``/``required``/``additionalProperties``, ``items``,
``minimum``/``maximum``, ``minLength``, ``pattern``) plus its annotations: ``x-maxBytes`` (a string
drawn at the bound's edges and far past it, up to several MB) and ``x-maxDepth`` (a value nested at
the bound's edges). hypothesis-jsonschema would be the off-the-shelf walk, but its 0.23 release
cannot draw an object with the Hypothesis this project installs.

* `line_kinds` lists every kind of line the schema defines (an ``execution_event`` per event
  kind), so a kind added to the schema is drawn the day it is added;
* `valid_lines` draws lines the schema accepts; ``names`` lets a caller mix names of its own into
  the properties it names (the oracle's contract vocabulary), which must be valid values there;
* `broken_lines` draws a valid line and breaks one rule of it (a bound passed by one, a required
  field missing, a wrong type, an unknown kind): lines the schema refuses.

Integers are drawn mostly at their bounds (min, min+1, max-1, max) and small; big strings are a
drawn byte length built from a drawn filler character (1 to 4 UTF-8 bytes), so a multi-MB line
costs Hypothesis a few choices, not megabytes of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

from ledger import validate
from reporter.runner_protocol import runner_schema

Schema = Mapping[str, Any]
Names = Mapping[str, st.SearchStrategy[Any]]

SCHEMA = runner_schema()
FILLERS = ("a", "é", "€", "😀")  # 1, 2, 3 and 4 bytes in UTF-8
# Sizes at and past the service's body limit, in bytes: one line or value too big for any upload.
BODY = validate.MAX_BODY_BYTES
BIG_SIZES = (BODY - 1, BODY, BODY + 1, 1_200_000, 3_000_000)
SMALL_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8)


def resolve(schema: Schema, root: Schema = SCHEMA) -> Schema:
    """`schema` with a local ``$ref`` followed (repeatedly)."""
    while "$ref" in schema:
        path = schema["$ref"].removeprefix("#/").split("/")
        target: Any = root
        for part in path:
            target = target[part]
        schema = target
    return schema


def line_kinds(root: Schema = SCHEMA) -> dict[str, Schema]:
    """Every kind of line, by name: a line's ``type`` const, an execution event's kind(s)."""
    kinds: dict[str, Schema] = {}
    for branch in root["oneOf"]:
        line = resolve(branch, root)
        if line["properties"]["type"].get("const") == "execution_event":
            for event_branch in resolve(line["properties"]["event"], root)["oneOf"]:
                event = resolve(event_branch, root)
                type_schema = event["properties"]["type"]
                for kind in type_schema.get("enum", [type_schema.get("const")]):
                    kinds[kind] = _wrapped(line, event, kind)
        else:
            kinds[line["properties"]["type"]["const"]] = line
    return kinds


def _wrapped(line: Schema, event: Schema, kind: str) -> Schema:
    """The line schema of one execution event kind (its ``event`` narrowed to that kind)."""
    narrowed = {**event, "properties": {**event["properties"], "type": {"const": kind}}}
    return {**line, "properties": {**line["properties"], "event": narrowed}}


# -- bounded values ---------------------------------------------------------------------------------


def sized_text(n_bytes: int, filler: str) -> str:
    """A string of exactly `n_bytes` UTF-8 bytes: `filler` repeated between ``<`` and ``>``,
    padded with ASCII (so a cut line shows which ends it kept)."""
    if n_bytes < 2:
        return "x" * n_bytes
    repeat, pad = divmod(n_bytes - 2, len(filler.encode()))
    return "<" + filler * repeat + "x" * pad + ">"


def bytes_around(limit: int) -> st.SearchStrategy[int]:
    """A byte length at the bound's edges, a little under it, or past the service's body limit."""
    edges = st.sampled_from((limit - 1, limit, limit + 1))
    near = st.integers(limit - 64, limit + 64)
    # Past the body limit is the costly case: one draw in nine.
    return st.one_of(edges, edges, edges, edges, near, near, near, near, st.sampled_from(BIG_SIZES)).filter(
        lambda n: n > 0
    )


@st.composite
def bounded_text(draw: st.DrawFn, limit: int) -> str:
    return sized_text(draw(bytes_around(limit)), draw(st.sampled_from(FILLERS)))


def nested(depth: int, shape: str, leaf: Any = "bottom") -> Any:
    """JSON nested exactly `depth` levels (a list or an object at every level)."""
    value = leaf
    for _ in range(depth):
        value = [value] if shape == "list" else {"n": value}
    return value


def depth_edges(limit: int) -> st.SearchStrategy[int]:
    """A depth at the bound's edges, mostly; sometimes at the request's own bound's or far past."""
    request = validate.MAX_JSON_DEPTH
    return st.one_of(
        st.sampled_from((limit - 1, limit, limit + 1)),
        st.sampled_from((limit - 1, limit, limit + 1)),
        st.sampled_from((request - 1, request, request + 1, 300)),
    )


def _integers(schema: Schema) -> st.SearchStrategy[int]:
    low, high = schema.get("minimum"), schema.get("maximum")
    low = -(2**63) if low is None else math.ceil(low)
    high = 2**63 - 1 if high is None else math.floor(high)
    edges = sorted({n for n in (low, low + 1, high - 1, high) if low <= n <= high})
    return st.one_of(st.sampled_from(edges), st.integers(low, min(high, low + 3_000)), st.integers(low, high))


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), SMALL_TEXT)
small_json = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(SMALL_TEXT, children, max_size=3),
    max_leaves=6,
)


@st.composite
def stored_value(draw: st.DrawFn, max_depth: int | None) -> Any:
    """Any JSON value; sometimes nested at the depth bound's edges, or bigger than a request body."""
    pick = draw(st.integers(0, 19))
    if max_depth is not None and pick < 3:
        return nested(draw(depth_edges(max_depth)), draw(st.sampled_from(("list", "dict"))))
    if pick == 3:
        return {"blob": sized_text(draw(st.sampled_from(BIG_SIZES)), draw(st.sampled_from(FILLERS)))}
    return draw(small_json)


# -- the walk ---------------------------------------------------------------------------------------


def valid(schema: Schema, names: Names | None = None, *, root: Schema = SCHEMA) -> st.SearchStrategy[Any]:
    """Values `schema` accepts."""
    names = names or {}
    schema = resolve(schema, root)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    for combinator in ("oneOf", "anyOf"):
        if combinator in schema:
            return st.one_of(*(valid(branch, names, root=root) for branch in schema[combinator]))
    kind = schema.get("type")
    if kind is None:
        return stored_value(schema.get("x-maxDepth"))
    if isinstance(kind, list):
        return st.one_of(*(valid({**schema, "type": one}, names, root=root) for one in kind))
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return _integers(schema)
    if kind == "number":
        return st.one_of(_integers(schema), st.floats(allow_nan=False, allow_infinity=False))
    if kind == "string":
        return _strings(schema)
    if kind == "array":
        return st.lists(valid(schema.get("items", {}), names, root=root), max_size=4)
    if kind == "object":
        return _objects(schema, names, root)
    raise ValueError(f"the walk does not know type {kind!r}")


def _strings(schema: Schema) -> st.SearchStrategy[str]:
    low = schema.get("minLength", 0)
    if "pattern" in schema:
        plain: st.SearchStrategy[str] = st.from_regex(
            schema["pattern"], fullmatch=True, alphabet=st.characters(codec="utf-8")
        )
    else:
        plain = SMALL_TEXT
    plain = plain.filter(lambda s: len(s) >= low)
    if "x-maxBytes" in schema:
        return st.one_of(plain, plain, plain, bounded_text(schema["x-maxBytes"]))
    return plain


@st.composite
def _objects(draw: st.DrawFn, schema: Schema, names: Names, root: Schema) -> dict[str, Any]:
    properties: Mapping[str, Schema] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    value: dict[str, Any] = {}
    for key, subschema in properties.items():
        if key not in required and not draw(st.booleans()):
            continue
        strategy = valid(subschema, names, root=root)
        if key in names:
            strategy = st.one_of(names[key], names[key], strategy)
        value[key] = draw(strategy)
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        for key in draw(st.lists(st.sampled_from(("f1", "f2", "f3")), unique=True, max_size=3)):
            value[key] = draw(valid(extra, names, root=root))
    depth = schema.get("x-maxDepth")
    if depth is not None and draw(st.integers(0, 9)) == 0:
        # The object itself nested at the bound's edges (its own level counts).
        value["deep"] = nested(draw(depth_edges(depth)) - 1, draw(st.sampled_from(("list", "dict"))))
    return value


def valid_lines(
    names: Names | None = None, *, weights: Mapping[str, int] | None = None, root: Schema = SCHEMA
) -> st.SearchStrategy[dict[str, Any]]:
    """Lines of every kind the schema defines (a kind without a weight weighs 1)."""
    weights = weights or {}
    branches = [
        valid(schema, names, root=root)
        for kind, schema in line_kinds(root).items()
        for _ in range(weights.get(kind, 1))  # a weight of 0 leaves the kind out
    ]
    return st.one_of(*branches)


# -- lines the schema refuses ----------------------------------------------------------------------


def _breakers(schema: Schema, root: Schema) -> list[tuple[str, Any]]:
    """Ways to break a value of `schema` (a replacement each), bounds first."""
    schema = resolve(schema, root)
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds] if kinds else []
    out: list[tuple[str, Any]] = []
    if "maximum" in schema:
        out.append(("maximum+1", schema["maximum"] + 1))
    if "minimum" in schema:
        out.append(("minimum-1", schema["minimum"] - 1))
    if schema.get("minLength", 0) > 0 or "pattern" in schema:
        out.append(("blank", ""))
    if "const" in schema or "enum" in schema:
        out.append(("unknown value", "no.such.kind"))
    if kinds and "object" not in kinds:
        out.append(("wrong type", [] if "array" not in kinds else {"not": "a list"}))
    elif "object" in kinds:
        out.append(("not an object", "x"))
    return out


@st.composite
def broken_lines(
    draw: st.DrawFn, exclude: tuple[str, ...] = (), root: Schema = SCHEMA
) -> tuple[str, dict[str, Any]]:
    """A line the schema refuses, and what was broken: one field of a valid line of any kind but
    those in `exclude` (the line's own ``type`` and the ``result`` line's ``status`` included)."""
    kinds = line_kinds(root)
    kind = draw(st.sampled_from(sorted(set(kinds) - set(exclude))))
    schema = kinds[kind]
    line = draw(valid(schema, root=root))
    # Where a field can be broken: the line, or its execution event (never a stored value).
    holder, holder_schema, where = line, schema, ""
    if kind not in ("log", "row_update", "result") and draw(st.integers(0, 4)) > 0:
        holder, holder_schema, where = line["event"], resolve(schema["properties"]["event"], root), "event."
    properties = holder_schema["properties"]
    choices: list[tuple[str, Any]] = [
        (f"{where}{key} {how}", (key, replacement))
        for key, subschema in properties.items()
        for how, replacement in _breakers(subschema, root)
    ]
    choices += [(f"{where}{key} missing", (key, None)) for key in holder_schema.get("required", ())]
    what, (key, replacement) = draw(st.sampled_from(choices))
    if what.endswith(" missing"):
        holder.pop(key, None)
    else:
        holder[key] = replacement
    return what, line
