"""Which runner lines are lines of the runner protocol: its schema's rules as plain checks.

The protocol is a JSON Schema (`reporter.runner_protocol`); a validator per line would cost the hot
path more than the fold itself, so `junk_reason` checks the same rules by hand, and the tests hold
the two against each other (a line the schema accepts is never junk here, one it refuses always
is). A junk line is skipped whole: nothing in it steers progress.

A line is decoded by `decode_line`, which answers a reason instead of raising for anything a JSON
decoder refuses, however it refuses it: a line nested deeper than `MAX_LINE_DEPTH` is junk (it
could carry no value the ledger stores, and a decoder or any later walk of it would need a stack as
deep), and so is one the decoder cannot parse.

What the checks leave to later stages: a stored value's depth and size (the sanitizer drops the
value and counts it, the line still counts), names the pipeline does not know (the line has no
effect), and lone surrogates in text (repaired or dropped where they are stored).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, TypeGuard

from ledger.validate import INT64_MAX, MAX_JSON_DEPTH, is_number, json_depth
from reporter.pipeline import storable
from reporter.wire import as_count, as_epoch_ms, as_int

__all__ = [
    "ACTIVITY_KIND",
    "DATASET_LIFECYCLE_KIND",
    "DOCFLOW_HIT_KIND",
    "DOCFLOW_NODE_KINDS",
    "EXECUTION_EVENT_CHECKS",
    "EXECUTION_EVENT_KINDS",
    "LINE_CHECKS",
    "MAP_COUNT_KINDS",
    "MAP_START_KINDS",
    "MAX_LINE_DEPTH",
    "TOOL_CALL_SETTLED_KIND",
    "TOOL_CALL_STARTED_KIND",
    "decode_line",
    "general_junk_reason",
    "junk_reason",
]

# How deep a runner line may nest: twice what a request to the ledger may (a line wraps its values
# in a few levels, and a value deeper than the ledger stores is dropped, not the line), far below
# what would exhaust a stack.
MAX_LINE_DEPTH: Final = 2 * MAX_JSON_DEPTH


def decode_line(text: str) -> tuple[object, str | None]:
    """One line of the runner's stream decoded: ``(value, None)``, or ``(None, reason)`` when it
    is not JSON or nests deeper than `MAX_LINE_DEPTH`. Never raises."""
    try:
        value = json.loads(text)
    except RecursionError:
        return None, f"nests deeper than {MAX_LINE_DEPTH} levels"
    except ValueError as exc:
        return None, f"not JSON ({exc})"
    # Nesting needs an opening bracket a level: a line with few of them is answered by counting.
    if text.count("[") + text.count("{") > MAX_LINE_DEPTH and json_depth(value) > MAX_LINE_DEPTH:
        return None, f"nests deeper than {MAX_LINE_DEPTH} levels"
    return value, None


_Check = Callable[[Mapping[str, Any]], str | None]


def _text_or_null(event: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = event.get(key)
        if value is not None and type(value) is not str and not isinstance(value, str):
            return f"{key} must be a string or null"
    return None


def _counts_or_null(event: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = event.get(key)
        # An exact int in range is the usual case: answered without a call.
        if value is None or (type(value) is int and 0 <= value <= INT64_MAX):
            continue
        if as_count(value) is None:
            return f"{key} must be a count (0 to 2^63-1) or null"
    return None


def _is_object(value: object) -> TypeGuard[Mapping[str, Any]]:
    # `type(...) is dict` first: decoded JSON is plain dicts, and the ABC check is the slow way.
    return type(value) is dict or isinstance(value, Mapping)


_MAP_NAMES = ("mapNodeId", "artifactTableNamespace", "logicalNamespace")
_MAP_START_COUNTS = ("totalRows", "completedRows", "failedRows")
_MAP_COUNTS = ("totalRows", "failedRows")


def _name(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip()) and storable(value)


def _map_start(event: Mapping[str, Any]) -> str | None:
    return _text_or_null(event, _MAP_NAMES) or _counts_or_null(event, _MAP_START_COUNTS)


def _map_counts(event: Mapping[str, Any]) -> str | None:
    completed = event.get("completedRows")
    if not (type(completed) is int and 0 <= completed <= INT64_MAX) and as_count(completed) is None:
        return "completedRows must be a count (0 to 2^63-1)"
    return _text_or_null(event, _MAP_NAMES) or _counts_or_null(event, _MAP_COUNTS)


def _docflow_hit(event: Mapping[str, Any]) -> str | None:
    if not _name(event.get("nodeId")):
        return "nodeId must be non-blank text"
    at = event.get("at")
    if at is not None and as_epoch_ms(at) is None:
        return "at must be epoch milliseconds or null"
    return None


def _docflow_node(event: Mapping[str, Any]) -> str | None:
    problem = _docflow_hit(event)
    if problem is not None:
        return problem
    attempt = as_int(event.get("attempt"))
    if attempt is None or not 0 <= attempt <= INT64_MAX:
        return "attempt must be an integer from 0 to 2^63-1"
    for key in ("inputsTruncated", "outputsTruncated"):
        flag = event.get(key)
        if flag is not None and not isinstance(flag, bool):
            return f"{key} must be a boolean or null"
    return _text_or_null(event, ("invocationId", "error"))


def _tool_call(event: Mapping[str, Any]) -> str | None:
    tool_id = event.get("toolId")
    if not isinstance(tool_id, str) or not tool_id:
        return "toolId must be a non-empty string"
    return _text_or_null(event, ("outcome",))


def _activity(event: Mapping[str, Any]) -> str | None:
    observation = event.get("observation")
    if not _is_object(observation):
        return "observation must be an object"
    if not _name(observation.get("activityId")):
        return "observation.activityId must be non-blank text"
    if not is_number(observation.get("observedAt")):
        return "observation.observedAt must be a number"
    return None


def _lifecycle(event: Mapping[str, Any]) -> str | None:
    return _text_or_null(event, ("tableNamespace", "phase"))


# The execution event kinds of the runner protocol, in the families the fold reads them by: the one
# registry of them. The checks below and the fold's handlers (`reporter.folding`) are built from
# these names, so a kind is added here or nowhere.
MAP_START_KINDS: Final = ("map.preparing", "map.started", "map.resumed")
MAP_COUNT_KINDS: Final = ("map.progress", "map.suspended", "map.completed", "map.failed")
DOCFLOW_HIT_KIND: Final = "docflow.node.hit"
DOCFLOW_NODE_KINDS: Final = ("docflow.node.started", "docflow.node.completed", "docflow.node.failed")
TOOL_CALL_STARTED_KIND: Final = "tool.call.started"
TOOL_CALL_SETTLED_KIND: Final = "tool.call.settled"
ACTIVITY_KIND: Final = "activity.observed"
DATASET_LIFECYCLE_KIND: Final = "dataset.lifecycle"

EXECUTION_EVENT_CHECKS: Final[Mapping[str, _Check]] = MappingProxyType(
    {
        **dict.fromkeys(MAP_START_KINDS, _map_start),
        **dict.fromkeys(MAP_COUNT_KINDS, _map_counts),
        DOCFLOW_HIT_KIND: _docflow_hit,
        **dict.fromkeys(DOCFLOW_NODE_KINDS, _docflow_node),
        TOOL_CALL_STARTED_KIND: _tool_call,
        TOOL_CALL_SETTLED_KIND: _tool_call,
        ACTIVITY_KIND: _activity,
        DATASET_LIFECYCLE_KIND: _lifecycle,
    }
)
# Every execution event kind: the keys of the one registry.
EXECUTION_EVENT_KINDS: Final = frozenset(EXECUTION_EVENT_CHECKS)


def _log(line: Mapping[str, Any]) -> str | None:
    text = line.get("line")
    if not text or not isinstance(text, str):
        return "line must be a non-empty string"
    source = line.get("source")
    if source is not None and type(source) is not str and not isinstance(source, str):
        return "source must be a string or null"
    return None


def _execution_event(line: Mapping[str, Any]) -> str | None:
    event = line.get("event")
    if not _is_object(event):
        return "event must be an object"
    kind = event.get("type")
    check = EXECUTION_EVENT_CHECKS.get(kind) if type(kind) is str or isinstance(kind, str) else None
    if check is None:
        return "event.type is not an execution event kind of the runner protocol"
    problem = check(event)
    return None if problem is None else f"{kind}: {problem}"


def _row_update(line: Mapping[str, Any]) -> str | None:
    return _text_or_null(line, ("tableNamespace", "rowKey"))


def _result(line: Mapping[str, Any]) -> str | None:
    # Its status is judged where the run ends (a status it does not know ends the run failed).
    return None


LINE_CHECKS: dict[str, _Check] = {
    "log": _log,
    "execution_event": _execution_event,
    "row_update": _row_update,
    "result": _result,
}


def junk_reason(line: object) -> str | None:
    """Why `line` (one decoded JSON line) is not a line of the runner protocol, or None."""
    # The hot path: the most frequent event, well-formed, answered inline (a call costs more than
    # these checks). Anything else takes the general path, which has the last word. (The fold
    # checks log and row_update lines itself, before it calls this.)
    if type(line) is dict and line.get("type") == "execution_event":
        event = line.get("event")
        if type(event) is dict and event.get("type") == "map.progress":
            completed, total, failed = (
                event.get("completedRows"),
                event.get("totalRows"),
                event.get("failedRows"),
            )
            node, artifact = event.get("mapNodeId"), event.get("artifactTableNamespace")
            if (
                type(completed) is int
                and 0 <= completed <= INT64_MAX
                and (total is None or (type(total) is int and 0 <= total <= INT64_MAX))
                and (failed is None or (type(failed) is int and 0 <= failed <= INT64_MAX))
                and (node is None or type(node) is str)
                and (artifact is None or type(artifact) is str)
                and (event.get("logicalNamespace") is None or type(event["logicalNamespace"]) is str)
            ):
                return None
    return general_junk_reason(line)


def general_junk_reason(line: object) -> str | None:
    """`junk_reason` by its general path alone: every rule, without the hot path's shortcut (which
    must answer as this does)."""
    if not _is_object(line):
        return "a line must be a JSON object"
    kind = line.get("type")
    check = LINE_CHECKS.get(kind) if type(kind) is str or isinstance(kind, str) else None
    if check is None:
        return "type is not a line kind of the runner protocol"
    return check(line)
