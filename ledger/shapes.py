"""The JSON shapes the ledger hands out: what the library returns and the HTTP service answers.

One `TypedDict` per shape, so a caller of `RunLog`, `WarmPool` or the ingestion functions, a client
of the HTTP API and the service's OpenAPI document (these are its response models) all read the
same definition. Times are epoch milliseconds, durations milliseconds; snake_case throughout.
A shape whose name would collide with an in-process record (the run log's `TerminalState`, the
pool's `PoolEntry` and `Counts`, the reporter's `NodeProgress`) ends in `Body`: it is the JSON
body, the other the record the rules work on, and one name always means one type.

Only typing here: a client may import this module without the database or web stack.
`typing_extensions.TypedDict` rather than `typing`'s because pydantic reads only that one on
Python 3.11, and because an event is an *open* shape (PEP 728 `extra_items`): its type fields
travel flat beside `seq`, `type` and `ts`, and free-form ingestion events carry any of them.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict

__all__ = [
    "Added",
    "AppendedEvents",
    "BlockResult",
    "ClaimResult",
    "Deleted",
    "ErrorBody",
    "ErrorCode",
    "Event",
    "EventPage",
    "Health",
    "Limits",
    "LogTail",
    "MapResult",
    "NodeProgressBody",
    "NotReady",
    "Observation",
    "ObservationList",
    "PoolAvailability",
    "PoolCountsBody",
    "PoolEntries",
    "PoolEntryBody",
    "Promoted",
    "Readied",
    "Readiness",
    "Recorded",
    "ResolvedMapping",
    "Run",
    "RunList",
    "RunSummary",
    "SheetOutcome",
    "SheetOutcomes",
    "StalledRun",
    "StepState",
    "TerminalAnswer",
    "TerminalStateBody",
    "TerminalStatus",
    "UploadResult",
]

TerminalStatus = Literal["completed", "failed", "cancelled"]
StepState = Literal["pending", "running", "completed", "failed", "cancelled", "skipped"]

# -- runs -------------------------------------------------------------------------------------------


class TerminalStateBody(TypedDict):
    """How a run ended: set once (the first terminal wins), `completed_at` by the ledger."""

    status: TerminalStatus
    result: Any
    error: str | None
    total_rows: int | None
    duration_ms: int | None
    play_name: str | None
    completed_at: int | None


class NodeProgressBody(TypedDict):
    """One step's live progress as the reporter last uploaded it (only the fields it sent); a step
    of the upload's `pipeline_steps` that has not reported yet has only its `position`."""

    completed: NotRequired[int]
    failed: NotRequired[int]
    total: NotRequired[int]
    started_rows: NotRequired[int]
    active_rows: NotRequired[int]
    waiting_rows: NotRequired[int]
    completed_rows: NotRequired[int]
    started_at: NotRequired[int]
    completed_at: NotRequired[int]
    updated_at: NotRequired[int]
    message: NotRequired[str]
    artifact_table_namespace: NotRequired[str]
    node_io: NotRequired[dict[str, Any]]
    # The step's state (`ledger.runlog.steps`): always present in the ledger's answers.
    state: NotRequired[StepState]
    # Why the step settled as it did (a failed, cancelled or skipped step), a plain sentence.
    reason: NotRequired[str]
    # The step's index in the pipeline, from the upload's `pipeline_steps` (set by the ledger).
    position: NotRequired[int]


class Run(TypedDict):
    """A run (`GET /v1/runs/{run_id}`).

    `producer_attempt`, `last_upload_seq` and `live_log_count` are the reporting attempt's position:
    a reporter resuming the attempt numbers its next upload and log line after them.
    `last_heartbeat_at` is when an upload carrying `last_checkpoint_at` last arrived.
    """

    run_id: str
    play_name: str | None
    status: str
    created_at: int
    updated_at: int
    last_seq: int
    producer_attempt: int
    last_upload_seq: int
    live_log_count: int
    last_heartbeat_at: int | None
    terminal: TerminalStateBody | None
    live_node_progress: dict[str, NodeProgressBody]


class RunSummary(TypedDict):
    """One row of the run overview (`GET /v1/runs`, `ledger runs`): totals summed over its steps."""

    run_id: str
    status: str
    play_name: str | None
    created_at: int
    updated_at: int
    age_ms: int
    last_seq: int
    last_event_type: str | None
    terminal_status: TerminalStatus | None
    terminal_error: str | None
    terminal_total_rows: int | None
    steps_total: int
    # Steps by state: `steps_done` counts the completed ones.
    steps_done: int
    steps_failed: int
    steps_cancelled: int
    steps_skipped: int
    # Summed over the steps: may pass 2**63 - 1 (each step's count is a bigint).
    rows_completed: int
    rows_failed: int
    rows_total: int


class RunList(TypedDict):
    runs: list[RunSummary]
    # Pass as `before` for the next page; None when this page is the last.
    next_before: str | None


class StalledRun(TypedDict):
    """A live run idle past the watchdog's default limit (`ledger.stalled_runs`)."""

    run_id: str
    status: str
    play_name: str | None
    updated_at: int
    idle_ms: int
    last_seq: int


class LogTail(TypedDict):
    """The text of a run's last log lines, oldest first."""

    lines: list[str]


class TerminalAnswer(TypedDict):
    """`GET /v1/runs/{run_id}/terminal`: the state, or null while the run is live."""

    state: TerminalStateBody | None


# -- events -----------------------------------------------------------------------------------------


# PEP 728 is not in mypy yet: to it this is the three keys below; pydantic reads the open shape.
class Event(TypedDict, extra_items=Any):  # type: ignore[call-arg]
    """One stored event, flat: `seq` (gapless per run), `type`, `ts`, then the type's fields.

    `status`: status, logs; `log`: line; `progress`: status, logs, active_node_id,
    active_artifact_table_namespace, updated_at; `terminal`: the terminal state's fields;
    `log.gap`: missing (how many lines never arrived); `step.started`, `step.progress`,
    `dataset.lifecycle`, `activity.observed`: the reporter's JSON; `step.completed`,
    `step.failed`, `step.cancelled`, `step.skipped` (a step settled): node_id, state, outcome
    (= state), completed_at (when known), reason (when there is one), error (the step's own).
    """

    seq: int
    type: str
    ts: int


class EventPage(TypedDict):
    """Events after a cursor. `first_seq` is the oldest retained event (a cursor before it is
    expired, 410); `terminal` is set once the run has ended (then nothing more comes)."""

    events: list[Event]
    latest_seq: int
    first_seq: int
    terminal: TerminalStateBody | None


class AppendedEvents(TypedDict):
    """The events just appended, with the seq and ts the ledger gave them."""

    events: list[Event]


# -- ingestion --------------------------------------------------------------------------------------


class UploadResult(TypedDict):
    """What one status upload applied (a duplicate applies nothing), and the attempt's resume
    position after it."""

    duplicate: bool
    events_appended: dict[str, int]
    steps_changed: list[str]
    logs_appended: int
    log_gap: int
    terminal_set: bool
    last_seq: int
    producer_attempt: int
    last_upload_seq: int
    live_log_count: int
    # The run's terminal state when it has ended (a late duplicate to an ended run says so).
    terminal: NotRequired[TerminalStateBody | None]


class Recorded(TypedDict):
    """How many sheet rows or observations a batch stored."""

    recorded: int


class SheetOutcome(TypedDict):
    """One table namespace's sheet rows; `total` counts pending rows too."""

    table_namespace: str
    completed: int
    failed: int
    total: int


class SheetOutcomes(TypedDict):
    outcomes: list[SheetOutcome]


class Observation(TypedDict):
    """A durable node observation (the newest per node, attempt and invocation)."""

    node_id: str
    attempt: int
    invocation_seq: int
    invocation_id: str | None
    status: Literal["started", "completed", "failed"]
    inputs: Any
    outputs: Any
    error: str | None
    started_at: int | None
    settled_at: int | None


class ObservationList(TypedDict):
    observations: list[Observation]


# -- warm pool and run mappings ---------------------------------------------------------------------


class PoolEntryBody(TypedDict):
    """A warm instance of a code version; `ready_at` is null while it warms."""

    id: str
    version: str
    state: Literal["warming", "ready"]
    created_at: int
    ready_at: int | None
    expires_at: int


class PoolEntries(TypedDict):
    entries: list[PoolEntryBody]


class PoolCountsBody(TypedDict):
    """Entries of a version: claimable now, and warming (not ready, or ready only later)."""

    available: int
    warming: int


class ClaimResult(PoolCountsBody):
    """The claimed instance (null when none was available) and the counts after the claim."""

    id: str | None


class PoolAvailability(TypedDict):
    """Per pool and version (`ledger.pool_availability`), with the default staleness limit."""

    pool: str
    version: str
    available: int
    warming: int
    stale: int
    newest_ready_at: int | None


class Added(TypedDict):
    added: int


class Deleted(TypedDict):
    deleted: int


class Promoted(TypedDict):
    promoted: int


class Readied(TypedDict):
    """Whether the entry was marked ready (false: absent, expired or of another version)."""

    ready: bool


class MapResult(TypedDict):
    """False when the instance is blocked from the run."""

    mapped: bool


class BlockResult(TypedDict):
    """`blocked`, or `started`: the run already started on that instance, so it was not blocked."""

    blocked: bool
    started: bool


class ResolvedMapping(TypedDict):
    """The instance serving the run for that version, or nulls."""

    instance_id: str | None
    started_at: int | None


# -- operations and errors --------------------------------------------------------------------------


class Health(TypedDict):
    status: Literal["ok"]


class Limits(TypedDict):
    """What the service takes: a request body of at most `max_body_bytes` bytes, JSON nesting at
    most `max_json_depth` levels (one stored value `max_value_depth`), a live log tail of at most
    `live_log_tail_lines` lines. The reporter keeps its uploads under them."""

    max_body_bytes: int
    max_json_depth: int
    max_value_depth: int
    live_log_tail_lines: int


class Readiness(TypedDict):
    status: Literal["ready"]
    database: bool
    listener: bool


class NotReady(TypedDict):
    """`/readyz` while a part is down or the service is shutting down."""

    error: str
    code: Literal["not_ready", "shutting_down"]
    database: bool
    listener: bool
    draining: NotRequired[bool]


# Every `code` an error answer may carry (`ledger.service.errors.CODE_BY_STATUS` and the more
# precise ones; "error" for a status that has none of its own).
ErrorCode = Literal[
    "bad_request",
    "invalid_encoding",
    "unauthorized",
    "token_expired",
    "forbidden",
    "not_found",
    "method_not_allowed",
    "request_timeout",
    "conflict",
    "stale_attempt",
    "terminal",
    "instance_mapped",
    "gone",
    "cursor_expired",
    "too_large",
    "invalid",
    "too_deep",
    "headers_too_large",
    "internal",
    "unavailable",
    "busy",
    "schema_missing",
    "error",
]


class ErrorBody(TypedDict):
    """Every error answer: `error` says what is wrong (naming the field for bad input), `code`
    which kind of failure it is, for a program to act on (docs/errors.md lists them all).

    By status: 400 `bad_request` (`invalid_encoding`: a body that is not UTF-8), 401 `unauthorized`
    (or `token_expired`), 403 `forbidden` (the `error` says which token the request needs), 404
    `not_found`, 405 `method_not_allowed`, 408 `request_timeout`, 409 `conflict`, 410 `gone`, 413
    `too_large`, 422 `invalid` (`too_deep`: a body nested too deep), 431 `headers_too_large`, 500
    `internal`, 503 `unavailable` (or `busy`, or `schema_missing`: the database is not migrated).
    More precise ones: a 409 says `stale_attempt` with the current `producer_attempt` (stop
    reporting), `terminal` with the stored `terminal` state (who ended the run and how), or
    `instance_mapped`; a 410 `cursor_expired` carries `first_seq`, the oldest event still
    retained; a 413 `too_large` the service's `max_body_bytes`.
    """

    error: str
    code: ErrorCode
    producer_attempt: NotRequired[int]
    terminal: NotRequired[TerminalStateBody]
    first_seq: NotRequired[int]
    max_body_bytes: NotRequired[int]
