"""Request bodies and parameters of the HTTP API, in snake_case: the names clients and workers rely on.

The models check JSON types only (strict: no "5" for 5, unknown fields refused); every rule about
values (non-empty, ranges, clamping, states) is the library's, which answers `InvalidInput` naming
the field. The OpenAPI document still shows those rules (`json_schema_extra`: documented, not
enforced here, so the library's messages stay the ones a client sees), so a client or a fuzzer
knows what is accepted before it asks.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from fastapi import Path, Query
from pydantic import BaseModel, ConfigDict, Field

from ledger.validate import INT64_MAX, MAX_RUN_ID_LENGTH

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

RUN_ID_SCHEMA: Final[dict[str, Any]] = {
    "minLength": 1,
    "maxLength": MAX_RUN_ID_LENGTH,
    "pattern": SEGMENT_PATTERN,
}

RunId = Annotated[
    str,
    Path(
        description="1 to 512 characters, not blank, no '/' (nor %2F) or control characters",
        json_schema_extra=RUN_ID_SCHEMA,
    ),
]
Pool = Annotated[
    str,
    Path(description="the pool's name (not blank, no '/')", json_schema_extra={"pattern": SEGMENT_PATTERN}),
]
Version = Annotated[
    str, Query(description="the code version (not blank)", json_schema_extra={"pattern": NON_BLANK_PATTERN})
]


class Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


# -- warm pool ------------------------------------------------------------------------------------


class AddEntries(Body):
    version: str
    ids: list[str]
    ttl_ms: float | None = None
    ready: bool | None = None
    ready_at: float | None = Field(None, description="epoch ms; implies ready")


class Claim(Body):
    version: str
    run_id: str
    min_ready_age_ms: float | None = None


class VersionIds(Body):
    version: str
    ids: list[str]


class ReadyEntry(Body):
    version: str
    id: str


# -- run mappings ---------------------------------------------------------------------------------


class MapRun(Body):
    instance_id: str
    version: str
    started: bool = False


class BlockRun(Body):
    instance_id: str
    version: str


# -- runs and events ------------------------------------------------------------------------------


class OpenRun(Body):
    run_id: str
    play_name: str | None = None


class AppendEvents(Body):
    events: list[dict[str, Any]] = Field(
        description="flat events `{type, ...fields}`; seq and ts are assigned"
    )


class SetTerminal(Body):
    status: Literal["completed", "failed", "cancelled"]
    result: Any = None
    error: str | None = None
    total_rows: int | None = None
    duration_ms: int | None = None
    play_name: str | None = None


# -- ingestion ------------------------------------------------------------------------------------


class SheetRow(Body):
    table_namespace: str
    row_key: str
    status: Literal["pending", "completed", "failed"]


class SheetRows(Body):
    rows: list[SheetRow]


class Observations(Body):
    observations: list[dict[str, Any]] = Field(
        description="`{node_id, attempt, invocation_seq?, invocation_id?, status, inputs?, outputs?, "
        "error?, started_at?, settled_at?}` (times in epoch ms)"
    )
