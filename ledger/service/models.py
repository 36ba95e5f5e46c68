"""Request bodies and parameters of the HTTP API, in snake_case: the names clients and workers rely on.

The models check JSON types only (strict: no "5" for 5, unknown fields refused); every rule about
values (non-empty, ranges, clamping, states) is the library's, which answers `InvalidInput` naming
the field. The OpenAPI document still shows those rules (`json_schema_extra`: documented, not
enforced here, so the library's messages stay the ones a client sees), so a client or a fuzzer
knows what is accepted before it asks.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from fastapi import Depends, Path, Query, Request
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from ledger.ingest.rules import DEFAULT_MAX_ATTEMPT_STEP
from ledger.ingest.upload import STEP_POSITION_KINDS, UPLOAD_STATUSES
from ledger.runlog.events import INGESTION_TYPES, RESERVED_KEYS, TERMINAL_STATUSES
from ledger.runlog.events import RunId as CheckedRunId
from ledger.service.middleware import checked_run_id
from ledger.validate import (
    INT32_MAX,
    INT64_MAX,
    LIVE_LOG_TAIL_LIMIT,
    MAX_EPOCH_MS,
    MAX_PIPELINE_STEPS,
    MAX_RUN_ID_LENGTH,
    MAX_VALUE_DEPTH,
    NODE_COUNT_FIELDS,
    NODE_TIME_FIELDS,
    STEP_STATES,
)

__all__ = [
    "CURSOR_PATTERN",
    "INT4",
    "NON_BLANK_PATTERN",
    "RUN_ID",
    "SEGMENT_PATTERN",
    "STATUS_UPLOAD_SCHEMA",
    "AddEntries",
    "AppendEvents",
    "BlockRun",
    "CancelRun",
    "Claim",
    "IntegralInt",
    "MapRun",
    "Observations",
    "OpenRun",
    "Pool",
    "ReadyEntry",
    "RunId",
    "SetTerminal",
    "SheetRow",
    "SheetRows",
    "Version",
    "VersionIds",
    "digits_at_most",
]

# -- what the library accepts, as JSON Schema patterns (read by Python and ECMA engines alike) ---

# What `str.isspace()` calls whitespace: a value of only these is blank.
_SPACE: Final = r"\x09-\x0d\x1c-\x20\x85\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_CONTROL: Final = r"\x00-\x1f\x7f-\x9f"


def digits_at_most(limit: int) -> str:
    """A regular expression (no anchors) for up to len(str(limit)) ASCII digits whose value is at
    most `limit`: the shorter strings, then same-length ones below it digit by digit, then itself."""
    text = str(limit)
    options = [f"[0-9]{{1,{len(text) - 1}}}"] if len(text) > 1 else []
    for i, digit in enumerate(text):
        if digit != "0":
            options.append(f"{text[:i]}[0-{int(digit) - 1}][0-9]{{{len(text) - i - 1}}}")
    options.append(text)
    return "|".join(options)


# Not blank, no control characters, no '/': a run id, and what a path segment can carry (a '/'
# would address another endpoint).
SEGMENT_PATTERN: Final = f"^[^/{_CONTROL}]*[^/{_CONTROL}{_SPACE}][^/{_CONTROL}]*$"
# Not blank, no NUL: a version, an instance id.
NON_BLANK_PATTERN: Final = f"^[^\\x00]*[^\\x00{_SPACE}][^\\x00]*$"
CURSOR_PATTERN: Final = f"^(-1|now|{digits_at_most(INT64_MAX)})$"

_RUN_ID_SCHEMA: Final[dict[str, Any]] = {
    "minLength": 1,
    "maxLength": MAX_RUN_ID_LENGTH,
    "pattern": SEGMENT_PATTERN,
}


async def _path_run_id(
    request: Request,
    run_id: Annotated[
        str,
        Path(
            description="1 to 512 characters, not blank, no '/' (nor %2F) or control characters",
            json_schema_extra=_RUN_ID_SCHEMA,
        ),
    ],
) -> CheckedRunId:
    return checked_run_id(request.scope, run_id)


# A route's `{run_id}`, as the typed value the stores trust: checked once, at the edge, by
# `RunPathMiddleware` before routing.
RunId = Annotated[CheckedRunId, Depends(_path_run_id)]
Pool = Annotated[
    str,
    Path(description="the pool's name (not blank, no '/')", json_schema_extra={"pattern": SEGMENT_PATTERN}),
]
Version = Annotated[
    str, Query(description="the code version (not blank)", json_schema_extra={"pattern": NON_BLANK_PATTERN})
]


# -- request values as JSON Schema (what the library's checks accept) ------------------------------

_TEXT: Final[dict[str, Any]] = {"type": "string", "pattern": "^[^\\x00]*$"}
_NON_BLANK: Final[dict[str, Any]] = {"type": "string", "pattern": NON_BLANK_PATTERN}
RUN_ID: Final[dict[str, Any]] = {"type": "string", **_RUN_ID_SCHEMA}
# The OpenAPI document holds bounds as floats: 2**63 is exact as one, INT64_MAX is not.
_BIGINT_BOUND: Final[dict[str, Any]] = {"minimum": 0, "exclusiveMaximum": INT64_MAX + 1}
_BIGINT: Final[dict[str, Any]] = {"type": "integer", **_BIGINT_BOUND}
INT4: Final[dict[str, Any]] = {"type": "integer", "minimum": 0, "maximum": INT32_MAX}
_EPOCH_MS: Final[dict[str, Any]] = {"type": "number", "minimum": 0, "maximum": MAX_EPOCH_MS}
_JSON_VALUE: Final[dict[str, Any]] = {
    "description": f"any JSON value nesting at most {MAX_VALUE_DEPTH} levels, without NUL characters"
}
_RUN_STATUS: Final[dict[str, Any]] = {**_NON_BLANK, "not": {"enum": list(TERMINAL_STATUSES)}}
_STRINGS: Final[dict[str, Any]] = {"type": "array", "items": {"type": "string"}}
# Nullable as anyOf, not a list of types: the OpenAPI model of older FastAPI takes one type only.
_LINES: Final[dict[str, Any]] = {"anyOf": [_STRINGS, {"type": "null"}]}
_NULLABLE_TEXT: Final[dict[str, Any]] = {"anyOf": [{"type": "string"}, {"type": "null"}]}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _event(kind: str, required: list[str], fields: dict[str, Any], *, closed: bool = True) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"type": {"const": kind}, **fields},
        "required": ["type", *required],
    }
    if closed:
        schema["additionalProperties"] = False
    else:
        schema["propertyNames"] = {"not": {"enum": sorted(RESERVED_KEYS)}}
    return schema


# One schema per event type; an event's `seq` and `ts` are assigned by the ledger.
_EVENT_SCHEMAS: Final[list[dict[str, Any]]] = [
    _event("status", ["status"], {"status": _RUN_STATUS, "logs": _LINES}),
    _event("log", ["line"], {"line": {"type": "string"}}),
    _event(
        "progress",
        ["status"],
        {
            "status": _RUN_STATUS,
            "logs": _LINES,
            "active_node_id": _nullable(_TEXT),
            "active_artifact_table_namespace": _nullable(_TEXT),
            "updated_at": _nullable({"type": "integer", "minimum": 0}),
        },
    ),
    _event(
        "terminal",
        ["status"],
        {
            "status": {"enum": list(TERMINAL_STATUSES)},
            "result": _JSON_VALUE,
            "error": _NULLABLE_TEXT,
            "total_rows": _nullable(_BIGINT),
            "duration_ms": _nullable(_BIGINT),
            "play_name": _nullable(_TEXT),
        },
    ),
    _event("log.gap", ["missing"], {"missing": {"type": "integer", "minimum": 1}}, closed=False),
    *(_event(kind, [], {}, closed=False) for kind in INGESTION_TYPES if kind != "log.gap"),
]

_EVENTS_SCHEMA: Final[dict[str, Any]] = {"minItems": 1, "items": {"oneOf": _EVENT_SCHEMAS}}

_NODE_PROGRESS: Final[dict[str, Any]] = {
    "type": "object",
    "description": "unknown fields are ignored, nulls dropped",
    "properties": {
        **{name: _nullable(_BIGINT) for name in NODE_COUNT_FIELDS},
        **{
            name: _nullable({"type": "integer", "minimum": 0, "maximum": MAX_EPOCH_MS})
            for name in NODE_TIME_FIELDS
        },
        "message": _NULLABLE_TEXT,
        "artifact_table_namespace": _nullable(_TEXT),
        "node_io": _nullable({"type": "object"}),
        "state": _nullable(
            {
                "enum": list(STEP_STATES),
                "description": "the step's state; without it the ledger derives one from the fields",
            }
        ),
        "reason": {**_NULLABLE_TEXT, "description": "why the step settled as it did (free text)"},
    },
}

STATUS_UPLOAD_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "A reporter's upload. `run_id`, when sent, is the path's; `live_log_total_count` "
    "and `terminal_log_replay.total_count` are at least their number of lines. Unknown fields are "
    "ignored (newer reporters).",
    "required": ["status"],
    "properties": {
        "run_id": _nullable(RUN_ID),
        "status": {"enum": list(UPLOAD_STATUSES)},
        "error": _nullable({"type": "string", "description": "the run's terminal error (terminal statuses)"}),
        "upload_seq": _nullable({**_BIGINT, "minimum": 1}),
        "producer_attempt": _nullable(
            {**INT4, "description": f"at most {DEFAULT_MAX_ATTEMPT_STEP} above the run's current attempt"}
        ),
        "live_node_progress": _nullable(
            {"type": "object", "propertyNames": _NON_BLANK, "additionalProperties": _NODE_PROGRESS}
        ),
        "live_logs": _nullable({**_STRINGS, "maxItems": LIVE_LOG_TAIL_LIMIT}),
        "live_log_total_count": _nullable(_BIGINT),
        "dataset_lifecycle_events": _nullable({"type": "array", "items": {"type": "object"}}),
        "activity_observations": _nullable(
            {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["activityId", "observedAt"],
                    "properties": {"activityId": _NON_BLANK, "observedAt": {"type": "number"}},
                },
            }
        ),
        "terminal_log_replay": _nullable(
            {
                "type": "object",
                "properties": {
                    "lines": _LINES,
                    "dedupe_mode": {"enum": ["exact", "positional", "", None]},
                    "total_count": _nullable(_BIGINT),
                },
            }
        ),
        "last_checkpoint_at": _nullable({"type": "integer", "minimum": 0}),
        "dropped_one_shot_events": _nullable({"type": "integer", "minimum": 0}),
        "interruption": _nullable(
            {
                "type": "object",
                "description": "with the `interrupted` status: why the reporter stopped (the run "
                "waits for a reporter that resumes it; the first such upload appends "
                "`reporter.interrupted`, the next upload of another status `reporter.resumed`)",
                "properties": {"reason": _NULLABLE_TEXT, "signal": _NULLABLE_TEXT},
            }
        ),
        "step_positions": _nullable(
            {
                "type": "object",
                "description": "per node, the attempt's log count when it started, when its counts "
                "last changed and when it settled: its step events go right after that log line",
                "propertyNames": _NON_BLANK,
                "additionalProperties": {
                    "type": "object",
                    "properties": {kind: _nullable(_BIGINT) for kind in STEP_POSITION_KINDS},
                },
            }
        ),
        "pipeline_steps": _nullable(
            {
                "type": "array",
                "items": _NON_BLANK,
                "maxItems": MAX_PIPELINE_STEPS,
                "uniqueItems": True,
                "description": "The contract's step list (node ids) in pipeline order: every step shows "
                "in `live_node_progress` from this upload on, pending until it starts, with its index as "
                "`position`; `steps_total` counts them all.",
            }
        ),
    },
}


def _documented(schema: dict[str, Any], description: str | None = None) -> Any:
    """A field whose JSON Schema shows the library's rule (the model checks only the type)."""
    return Field(json_schema_extra=schema, description=description)


def _integral(value: object) -> object:
    # JSON does not tell 3.0 from 3 (JavaScript sends either); the library takes both as an int.
    return int(value) if isinstance(value, float) and value.is_integer() else value


IntegralInt = Annotated[int, BeforeValidator(_integral)]


class _StrictBody(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


_Ids = Annotated[
    list[str], _documented({"minItems": 1, "items": _NON_BLANK}, "distinct after de-duplication")
]
_VersionField = Annotated[str, _documented({"pattern": NON_BLANK_PATTERN}, "the code version, trimmed")]
_NonBlank = Annotated[str, _documented({"pattern": NON_BLANK_PATTERN})]
_Text = Annotated[str | None, _documented({"pattern": _TEXT["pattern"]})]
_Ms = Annotated[float | None, _documented({"minimum": 0})]

# -- warm pool ------------------------------------------------------------------------------------


class AddEntries(_StrictBody):
    model_config = ConfigDict(
        json_schema_extra={
            "not": {
                "required": ["ready", "ready_at"],
                "properties": {"ready": {"const": False}, "ready_at": {"type": "number"}},
            }
        }
    )

    version: _VersionField
    ids: _Ids
    ttl_ms: _Ms = Field(None, description="0 or absent: the default; clamped to the maximum")
    ready: bool | None = None
    ready_at: float | None = Field(
        None, description="epoch ms; implies ready", json_schema_extra={"minimum": 0, "maximum": MAX_EPOCH_MS}
    )


class Claim(_StrictBody):
    version: _VersionField
    run_id: Annotated[str, _documented(_RUN_ID_SCHEMA)]
    min_ready_age_ms: _Ms = None


class VersionIds(_StrictBody):
    version: _VersionField
    ids: _Ids


class ReadyEntry(_StrictBody):
    version: _VersionField
    id: _NonBlank


# -- run mappings ---------------------------------------------------------------------------------


class MapRun(_StrictBody):
    instance_id: _NonBlank
    version: _VersionField
    started: bool = False


class BlockRun(_StrictBody):
    instance_id: _NonBlank
    version: _VersionField


# -- runs and events ------------------------------------------------------------------------------


class OpenRun(_StrictBody):
    run_id: Annotated[str, _documented(_RUN_ID_SCHEMA)]
    play_name: _Text = None


class AppendEvents(_StrictBody):
    events: list[dict[str, Any]] = Field(
        description="flat events `{type, ...fields}`; seq and ts are assigned; a `terminal` event only last",
        json_schema_extra=_EVENTS_SCHEMA,
    )


class SetTerminal(_StrictBody):
    status: Literal["completed", "failed", "cancelled"]
    result: Any = Field(None, json_schema_extra=_JSON_VALUE)
    error: str | None = None
    total_rows: Annotated[IntegralInt | None, _documented(_BIGINT_BOUND)] = None
    duration_ms: Annotated[IntegralInt | None, _documented(_BIGINT_BOUND)] = None
    play_name: _Text = None


class CancelRun(_StrictBody):
    reason: str | None = Field(
        None, description="why the run is cancelled: its terminal error (absent: `cancelled by an operator`)"
    )


# -- ingestion ------------------------------------------------------------------------------------


class SheetRow(_StrictBody):
    table_namespace: _NonBlank
    row_key: Annotated[str, _documented({"pattern": _TEXT["pattern"]})]
    status: Literal["pending", "completed", "failed"]


class SheetRows(_StrictBody):
    rows: list[SheetRow]


_OBSERVATION_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["node_id", "attempt", "status"],
    "properties": {
        "node_id": _NON_BLANK,
        "attempt": INT4,
        "invocation_seq": _nullable(INT4),
        "invocation_id": _nullable(
            {**_TEXT, "description": "its number after the last ':' is the default invocation_seq"}
        ),
        "status": {"enum": ["started", "completed", "failed"]},
        "inputs": _JSON_VALUE,
        "outputs": _JSON_VALUE,
        "error": _NULLABLE_TEXT,
        "started_at": _nullable(_EPOCH_MS),
        "settled_at": _nullable(_EPOCH_MS),
    },
}


class Observations(_StrictBody):
    observations: list[dict[str, Any]] = Field(
        description="times in epoch ms; the newest per node, attempt and invocation wins",
        json_schema_extra={"items": _OBSERVATION_SCHEMA},
    )
