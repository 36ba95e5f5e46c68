"""The service behind Debian's PgBouncer in transaction mode, its LISTEN connection going direct.

The tests start a Postgres of their own (Unix socket only) and a `pgbouncer` in front of it on
127.0.0.1, run as the Postgres server's own OS user so it can reach that socket (PgBouncer refuses
to run as root). Two pooled databases: `postgres` (two server sessions) for the service, and
`single` (one server session) where every client shares the same session, which makes what leaks
from one client's transaction into another's visible at once.

Without `pgbouncer` (Debian: `apt-get install pgbouncer`; `.ci/run` installs it) they are skipped
with the reason, and fail under CI (`CI=true`).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest

from ledger.clock import ManualClock
from ledger.db import Database
from ledger.runlog.store import RunLog
from ledger.runlog.watchdog import Watchdog
from ledger.testing import free_port
from tests.acceptance.conftest import Server, new_id, start_server, stop_server
from tests.own_postgres import OwnPostgres, own_postgres
from tests.prerequisites import unavailable

pytestmark = pytest.mark.own_postgres

LOCK_TIMEOUT_S = 2.0
STATEMENT_TIMEOUT_S = 5.0
WRITERS = 6
APPENDS_PER_WRITER = 8
START_TIMEOUT_S = 20.0


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
    )
    if found is None:
        unavailable("PgBouncer tests", "pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    return found


@dataclass
class Bouncer:
    direct_url: str
    port: int
    log_path: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


@pytest.fixture(scope="module")
def postgres() -> Iterator[OwnPostgres]:
    with own_postgres() as server:
        yield server


@pytest.fixture(scope="module")
def bouncer(postgres: OwnPostgres) -> Iterator[Bouncer]:
    binary = pgbouncer_binary()
    socket_dir = postgres.handle.pgdata
    # The user the server runs as can reach its socket directory; PgBouncer runs as that user,
    # with its files where that user can read them (not under pytest's root-only temp dirs).
    owner = os.stat(socket_dir).st_uid
    config_dir = Path(tempfile.mkdtemp(prefix="ledger-pgbouncer-"))
    port = free_port()
    pooled = f"host={socket_dir} port=5432 dbname=postgres user=postgres"
    (config_dir / "users.txt").write_text('"postgres" ""\n')
    (config_dir / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"postgres = {pooled} pool_size=2\n"
        f"single = {pooled} pool_size=1\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        "pool_mode = transaction\n"
        "auth_type = trust\n"
        f"auth_file = {config_dir / 'users.txt'}\n"
        "max_client_conn = 500\n"
        "logfile =\n"
        "pidfile =\n"
    )
    for path in (config_dir, *config_dir.iterdir()):
        os.chown(path, owner, -1)
    log_path = config_dir / "pgbouncer.log"
    as_owner = (
        {}
        if os.geteuid() == owner
        else {"user": owner, "group": pwd.getpwuid(owner).pw_gid, "extra_groups": []}
    )
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [binary, str(config_dir / "pgbouncer.ini")],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            **as_owner,  # type: ignore[call-overload]
        )
    running = Bouncer(direct_url=postgres.url, port=port, log_path=log_path)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {process.returncode}:\n{running.log()}")
            try:
                psycopg.connect(running.url(), connect_timeout=2, autocommit=True).close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer not answering:\n{running.log()}") from None
                time.sleep(0.1)
        yield running
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(config_dir, ignore_errors=True)


def shared_session_setting(bouncer: Bouncer, name: str) -> str:
    """`name` as the one server session behind `single` has it outside any transaction."""
    with psycopg.connect(bouncer.url("single"), autocommit=True, prepare_threshold=None) as conn:
        row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
    assert row is not None
    return str(row[0])


async def alternate_queries(db: Database, rounds: int) -> None:
    """Two pooled connections, one transaction each in turn, the same statement every time: what a
    busy pool does, in an order where both connections reach psycopg's prepare threshold."""
    async with db.pool.connection() as first, db.pool.connection() as second:
        for _ in range(rounds):
            for conn in (first, second):
                await conn.execute("SELECT count(*) FROM ledger.runs WHERE run_id = %s", ("none",))
                await conn.commit()


def pooled_database(bouncer: Bouncer, *, transaction_pooling: bool) -> Database:
    return Database(
        bouncer.url("single"),
        min_size=2,
        max_size=2,
        lock_timeout_s=LOCK_TIMEOUT_S,
        statement_timeout_s=STATEMENT_TIMEOUT_S,
        transaction_pooling=transaction_pooling,
    )


async def test_prepared_statements_and_session_settings_break_transaction_pooling(bouncer: Bouncer) -> None:
    # psycopg prepares a statement after a few executions on a connection, under a name unique only
    # per connection; on one shared server session the second connection's name collides.
    try:
        async with pooled_database(bouncer, transaction_pooling=False) as db:
            with pytest.raises(psycopg.errors.DuplicatePreparedStatement):
                await alternate_queries(db, rounds=8)
            # The per-connection SET landed on the shared server session: every other client has it.
            assert shared_session_setting(bouncer, "lock_timeout") == "2s"
    finally:
        # What the connections left on the one server session, gone for the next test.
        with psycopg.connect(bouncer.url("single"), autocommit=True, prepare_threshold=None) as conn:
            conn.execute("RESET ALL")
            conn.execute("DEALLOCATE ALL")


async def test_with_transaction_pooling_nothing_is_left_on_the_shared_session(bouncer: Bouncer) -> None:
    async with pooled_database(bouncer, transaction_pooling=True) as db:
        await alternate_queries(db, rounds=8)
        async with db.pool.connection() as conn:
            assert conn.prepare_threshold is None
        async with db.transaction() as conn:
            row = await (
                await conn.execute(
                    "SELECT current_setting('lock_timeout') AS l, current_setting('statement_timeout') AS s"
                )
            ).fetchone()
            assert row == {"l": "2s", "s": "5s"}
        assert shared_session_setting(bouncer, "lock_timeout") == "0"
        assert shared_session_setting(bouncer, "statement_timeout") == "0"


@pytest.fixture(scope="module")
def pooled_server(bouncer: Bouncer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(
        bouncer.url(),
        tmp_path_factory.mktemp("pgbouncer-serve"),
        LEDGER_LISTEN_URL=bouncer.direct_url,
        LEDGER_DB_TRANSACTION_POOLING="1",
        LEDGER_WATCHDOG="0",
    )
    yield running
    stop_server(running)


async def wait_for_waiters(http: httpx.AsyncClient, count: int) -> None:
    for _ in range(600):
        text = (await http.get("/metrics")).text
        line = next(x for x in text.splitlines() if x.startswith("ledger_waiters "))
        if float(line.split()[1]) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never {count} waiting readers")


async def test_concurrent_appends_and_a_woken_long_poll_through_pgbouncer(pooled_server: Server) -> None:
    async with pooled_server.async_client(timeout=60) as http:
        run_id = new_id("run")
        assert (await http.post("/v1/runs", json={"run_id": run_id})).status_code == 200
        waiting = asyncio.create_task(
            http.get(f"/v1/runs/{run_id}/events", params={"after": 0, "timeout_ms": 30_000})
        )
        await wait_for_waiters(http, 1)

        async def writer(n: int) -> list[int]:
            statuses = []
            async with pooled_server.async_client() as own:
                for k in range(APPENDS_PER_WRITER):
                    answer = await own.post(
                        f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": f"w{n}-{k}"}]}
                    )
                    statuses.append(answer.status_code)
            return statuses

        statuses = await asyncio.gather(*(writer(n) for n in range(WRITERS)))
        woken = (await waiting).json()
        # A LISTEN through transaction pooling never hears anything: the wait would end empty.
        assert woken["events"], "the long-poll was not woken by the appends"

        assert [s for per in statuses for s in per] == [200] * (WRITERS * APPENDS_PER_WRITER)
        events: list[dict[str, object]] = []
        after = 0
        while True:
            page = (await http.get(f"/v1/runs/{run_id}/events", params={"after": after, "limit": 7})).json()
            if not page["events"]:
                break
            events.extend(page["events"])
            after = page["events"][-1]["seq"]
    total = WRITERS * APPENDS_PER_WRITER
    assert [e["seq"] for e in events] == list(range(1, total + 1))
    assert sorted(str(e["line"]) for e in events) == sorted(
        f"w{n}-{k}" for n in range(WRITERS) for k in range(APPENDS_PER_WRITER)
    )


async def test_dropping_a_partition_leaves_no_setting_on_the_shared_session(bouncer: Bouncer) -> None:
    # Retention drops a due partition on a connection of its own; every client of `single` shares
    # its one server session, so a session-level timeout set there would become everyone's.
    clock = ManualClock(datetime(2096, 3, 4, 5, tzinfo=UTC))
    async with pooled_database(bouncer, transaction_pooling=True) as db:
        runlog = RunLog(db, clock=clock)
        run_id = new_id("run")
        await runlog.open_run(run_id)
        await runlog.set_terminal(run_id, "completed")
        clock.current += timedelta(days=40)
        dog = Watchdog(db, clock=clock, retention=timedelta(days=30))
        dropped = await dog.drop_partitions()
        assert "run_events_20960304_20960305" in [p.name for p in dropped]
    for name in ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout"):
        assert shared_session_setting(bouncer, name) == "0", name
