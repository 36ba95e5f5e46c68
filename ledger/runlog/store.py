"""The run log on Postgres: runs, gapless per-run events, first-terminal-wins, long-poll reads.

Design note. The run row is the lock: every write to a run's log locks its `ledger.runs` row
(`SELECT ... FOR UPDATE`, or the append's own `UPDATE`), so appenders to one run serialize and
take `seq` from `runs.last_seq` without gaps or collisions, while appenders to other runs lock
other rows and never wait. The append itself is one database function, `ledger.append_events_v3`
(`ledger/sql/`): it advances the run with the statement that locks it, refuses a terminal run,
inserts the batch, records a trailing terminal event, trims retention and issues the NOTIFY, so
`RunLog.append` is one round trip in autocommit. The status ingestion hands it the upload's
ingestion state too, written by the same statement.
Retention moves the run's watermark (`runs.events_trimmed_through`) on every append and deletes
the rows below it by chunk: every read of events starts above the watermark, never at what is
stored.
Postgres delivers the NOTIFY at commit, so a rolled-back append wakes nobody. The NOTIFY payload
is only `{run_id, seq}` (a hint: readers always re-read from their cursor) and is sent once per
transaction even when the ingestion calls `append_in_transaction` several times - the run row dict
it threads through remembers that it was sent.

The `*_in_transaction` functions are the building blocks other operations (status ingestion, the
watchdog) call inside their own transaction after `lock_run`; they and `RunLog.append` (which
needs no `lock_run`: one call, one transaction, one round trip) all call the same function.

Ending a run settles its open steps (`ledger.runlog.steps`) in the same transaction, whichever way
it ends: `set_terminal_in_transaction` reads the locked row's step snapshot, stores it settled and
appends the settlement events before the `terminal` event. So `RunLog.set_terminal`, and an
`append` whose batch ends in `terminal`, lock the run first (a few round trips: a run ends once).

Reads are one statement (one snapshot) so `latest_seq`, `first_seq` and the page always agree
(`ledger.runlog.reads`, which also gives a run row the API's shape; re-exported here).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, NamedTuple

from psycopg.types.json import Jsonb

from ledger import jsonb, shapes, validate
from ledger.clock import Clock, to_ms
from ledger.db import Conn, Database, Row
from ledger.errors import NotFound, RunTerminal
from ledger.runlog import conversion
from ledger.runlog.events import (
    DEFAULT_LIST_LIMIT,
    NewEvent,
    TerminalState,
    check_limit,
    clamp_timeout_ms,
    event_to_wire,
    parse_after,
    parse_events,
    parse_terminal_state,
    validate_new_run_id,
    validate_run_id,
)
from ledger.runlog.fanout import Fanout, Follower, SharedPage
from ledger.runlog.listener import CHANNEL, Listener
from ledger.runlog.reads import read_page, run_from_row, terminal_from_row
from ledger.runlog.steps import settle_steps

__all__ = [
    "DEFAULT_MAX_EVENTS_PER_RUN",
    "IngestColumns",
    "RunLog",
    "append_in_transaction",
    "lock_run",
    "lock_stalled_runs",
    "open_run_in_transaction",
    "read_page",
    "set_terminal_in_transaction",
    "terminal_from_row",
]

DEFAULT_MAX_EVENTS_PER_RUN: Final = 10_000
_DEFAULT_POLL_INTERVAL_S: Final = 0.5

# Marks a run row dict whose transaction has already issued its NOTIFY.
_NOTIFIED: Final = "_notified"
# Runs whose `created_at` a RunLog remembers for their next read (about 100 bytes each); past it
# the memory starts over.
_CREATED_AT_KEPT: Final = 100_000

# A new run's partition of the event log is made by a trigger on `runs` when missing (the watchdog
# makes them ahead, so that is one catalog lookup): a run's events can always be written.
_OPEN_RUN_SQL: Final = """
INSERT INTO ledger.runs (run_id, play_name, created_at, updated_at)
VALUES (%(run_id)s, %(play_name)s,
        COALESCE(%(now)s::timestamptz, now()), COALESCE(%(now)s::timestamptz, now()))
ON CONFLICT (run_id) DO UPDATE SET play_name = EXCLUDED.play_name
WHERE runs.play_name IS NULL AND EXCLUDED.play_name IS NOT NULL
"""

# Every statement on a run's events names its `run_created_at` too: it reads one partition. What lies
# at or below the run's trim watermark is trimmed, even while its chunk is not deleted yet.
_RECENT_LOG_LINES_SQL: Final = """
SELECT payload->>'line' AS line FROM ledger.run_events
WHERE run_id = %(run_id)s AND run_created_at = %(run_created_at)s AND type = 'log'
  AND seq > %(trimmed_through)s
ORDER BY seq DESC
LIMIT %(limit)s
"""

_GET_RUN_SQL: Final = "SELECT * FROM ledger.runs WHERE run_id = %(run_id)s"
_RUN_FOR_LOG_LINES_SQL: Final = (
    f"SELECT created_at, events_trimmed_through, {conversion.CONVERTING_SQL} AS converting"
    " FROM ledger.runs WHERE run_id = %(run_id)s"
)

_LOCK_RUN_SQL: Final = "SELECT * FROM ledger.runs WHERE run_id = %(run_id)s FOR UPDATE"

# The whole append (`ledger/sql/append_events_v3.sql`): no row for an unknown
# run; `refused` with the stored terminal state for a terminal run; otherwise the run after the
# append and the batch's first seq. The batch travels as one JSON array of [type, payload] pairs:
# one parameter, one encode call; so does the ingestion state to write with it (NULL: none).
_APPEND_SQL: Final = """
SELECT * FROM ledger.append_events_v3(
    %(run_id)s, %(events)s::jsonb, %(status)s, %(max_events)s, %(now)s::timestamptz, %(channel)s, %(notify)s,
    %(ingest)s::jsonb
)
"""

_STORE_STEPS_SQL: Final = (
    "UPDATE ledger.runs SET live_node_progress = %(live_node_progress)s WHERE run_id = %(run_id)s"
)

# The watchdog's scan: non-terminal runs with neither an event nor a heartbeat (an upload carrying
# `last_checkpoint_at`) since the cutoff, skipping any another transaction holds (an appender is
# busy with it, or another watchdog replica is failing it). Written as two conditions, not
# GREATEST(), so the partial index on updated_at still finds the candidates.
_LOCK_STALLED_RUNS_SQL: Final = """
SELECT * FROM ledger.runs
WHERE terminal_status IS NULL AND updated_at < %(cutoff)s
  AND (last_heartbeat_at IS NULL OR last_heartbeat_at < %(cutoff)s)
ORDER BY updated_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
"""


# -- in-transaction building blocks --------------------------------------------------------------


async def open_run_in_transaction(
    conn: Conn, run_id: str, *, play_name: str | None = None, now: datetime | None = None
) -> None:
    """Create the run if it does not exist (idempotent); a later open may fill a missing play name."""
    params = {
        "run_id": validate_new_run_id(run_id),
        "play_name": validate.text("play_name", play_name, optional=True),
        "now": now,
    }
    await conn.execute(_OPEN_RUN_SQL, params)


async def lock_run(
    conn: Conn,
    run_id: str,
    *,
    create: bool = False,
    play_name: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Lock the run's row for this transaction and return it (creating the run first if `create`).

    Every write to a run's log goes through this lock: it is what makes seq gapless per run.
    Raises `NotFound` for an unknown run when not creating.
    """
    run_id = validate_run_id(run_id)
    if create:
        await open_run_in_transaction(conn, run_id, play_name=play_name, now=now)
    cur = await conn.execute(_LOCK_RUN_SQL, {"run_id": run_id})
    row = await cur.fetchone()
    if row is None:
        raise NotFound(f"unknown run {run_id!r}")
    return dict(row)


class IngestColumns(NamedTuple):
    """A status upload's ingestion state, written by the statement that appends its events: the
    run's status and the ingestion columns by name (those `ledger/sql/append_events_v3.sql` lists)."""

    status: str
    columns: Mapping[str, Any]


# The run row columns `ledger.append_events_v3` answers with: everything an append may change.
_APPENDED_COLUMNS: Final = (
    "last_seq",
    "updated_at",
    "status",
    "play_name",
    "terminal_status",
    "terminal_result",
    "terminal_error",
    "terminal_total_rows",
    "terminal_duration_ms",
    "terminal_play_name",
    "completed_at",
)


def _refusal(run_id: str, row: Row) -> RunTerminal:
    """The error for an append `ledger.append_events_v3` refused: the run (`row`) had ended."""
    stored = terminal_from_row(row)
    assert stored is not None
    return RunTerminal(
        f"run {run_id!r} is terminal ({stored['status']}"
        + (f": {stored['error']}" if stored["error"] else "")
        + ") and accepts no more events",
        run_id,
        dict(stored),
    )


async def _append_events(
    conn: Conn,
    run_id: str,
    events: Sequence[NewEvent],
    *,
    max_events_per_run: int,
    now: datetime | None,
    notify: bool,
    ingest: IngestColumns | None = None,
) -> Row:
    """Run `ledger.append_events_v3`: the run row after the append, or (`refused`) the terminal run's
    row untouched. Raises `NotFound` for an unknown run."""
    status = next((e.run_status for e in reversed(events) if e.run_status is not None), None)
    if ingest is not None and not (events and events[-1].type == "terminal"):
        # The upload's status wins over its events' (its state was written after them), unless the
        # batch ended the run.
        status = ingest.status
    cur = await conn.execute(
        _APPEND_SQL,
        {
            "run_id": run_id,
            "events": jsonb.dumps([(e.type, e.payload) for e in events]),
            "status": status,
            "max_events": max_events_per_run,
            "now": now,
            "channel": CHANNEL,
            "notify": notify,
            "ingest": None if ingest is None else jsonb.dumps(ingest.columns),
        },
    )
    row = await cur.fetchone()
    if row is None:
        raise NotFound(f"unknown run {run_id!r}")
    return row


def _appended(row: Row, events: Sequence[NewEvent]) -> list[shapes.Event]:
    """The events just appended (answer row of `ledger.append_events_v3`) in API shape."""
    first = int(row["first_seq"])
    ts_ms = to_ms(row["updated_at"])
    return [event_to_wire(first + i, e.type, ts_ms, e.payload) for i, e in enumerate(events)]


def _terminal_outcome(
    run_id: str, row: Row, requested: TerminalState
) -> tuple[shapes.TerminalStateBody, bool]:
    """(the run's terminal state, whether this request set it) after appending its terminal event.

    First terminal wins: on a run that had ended, repeating the stored state is a no-op and a
    different one is `RunTerminal`.
    """
    stored = terminal_from_row(row)
    assert stored is not None
    if not row["refused"]:
        return stored, True
    if requested.agrees_with(stored):
        return stored, False
    raise RunTerminal(
        f"run {run_id!r} already ended {stored['status']}"
        + (f" ({stored['error']})" if stored["error"] else "")
        + f"; refusing a different terminal state ({requested.status})",
        run_id,
        dict(stored),
    )


async def _append_locked(
    conn: Conn,
    run_row: dict[str, Any],
    parsed: Sequence[NewEvent],
    *,
    max_events_per_run: int,
    now: datetime | None,
    ingest: IngestColumns | None = None,
) -> Row:
    """Append to the run `lock_run` locked in this transaction and bring `run_row` up to date; the
    transaction's first append to the run issues its NOTIFY."""
    row = await _append_events(
        conn,
        run_row["run_id"],
        parsed,
        max_events_per_run=max_events_per_run,
        now=now,
        notify=not run_row.get(_NOTIFIED, False),
        ingest=ingest,
    )
    run_row.update((column, row[column]) for column in _APPENDED_COLUMNS)
    if not row["refused"]:
        run_row[_NOTIFIED] = True
    return row


async def append_in_transaction(
    conn: Conn,
    run_row: dict[str, Any],
    events: Sequence[Mapping[str, Any]] | Sequence[NewEvent],
    *,
    max_events_per_run: int,
    now: datetime | None = None,
    ingest: IngestColumns | None = None,
) -> list[shapes.Event]:
    """Append validated events to the run locked by `lock_run` in this transaction.

    Validates every event first (one bad event raises `InvalidInput` before anything is written),
    except a batch of `NewEvent`s, which the ledger built itself from input it had checked (the
    status ingestion's plan): checking them again cost an upload of 50 changed nodes about a
    quarter of its CPU. Refuses a terminal run (`RunTerminal`, a `Conflict`), assigns seqs after
    the run's last seq, advances the run (status events also set its status), trims retention and
    issues the transaction's one NOTIFY.
    A trailing `terminal` event sets the terminal state (first terminal wins). `run_row` is updated
    in place, so a second call in the same transaction continues the sequence. With `ingest`, the
    same statement writes the status ingestion's state (the run's status and its ingestion columns:
    nothing of it is written when the run had ended).
    Returns the stored events in API shape.
    """
    if events and all(isinstance(event, NewEvent) for event in events):
        parsed: list[NewEvent] = [event for event in events if isinstance(event, NewEvent)]
    else:
        parsed = parse_events(events)
    row = await _append_locked(
        conn, run_row, parsed, max_events_per_run=max_events_per_run, now=now, ingest=ingest
    )
    if row["refused"]:
        raise _refusal(run_row["run_id"], row)
    return _appended(row, parsed)


async def _settle_open_steps(conn: Conn, run_row: dict[str, Any], terminal: TerminalState) -> list[NewEvent]:
    """Settle the open steps of the run `lock_run` locked, which `terminal` is about to end: store
    its settled snapshot and return the step events to append before the `terminal` event. An
    ended run keeps its steps as they are (the terminal request is refused or a repeat)."""
    if run_row["terminal_status"] is not None:
        return []
    stored = run_row.get("live_node_progress")
    if not isinstance(stored, Mapping):
        return []
    events, snapshot = settle_steps(stored, stored, terminal.status, terminal.error)
    if snapshot != stored:
        await conn.execute(
            _STORE_STEPS_SQL,
            {"run_id": run_row["run_id"], "live_node_progress": Jsonb(snapshot, dumps=jsonb.dumps)},
        )
        run_row["live_node_progress"] = snapshot
    return [NewEvent(event.pop("type"), event) for event in events]


async def set_terminal_in_transaction(
    conn: Conn,
    run_row: dict[str, Any],
    state: Mapping[str, Any] | TerminalState,
    *,
    max_events_per_run: int,
    now: datetime | None = None,
) -> tuple[shapes.TerminalStateBody, bool]:
    """Set the run's terminal state; the first terminal state set is the one that stays.

    Returns (the run's terminal state, whether this call set it). Repeating the stored state is a
    no-op (no second event); a different one raises `RunTerminal` (a `Conflict`). Setting it
    settles the run's open steps (`ledger.runlog.steps`) and appends their events and the
    `terminal` event in this transaction.
    """
    terminal = state if isinstance(state, TerminalState) else parse_terminal_state(state, field="")
    events = [*await _settle_open_steps(conn, run_row, terminal), NewEvent("terminal", terminal.payload())]
    row = await _append_locked(conn, run_row, events, max_events_per_run=max_events_per_run, now=now)
    return _terminal_outcome(run_row["run_id"], row, terminal)


async def lock_stalled_runs(conn: Conn, cutoff: datetime, *, limit: int) -> list[dict[str, Any]]:
    """Lock up to `limit` non-terminal runs with no event since `cutoff`, skipping locked ones."""
    cur = await conn.execute(_LOCK_STALLED_RUNS_SQL, {"cutoff": cutoff, "limit": limit})
    return [dict(row) for row in await cur.fetchall()]


# -- the one-call-one-transaction API -----------------------------------------------------------


class RunLog:
    """Runs, their gapless event logs, terminal states and reads, on one database.

    With a `listener`, long-polls are woken by NOTIFY; without one they poll every
    `poll_interval_s`. With a `clock`, every write takes its time from it (tests); otherwise from
    Postgres.
    """

    def __init__(
        self,
        db: Database,
        *,
        listener: Listener | None = None,
        clock: Clock | None = None,
        max_events_per_run: int = DEFAULT_MAX_EVENTS_PER_RUN,
        poll_interval_s: float = _DEFAULT_POLL_INTERVAL_S,
    ) -> None:
        if max_events_per_run < 0:
            raise ValueError("max_events_per_run must be >= 0 (0 = unlimited)")
        self.db = db
        self.listener = listener
        self.clock = clock
        self.max_events_per_run = max_events_per_run
        self.poll_interval_s = poll_interval_s
        self.reads = 0
        # Each read run's `created_at` (it never changes): its next read names its partition.
        self._created_at: dict[str, datetime] = {}
        self._fanout = Fanout(listener, self._read) if listener is not None else None

    async def _read(self, run_id: str, cursor: int | None, limit: int) -> SharedPage:
        self.reads += 1
        # One statement is one snapshot already: in autocommit it costs one round trip instead of
        # BEGIN/SELECT/COMMIT, which is most of a woken long-poll's latency.
        async with self.db.connection(autocommit=True) as conn:
            known = self._created_at.get(run_id)
            shared, created_at = await read_page(conn, run_id, cursor, limit, created_at=known)
        if len(self._created_at) >= _CREATED_AT_KEPT:
            self._created_at.clear()
        self._created_at[run_id] = created_at
        return shared

    async def _now(self, conn: Conn) -> datetime | None:
        return await self.clock.now(conn) if self.clock is not None else None

    async def open_run(self, run_id: str, play_name: str | None = None) -> shapes.Run:
        """Open the run (idempotent) and return it."""
        run_id = validate_run_id(run_id)
        validate.text("play_name", play_name, optional=True)
        async with self.db.transaction() as conn:
            await open_run_in_transaction(conn, run_id, play_name=play_name, now=await self._now(conn))
            cur = await conn.execute(_GET_RUN_SQL, {"run_id": run_id})
            row = await cur.fetchone()
        assert row is not None
        return run_from_row(row)

    async def recent_log_lines(self, run_id: str, limit: int = validate.LIVE_LOG_TAIL_LIMIT) -> list[str]:
        """The text of the run's last `limit` ``log`` events, oldest first; `NotFound` if the run
        was never opened. (A reporter continuing an attempt rebuilds its live tail from them.)"""
        run_id = validate_run_id(run_id)
        limit = check_limit(limit)
        async with self.db.connection() as conn:
            cur = await conn.execute(_RUN_FOR_LOG_LINES_SQL, {"run_id": run_id})
            run = await cur.fetchone()
            if run is None:
                raise NotFound(f"unknown run {run_id!r}")
            if run["converting"]:
                raise conversion.converting_error(run_id)
            cur = await conn.execute(
                _RECENT_LOG_LINES_SQL,
                {
                    "run_id": run_id,
                    "run_created_at": run["created_at"],
                    "trimmed_through": run["events_trimmed_through"],
                    "limit": limit,
                },
            )
            rows = await cur.fetchall()
        return [str(row["line"]) for row in reversed(rows)]

    async def get_run(self, run_id: str) -> shapes.Run:
        """The run in API shape; `NotFound` if it was never opened."""
        run_id = validate_run_id(run_id)
        async with self.db.connection() as conn:
            cur = await conn.execute(_GET_RUN_SQL, {"run_id": run_id})
            row = await cur.fetchone()
        if row is None:
            raise NotFound(f"unknown run {run_id!r}")
        return run_from_row(row)

    async def append(self, run_id: str, events: Sequence[Mapping[str, Any]]) -> list[shapes.Event]:
        """Append events in one transaction (one round trip); returns them with their seq and ts."""
        run_id = validate_run_id(run_id)
        parsed = parse_events(events)  # bad input is rejected before anything is sent
        if parsed[-1].type == "terminal":
            return await self._append_ending(run_id, parsed)
        async with self.db.autocommit() as conn:
            row = await _append_events(
                conn,
                run_id,
                parsed,
                max_events_per_run=self.max_events_per_run,
                now=await self._now(conn),
                notify=True,
            )
        if row["refused"]:
            raise _refusal(run_id, row)
        return _appended(row, parsed)

    async def _append_ending(self, run_id: str, parsed: list[NewEvent]) -> list[shapes.Event]:
        """`append` of a batch whose last event ends the run: under the run's lock, its open steps
        are settled and their events appended between the batch and its `terminal` event."""
        terminal = parse_terminal_state(parsed[-1].payload, field="events[-1]")
        async with self.db.transaction() as conn:
            run_row = await lock_run(conn, run_id)
            settled = await _settle_open_steps(conn, run_row, terminal)
            batch = [*parsed[:-1], *settled, parsed[-1]]
            row = await _append_locked(
                conn, run_row, batch, max_events_per_run=self.max_events_per_run, now=await self._now(conn)
            )
            if row["refused"]:
                raise _refusal(run_id, row)
        return _appended(row, batch)

    async def set_terminal(
        self,
        run_id: str,
        status: str,
        *,
        result: Any = None,
        error: str | None = None,
        total_rows: int | None = None,
        duration_ms: int | None = None,
        play_name: str | None = None,
    ) -> shapes.TerminalStateBody:
        """Set the terminal state (first wins; the same again is a no-op; a different one `Conflict`),
        settling the run's open steps in the same transaction."""
        terminal = parse_terminal_state(
            {
                "status": status,
                "result": result,
                "error": error,
                "total_rows": total_rows,
                "duration_ms": duration_ms,
                "play_name": play_name,
            },
            field="",
        )
        run_id = validate_run_id(run_id)
        # One transaction: the run's lock, its open steps settled, their events and the terminal.
        async with self.db.transaction() as conn:
            run_row = await lock_run(conn, run_id)
            state, _ = await set_terminal_in_transaction(
                conn, run_row, terminal, max_events_per_run=self.max_events_per_run, now=await self._now(conn)
            )
        return state

    async def get_terminal(self, run_id: str) -> shapes.TerminalStateBody | None:
        """The terminal state, or None while the run is live; `NotFound` for an unknown run."""
        return (await self.get_run(run_id))["terminal"]

    async def list_events(
        self, run_id: str, after: int | str = -1, timeout_ms: int = 0, limit: int = DEFAULT_LIST_LIMIT
    ) -> shapes.EventPage:
        """Events after the cursor, waiting up to `timeout_ms` (clamped to 30 s) when there are none.

        `after` is a seq, `-1` (from the oldest retained event) or `"now"` (only what comes next).
        Returns `{events, latest_seq, first_seq, terminal}`. A terminal run with nothing after the
        cursor answers at once: nothing more can come.
        """
        return (await self.wait_page(run_id, after, timeout_ms, limit)).copy()

    async def wait_page(
        self, run_id: str, after: int | str = -1, timeout_ms: int = 0, limit: int = DEFAULT_LIST_LIMIT
    ) -> SharedPage:
        """`list_events`, answered with the page object shared by every reader the same read
        served (woken together, same cursor and limit): read it, never change it."""
        run_id = validate_run_id(run_id)
        cursor = parse_after(after)
        timeout_s = clamp_timeout_ms(timeout_ms) / 1000
        limit = check_limit(limit)
        if self.listener is None or self._fanout is None or timeout_s <= 0:
            return await self._poll(run_id, cursor, limit, timeout_s)
        listener, fanout = self.listener, self._fanout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        # Counted in before the first read: a commit landing between the read and the wait still
        # wakes us (its wake-up moves `woken_at` past `seen`).
        watch = listener.watch(run_id)
        try:
            # A read started after the run's last wake-up sees every commit whose notification has
            # come, so readers arriving together (a thousand long-polls, the tails of a run at one
            # cursor after a wake-up) share it; a commit whose notification is still to come wakes
            # this reader when it does. Without the listener no notification is sure to come: then
            # only a read from now on will do.
            seen = watch.woken_at if listener.connected else listener.tick()
            shared = await fanout.read((run_id, cursor, limit), seen)
            while True:
                page = shared.page
                remaining = deadline - loop.time()
                if page["events"] or page["terminal"] is not None or remaining <= 0:
                    return shared
                key = (run_id, shared.after, limit)
                if watch.woken_at > seen:
                    # Woken since that read started: it may predate the commit, so read again.
                    seen = watch.woken_at
                    shared = await fanout.read(key, seen)
                    continue
                if not listener.connected:
                    remaining = min(remaining, listener.fallback_poll_s)
                woken = await fanout.next_page(watch, key, remaining)
                if woken is None:
                    # Timed out, or a poll while the listener is down: only a read from now on will do.
                    listener.timeouts += 1
                    seen = listener.tick()
                    shared = await fanout.read(key, seen)
                else:
                    seen, shared = woken
        finally:
            listener.unwatch(watch)

    def follow(
        self,
        run_id: str,
        on_page: Callable[[SharedPage], None],
        *,
        after: int | str = -1,
        limit: int = DEFAULT_LIST_LIMIT,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> Follower:
        """Call `on_page` with each page of the run's events after `after`, until the run ends or
        the follower is closed (`ledger.runlog.fanout.Follower`); call it on the event loop.

        The pages are `wait_page`'s, shared with every reader woken by the same read (read them,
        never change them), handed over from the wake-up's own callback: no task is resumed per
        follower, so a thousand followers of a run cost a thousand calls. Needs the listener.
        """
        run_id = validate_run_id(run_id)
        cursor = parse_after(after)
        limit = check_limit(limit)
        if self.listener is None or self._fanout is None:
            raise ValueError("follow needs a run log with a listener (RunLog(db, listener=...))")
        return Follower(self._fanout, self.listener.watch(run_id), (run_id, cursor, limit), on_page, on_error)

    async def _poll(self, run_id: str, cursor: int | None, limit: int, timeout_s: float) -> SharedPage:
        """Without a listener (or without waiting): read, and re-read every `poll_interval_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            shared = await self._read(run_id, cursor, limit)
            cursor = shared.after
            remaining = deadline - loop.time()
            if shared.page["events"] or shared.page["terminal"] is not None or remaining <= 0:
                return shared
            await asyncio.sleep(min(self.poll_interval_s, remaining))
