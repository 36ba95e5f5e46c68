"""Request bodies of the HTTP API, in snake_case: the field names clients and workers rely on.

The models check JSON types only (strict: no "5" for 5, unknown fields refused); every rule about
values (non-empty, ranges, clamping, states) is the library's, which answers `InvalidInput`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


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
