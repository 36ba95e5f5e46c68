"""The work a single append and a status upload send to Postgres, counted per call.

What a worker pays on every upload is mostly round trips and the client's CPU per statement, so
these tests pin the statements one call sends (from libpq's own trace of the connection: each
`Query` or `Bind` message the client sends is one statement run) and the validation it repeats.
A count is not a clock: it fails when work comes back, on any machine, however loaded.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from psycopg.pq import Trace

import ledger.runlog.events
from ledger.db import Database
from ledger.ingest.store import apply_status_upload
from ledger.runlog.store import RunLog

# psycopg prepares a statement on its sixth run (one more round trip, once): warm up past it.
WARM_UP = 8
NODES = 50


class Statements:
    """Counts the statements one pooled connection sends (a pool of one: every call uses it)."""

    def __init__(self, db: Database, path: Path) -> None:
        self.db = db
        self.path = path
        self.sent: list[str] = []

    async def count(self, call: Callable[[], Awaitable[Any]]) -> list[str]:
        """The statements `call` sent, in order (`BEGIN`, `COMMIT` and each statement run)."""
        async with self.db.connection() as conn:
            pgconn = conn.pgconn
        with self.path.open("w") as out:
            pgconn.trace(out.fileno())
            pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
            try:
                await call()
            finally:
                pgconn.untrace()
        sent = []
        for line in self.path.read_text().splitlines():
            fields = line.split("\t")
            # Frontend messages, tab-separated: `F`, the length, `Query` or `Bind`, then its fields.
            if len(fields) >= 3 and fields[0] == "F" and fields[2] in ("Query", "Bind"):
                sent.append(" ".join(field.strip() for field in fields[2:]))
        return sent


@pytest.fixture
async def statements(clean_database_url: str) -> AsyncIterator[Statements]:
    async with Database(clean_database_url, min_size=1, max_size=1) as db:
        with tempfile.TemporaryDirectory(prefix="ledger-trace-") as tmp:
            yield Statements(db, Path(tmp) / "trace")


def progress(seq: int, changed: int) -> dict[str, Any]:
    """An upload of a 50-node progress map whose first `changed` nodes advance."""
    nodes = {
        f"node-{n:02d}": {"started_at": 1, "total": 100, "completed": seq if n < changed else 0}
        for n in range(NODES)
    }
    return {"status": "running", "upload_seq": seq, "live_node_progress": nodes}


async def test_an_append_is_one_statement(statements: Statements) -> None:
    runlog = RunLog(statements.db)
    await runlog.open_run("r")
    for _ in range(WARM_UP):
        await runlog.append("r", [{"type": "log", "line": "warm"}])
    sent = await statements.count(lambda: runlog.append("r", [{"type": "log", "line": "x"}]))
    assert len(sent) == 1, sent


@pytest.mark.parametrize("changed", [1, NODES])
async def test_an_upload_is_the_position_read_then_a_transaction_of_two_statements(
    statements: Statements, changed: int
) -> None:
    # The position read (autocommit), then BEGIN, the run's lock, the append that writes the
    # ingestion state too, COMMIT: no statement of its own for the state.
    for seq in range(1, WARM_UP + 1):
        await apply_status_upload(statements.db, "r", progress(seq, changed))
    upload = progress(WARM_UP + 1, changed)
    sent = await statements.count(lambda: apply_status_upload(statements.db, "r", upload))
    assert len(sent) == 5, sent
    assert [sent[1], sent[-1]] == ['Query "BEGIN"', 'Query "COMMIT"']
    assert await stored_position(statements.db) == (WARM_UP + 1, WARM_UP + 1)


async def test_an_upload_that_appends_nothing_writes_its_state_with_a_statement_of_its_own(
    statements: Statements,
) -> None:
    for seq in range(1, WARM_UP + 1):
        await apply_status_upload(statements.db, "r", progress(seq, NODES))
    # The same nodes again under the next upload_seq: no event, the state still moves.
    unchanged = progress(WARM_UP, NODES) | {"upload_seq": WARM_UP + 1}
    answers = []

    async def upload() -> None:
        answers.append(await apply_status_upload(statements.db, "r", unchanged))

    sent = await statements.count(upload)
    assert answers[0]["events_appended"] == {} and not answers[0]["duplicate"]
    assert len(sent) == 5, sent
    assert await stored_position(statements.db) == (WARM_UP + 1, WARM_UP)


async def stored_position(db: Database) -> tuple[int, int]:
    """The run's `last_upload_seq` and the `completed` count its first node holds."""
    async with db.connection() as conn:
        cur = await conn.execute("SELECT last_upload_seq, live_node_progress FROM ledger.runs")
        row = await cur.fetchone()
    assert row is not None
    return int(row["last_upload_seq"]), int(row["live_node_progress"]["node-00"]["completed"])


async def test_a_late_duplicate_is_one_statement(statements: Statements) -> None:
    for seq in range(1, WARM_UP + 1):
        await apply_status_upload(statements.db, "r", progress(seq, NODES))
    sent = await statements.count(lambda: apply_status_upload(statements.db, "r", progress(2, NODES)))
    assert len(sent) == 1, sent


async def test_an_upload_checks_its_body_once_and_its_planned_events_not_again(
    statements: Statements, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The plan's events are built from the checked body: checking each again cost an upload of 50
    # changed nodes about a quarter of its CPU.
    checked: list[object] = []
    parse_event = ledger.runlog.events.parse_event

    def counting(event: object, field: str = "event") -> ledger.runlog.events.NewEvent:
        checked.append(event)
        return parse_event(event, field)

    monkeypatch.setattr(ledger.runlog.events, "parse_event", counting)
    await apply_status_upload(statements.db, "r", progress(1, NODES))
    answer = await apply_status_upload(statements.db, "r", progress(2, NODES))
    assert answer["events_appended"] == {"step.progress": NODES}
    assert checked == []
    # A batch a caller hands in is still checked, every event of it.
    await RunLog(statements.db).append("r", [{"type": "log", "line": "a"}, {"type": "log", "line": "b"}])
    assert len(checked) == 2
