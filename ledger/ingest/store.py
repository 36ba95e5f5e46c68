"""Status ingestion on Postgres: one reporter upload, applied in one transaction.

The run row is locked first (`lock_run`, creating the run: a status upload opens its run), so
uploads to one run apply one at a time and the ingestion state read from the row is the state the
plan is made against. `ledger.ingest.rules.plan_upload` decides everything (fence, duplicate,
positional logs, step diff, activity watermarks, replay); this module only reads the row, appends
the planned events through the run log's one append path, which stores the new ingestion state with
the same statement (an upload that appends nothing stores it with one of its own), and, for an
upload with a terminal status, sets the terminal state through the first-terminal-wins path.
An ended run stays as it ended: an upload to it that would change anything (an event, a node's
progress, the log count, its end...) is refused (`RunTerminal`) before anything is written, and one
that would not is absorbed, writing nothing (its `upload_seq` and heartbeat included); either way
the answer names the run's end.

A late duplicate returns before anything is written, except the heartbeat, and before the body is
validated: its `(producer_attempt, upload_seq)` is read from the body's top level and checked
(`upload_key`, once: the body's validation takes the key as read, and its refusals, in the body's
order) and compared with one narrow read of the run's upload position, taken before the row is locked
(`_UPLOAD_POSITION_SQL`, in autocommit: a duplicate is one round trip, two with its heartbeat,
which is guarded to write only while the attempt is still the run's). The attempt only grows and,
within it, so does `last_upload_seq`, so an upload that is a duplicate in that snapshot stays one
(or becomes stale), and answering from the snapshot is answering as of it. That spares a retried
upload the validation of its whole body, the lock, which it would wait for behind a long upload,
and the read and decoding of the stored progress snapshot. Anything else is validated and applied
in one transaction under the row's lock; a run the position read found is not opened again. It is
validated against the stored snapshot the row holds (what a node repeats of its stored entry is
not checked again: `ledger.ingest.upload.parse_node`); bad input raises `InvalidInput`, which rolls
the transaction back, so nothing is written (nor a run opened). (Its statements are not pipelined:
measured, psycopg's async pipeline cost more CPU than the two round trips it saved.) A stale
attempt raises before anything is written (`StaleAttempt`, HTTP 409).

**Heartbeat.** An upload that carries `last_checkpoint_at` proves its producer alive even when it
appends nothing (a late duplicate, a long step with nothing new to say): it records the server's
time in `runs.last_heartbeat_at`, which the watchdog reads like an event.

**Resume.** The answer carries the attempt's `producer_attempt`, `last_upload_seq` and
`live_log_count` after the upload (unchanged for a duplicate): a reporter restarted for the same
attempt continues its numbering after them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any, Final

from psycopg.types.json import Jsonb

from ledger import jsonb, shapes
from ledger.db import Conn, Database, Row
from ledger.errors import NotFound, RunTerminal
from ledger.ingest.rules import (
    DEFAULT_MAX_ATTEMPT_STEP,
    IngestPlan,
    IngestState,
    is_late_duplicate,
    plan_upload,
)
from ledger.ingest.upload import TERMINAL_UPLOAD_STATUSES, StatusUpload, UploadKey, parse_upload, upload_key
from ledger.runlog.events import NewEvent, TerminalState, validate_run_id
from ledger.runlog.steps import settle_steps
from ledger.runlog.store import (
    DEFAULT_MAX_EVENTS_PER_RUN,
    IngestColumns,
    append_in_transaction,
    lock_run,
    set_terminal_in_transaction,
    terminal_from_row,
)

__all__ = [
    "apply_status_upload",
]

# The ingestion columns; the run status is left alone once the run is terminal.
_STORE_INGEST_STATE_SQL: Final = """
UPDATE ledger.runs
SET producer_attempt = %(producer_attempt)s,
    last_upload_seq = %(last_upload_seq)s,
    live_log_count = %(live_log_count)s,
    live_node_progress = %(live_node_progress)s,
    activity_watermarks = %(activity_watermarks)s,
    replay_digest = %(replay_digest)s,
    status = CASE WHEN terminal_status IS NULL THEN %(status)s ELSE status END
WHERE run_id = %(run_id)s
"""

_RECORD_HEARTBEAT_SQL: Final = "UPDATE ledger.runs SET last_heartbeat_at = now() WHERE run_id = %(run_id)s"

_UPLOAD_POSITION_SQL: Final = """
SELECT producer_attempt, last_upload_seq, live_log_count, last_seq, terminal_status, terminal_result,
       terminal_error, terminal_total_rows, terminal_duration_ms, terminal_play_name, completed_at
FROM ledger.runs WHERE run_id = %(run_id)s
"""

# A duplicate's heartbeat, written only while its attempt is still the run's (else: the slow path,
# which fences it).
_RECORD_DUPLICATE_HEARTBEAT_SQL: Final = """
UPDATE ledger.runs SET last_heartbeat_at = now()
WHERE run_id = %(run_id)s AND producer_attempt = %(producer_attempt)s
"""


def _state_from_row(row: dict[str, Any]) -> IngestState:
    """The ingestion state held by a runs row."""
    return IngestState(
        producer_attempt=int(row["producer_attempt"]),
        last_upload_seq=int(row["last_upload_seq"]),
        live_log_count=int(row["live_log_count"]),
        live_node_progress=dict(row["live_node_progress"] or {}),
        activity_watermarks=dict(row["activity_watermarks"] or {}),
        replay_digest=row["replay_digest"],
        status=str(row["status"]),
    )


def _ingest_columns(plan: IngestPlan, status: str) -> IngestColumns:
    """The ingestion state to store, as the append writes it with the upload's events."""
    state = plan.state
    return IngestColumns(
        status,
        {
            "producer_attempt": state.producer_attempt,
            "last_upload_seq": state.last_upload_seq,
            "live_log_count": state.live_log_count,
            "live_node_progress": state.live_node_progress,
            "activity_watermarks": state.activity_watermarks,
            "replay_digest": state.replay_digest,
        },
    )


async def _store_state(conn: Conn, run_id: str, plan: IngestPlan, status: str) -> None:
    """Store the ingestion state of an upload that appends nothing."""
    state = plan.state
    await conn.execute(
        _STORE_INGEST_STATE_SQL,
        {
            "run_id": run_id,
            "producer_attempt": state.producer_attempt,
            "last_upload_seq": state.last_upload_seq,
            "live_log_count": state.live_log_count,
            "live_node_progress": Jsonb(state.live_node_progress, dumps=jsonb.dumps),
            "activity_watermarks": Jsonb(state.activity_watermarks, dumps=jsonb.dumps),
            "replay_digest": state.replay_digest,
            "status": status,
        },
    )


async def apply_status_upload(
    db: Database,
    run_id: str,
    upload: dict[str, Any],
    *,
    max_events_per_run: int = DEFAULT_MAX_EVENTS_PER_RUN,
    max_attempt_step: int = DEFAULT_MAX_ATTEMPT_STEP,
) -> shapes.UploadResult:
    """Apply one reporter upload in one transaction and say what it applied.

    `run_id` (from the URL) wins; a body `run_id` that differs is `InvalidInput`. A `RunId` was
    checked where it entered (the route, the direct transport) and is taken as it is; a library
    caller's string is checked here, once. Raises
    `StaleAttempt` for an upload from an older producer attempt, `InvalidInput` for a malformed
    upload (or one more than `max_attempt_step` attempts ahead of the run)
    and `RunTerminal` (a `Conflict`) for an upload that would change an ended run;
    in every error case nothing is written.

    A late duplicate (its attempt's `upload_seq` already applied) is answered from the run's upload
    position before the rest of the body is validated (`ledger.ingest.upload.upload_key`). On an
    ended run, the answer to an upload that changed nothing carries the run's `terminal` state.

    Returns what it applied (`events_appended` by type, `steps_changed` as node ids) and the
    attempt's resume position after it.
    """
    run_id = validate_run_id(run_id)
    key = upload_key(run_id, upload)
    # The position read (and a duplicate's heartbeat) are statements of their own, in autocommit:
    # a late duplicate costs one round trip. Anything else is applied in one transaction.
    async with db.autocommit() as conn:
        position = None
        if key.places:
            position = await _upload_position(conn, run_id)
            early = await _late_duplicate(conn, run_id, key, position)
            if early is not None:
                return early
        async with conn.transaction():
            run = await _lock_run(conn, run_id, known=position is not None)
            state = _state_from_row(run)
            # The key's fields were checked as it was read: the rest of the body is checked here,
            # against the stored snapshot (what a node repeats of it is not checked again). A
            # refusal rolls the transaction back: nothing is written.
            parsed = parse_upload(run_id, upload, key, state.live_node_progress)
            plan = plan_upload(run_id, state, parsed, max_attempt_step=max_attempt_step)
            if run["terminal_status"] is not None:
                # An ended run waits for no producer (no heartbeat) and stays as it ended.
                if not plan.duplicate:
                    _refuse_a_change(run_id, run, plan, parsed)
                return _answer(plan, run, terminal_set=False, ended=True)
            await _record_heartbeat(conn, run_id, parsed)
            if plan.duplicate:
                return _answer(plan, run, terminal_set=False)
            if plan.events:
                # The plan's events are built from the upload checked above: appended as they are,
                # and the ingestion state written by the same statement (one round trip less).
                batch = [
                    NewEvent(event["type"], {key: value for key, value in event.items() if key != "type"})
                    for event in plan.events
                ]
                await append_in_transaction(
                    conn,
                    run,
                    batch,
                    max_events_per_run=max_events_per_run,
                    ingest=_ingest_columns(plan, parsed.status),
                )
            else:
                await _store_state(conn, run_id, plan, parsed.status)
            # The plan settled the steps the upload leaves open; the terminal path finds none.
            run["live_node_progress"] = plan.state.live_node_progress
            terminal_set = False
            if parsed.status in TERMINAL_UPLOAD_STATUSES:
                # Both fields were checked with the upload (`parse_upload`): not checked again.
                _, terminal_set = await set_terminal_in_transaction(
                    conn,
                    run,
                    TerminalState(status=parsed.status, error=parsed.error),
                    max_events_per_run=max_events_per_run,
                )
        return _answer(plan, run, terminal_set=terminal_set)


def _refuse_a_change(run_id: str, run: Row, plan: IngestPlan, upload: StatusUpload) -> None:
    """`RunTerminal` when `upload` would change the ended `run` in any way but the upload count:
    an event, a node's progress, the log count, an activity watermark, the replay digest, the
    attempt, or its terminal state. An upload that changes nothing is absorbed (nothing is written,
    not even its ``upload_seq``)."""
    terminal = terminal_from_row(run)
    assert terminal is not None
    stored = _state_from_row(run)
    same_end = upload.status not in TERMINAL_UPLOAD_STATUSES or (
        upload.status == terminal["status"] and upload.error in (None, terminal["error"])
    )
    # The run's end settled its steps: an upload that repeats what led there (its steps as they
    # were before the end settled them) changes nothing.
    _, nodes = settle_steps(
        stored.live_node_progress, plan.state.live_node_progress, terminal["status"], terminal["error"]
    )
    planned = replace(plan.state, last_upload_seq=stored.last_upload_seq, live_node_progress=nodes)
    if plan.events or planned != stored or not same_end:
        raise RunTerminal(
            f"run {run_id!r} already ended ({terminal['status']}"
            + (f": {terminal['error']}" if terminal["error"] else "")
            + "); it takes no more uploads",
            run_id,
            dict(terminal),
        )


async def _record_heartbeat(conn: Conn, run_id: str, upload: StatusUpload) -> None:
    # After the fence: a stale attempt's producer is not the one the run waits for.
    if upload.last_checkpoint_at is not None:
        await conn.execute(_RECORD_HEARTBEAT_SQL, {"run_id": run_id})


async def _upload_position(conn: Conn, run_id: str) -> Row | None:
    cur = await conn.execute(_UPLOAD_POSITION_SQL, {"run_id": run_id})
    return await cur.fetchone()


async def _lock_run(conn: Conn, run_id: str, *, known: bool) -> dict[str, Any]:
    """The run's row, locked; a status upload opens its run. A run `known` to exist is not opened
    again (one statement less), unless it was deleted since (retention takes finished runs)."""
    if known:
        try:
            return await lock_run(conn, run_id)
        except NotFound:
            pass
    return await lock_run(conn, run_id, create=True)


async def _late_duplicate(
    conn: Conn, run_id: str, key: UploadKey, row: Row | None
) -> shapes.UploadResult | None:
    """The answer to a late duplicate of the run's current attempt, from its upload position read
    without a lock (`row`); None when the upload is anything else (or the run does not exist yet)."""
    if row is None:
        return None
    attempt = int(row["producer_attempt"])
    if key.producer_attempt not in (None, attempt):
        return None  # a stale attempt (refused) or a newer one (adopted): the full path decides
    if not is_late_duplicate(int(row["last_upload_seq"]), key.upload_seq):
        return None
    if key.heartbeat and row["terminal_status"] is None:  # an ended run waits for no producer
        cur = await conn.execute(
            _RECORD_DUPLICATE_HEARTBEAT_SQL, {"run_id": run_id, "producer_attempt": attempt}
        )
        if cur.rowcount != 1:
            return None  # a newer attempt took the run meanwhile
    answer: shapes.UploadResult = {
        "duplicate": True,
        "events_appended": {},
        "steps_changed": [],
        "logs_appended": 0,
        "log_gap": 0,
        "terminal_set": False,
        "last_seq": int(row["last_seq"]),
        "producer_attempt": attempt,
        "last_upload_seq": int(row["last_upload_seq"]),
        "live_log_count": int(row["live_log_count"]),
    }
    return _with_terminal(answer, row)


def _with_terminal(answer: shapes.UploadResult, run: Row) -> shapes.UploadResult:
    """The answer to an upload that found the run ended (a late duplicate, or one that changed
    nothing) names its end: a reporter that did not end it learns that the run is over, and how it
    ended, rather than only that its upload came late."""
    terminal = terminal_from_row(run)
    if terminal is not None:
        answer["terminal"] = terminal
    return answer


def _answer(
    plan: IngestPlan, run: dict[str, Any], *, terminal_set: bool, ended: bool = False
) -> shapes.UploadResult:
    appended = Counter(event["type"] for event in plan.events)
    if terminal_set:
        appended["terminal"] += 1
    answer: shapes.UploadResult = {
        "duplicate": plan.duplicate,
        "events_appended": dict(appended),
        "steps_changed": list(plan.steps_changed),
        "logs_appended": plan.logs_appended,
        "log_gap": plan.log_gap,
        "terminal_set": terminal_set,
        "last_seq": int(run["last_seq"]),
        "producer_attempt": plan.state.producer_attempt,
        "last_upload_seq": plan.state.last_upload_seq,
        "live_log_count": plan.state.live_log_count,
    }
    if ended:
        # Nothing was stored: the run's own upload position, and how it had ended.
        answer["last_upload_seq"] = int(run["last_upload_seq"])
        return _with_terminal(answer, run)
    return answer
