"""Our single append, and a status upload, beside pgbench's append: the same work, step by step.

    .venv/bin/python bench/append_floor.py [--upload] [--rounds 3] [--seconds 5] [--quick] [--json]

`python -m bench` sets `RunLog.append` of one event beside pgbench running the one-statement
append (`baselines.APPEND_WITH_NOTIFY`), and a 50-node status upload, every node changed, beside
the same statement appending its 50 events. This runs, in interleaved rounds, the sides of those
rows with 1 and 8 runs at once (one connection each; on LEDGER_DATABASE_URL, else a throwaway
embedded Postgres with fsync on):

- pgbench: the baseline, as `python -m bench` runs it (a C client, the statement sent as text);
- psycopg, the statement: the baseline's very statement from bare async psycopg connections
  (prepared after five calls, as psycopg does): what a Python client adds, if anything;
- psycopg, the function: `ledger.append_events_v3` called as our store calls it, with the same
  events, from the same bare connections: what the append's rules cost in Postgres beyond the
  statement;
- ours, the append: `RunLog.append` of the same events (`bench_runlog.throughput`, the bench's
  own row for one event): what our Python adds on top of the call (the pool's checkout, the batch's
  check, the answer);
- with `--upload` (the 50-event shape), ours, the upload: `apply_status_upload` of a 50-node map,
  every node changed (`bench_ingest.scenario`, the bench's own row): what the upload adds to the
  append of its events (its check, the diff against the stored map, its five statements).

Then the CPU one call costs each side but pgbench, client and server apart: one connection per
side, `synchronous_commit = off` on it so the commit's flush does not hide the work, the client's
CPU from `time.process_time` and the server's from its backend's `/proc/<pid>/task/*/schedstat`
(omitted when the server is not on this machine), `--calls` calls a round. The tables show the
median of the rounds, every round beside it. `--quick` is one short round; `--json` prints the
figures as JSON instead.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import baselines
import bench_ingest
import bench_runlog
import psutil
import psycopg
from common import bench_database, cpu_ns, print_footer, print_load_average, print_table
from psycopg.rows import tuple_row

from ledger.db import Database
from ledger.embedded import client_bin_dir
from ledger.ingest.store import apply_status_upload
from ledger.runlog.listener import CHANNEL
from ledger.runlog.store import DEFAULT_MAX_EVENTS_PER_RUN, RunLog

PGBENCH, STATEMENT, FUNCTION, APPEND, UPLOAD = (
    "pgbench",
    "psycopg, the statement",
    "psycopg, the function",
    "ours, the append",
    "ours, the upload",
)
RUNS = (1, 8)
UPLOAD_NODES = 50

# `ledger.append_events_v3` with the arguments `RunLog.append` gives it.
FUNCTION_CALL = (
    "SELECT * FROM ledger.append_events_v3(%(run_id)s, %(events)s::jsonb, NULL, %(max_events)s,"
    " NULL, %(channel)s, true, NULL)"
)


def sides(upload: bool) -> tuple[str, ...]:
    return (PGBENCH, STATEMENT, FUNCTION, APPEND, *((UPLOAD,) if upload else ()))


def new_run_ids(side: str, runs: int) -> list[str]:
    """Runs new to this measure (each starts empty, as the baseline's do)."""
    stamp = time.time_ns()
    return [f"floor-{side.replace(',', '').replace(' ', '-')}-{runs}-{stamp}-{i}" for i in range(runs)]


async def open_bare(url: str, run_ids: list[str]) -> list[psycopg.AsyncConnection[Any]]:
    """One bare autocommit connection per run, each run opened."""
    conns = [await psycopg.AsyncConnection.connect(url, autocommit=True) for _ in run_ids]
    for run_id in run_ids:
        await conns[0].execute("INSERT INTO ledger.runs (run_id) VALUES (%s)", (run_id,))
    return conns


def bare_params(run_id: str, batch: int) -> dict[str, Any]:
    return {
        "run_id": run_id,
        # The batch `RunLog.append` is given, as it passes it on: [type, payload] pairs.
        "events": json.dumps([[e["type"], {"line": e["line"]}] for e in bench_runlog.log_events(batch)]),
        "max_events": DEFAULT_MAX_EVENTS_PER_RUN,
        "channel": CHANNEL,
    }


async def bare_call(conn: psycopg.AsyncConnection[Any], sql: str, params: dict[str, Any]) -> None:
    await (await conn.execute(sql, params)).fetchall()


async def bare_rate(url: str, runs: int, seconds: float, sql: str, batch: int) -> float:
    """Calls/s of `sql` run back to back by `runs` bare connections, a run each."""
    run_ids = new_run_ids("bare", runs)
    conns = await open_bare(url, run_ids)
    counts = [0] * runs
    try:
        deadline = time.perf_counter() + seconds

        async def caller(index: int) -> None:
            conn, params = conns[index], bare_params(run_ids[index], batch)
            while time.perf_counter() < deadline:
                await bare_call(conn, sql, params)
                counts[index] += 1

        started = time.perf_counter()
        await asyncio.gather(*(caller(i) for i in range(runs)))
        return sum(counts) / (time.perf_counter() - started)
    finally:
        for conn in conns:
            await conn.close()


async def rate(side: str, url: str, runs: int, seconds: float, batch: int) -> float:
    """Calls/s of `side`: appends of `batch` events, or 50-node uploads."""
    if side == PGBENCH:
        events_s = await asyncio.to_thread(baselines.append_rate, client_bin_dir(), url, runs, batch, seconds)
        return events_s / batch
    if side == APPEND:
        return await bench_runlog.throughput(url, runs, batch, seconds) / batch
    if side == UPLOAD:
        async with Database(url, min_size=runs, max_size=runs) as db:
            build = bench_ingest.progress(UPLOAD_NODES, nodes=UPLOAD_NODES)
            uploads_s, _ = await bench_ingest.scenario(db, "floor-upload", build, runs, seconds)
            return uploads_s
    sql = baselines.append_statement(batch) if side == STATEMENT else FUNCTION_CALL
    return await bare_rate(url, runs, seconds, sql, batch)


async def backend_pid(conn: psycopg.AsyncConnection[Any]) -> int | None:
    """The pid of `conn`'s server backend on this machine, or None when it is not a process of
    this machine: a server in a container or elsewhere numbers its own processes, and a process
    here by the same number is some other program. A backend works in its server's data directory,
    which tells them apart (reading the setting takes a superuser or `pg_read_all_settings`)."""
    pid = conn.info.backend_pid
    try:
        cur = conn.cursor(row_factory=tuple_row)
        row = await (await cur.execute("SELECT current_setting('data_directory')")).fetchone()
    except psycopg.errors.InsufficientPrivilege:
        return None
    try:
        return pid if row is not None and psutil.Process(pid).cwd() == row[0] else None
    except psutil.Error:
        return None


async def per_call_cpu(
    call: Callable[[], Awaitable[Any]], pid: int | None, calls: int
) -> tuple[float, float | None]:
    """(client µs, server µs or None) per `call`, after a warm-up; `pid` is the server backend's
    (`backend_pid`), None when its CPU cannot be read here."""
    for _ in range(50):
        await call()
    server_before = cpu_ns(pid) if pid is not None else 0
    client_before = time.process_time()
    for _ in range(calls):
        await call()
    client_us = (time.process_time() - client_before) / calls * 1e6
    if pid is None:
        return client_us, None
    return client_us, (cpu_ns(pid) - server_before) / calls / 1e3


async def cpu_round(url: str, calls: int, batch: int, upload: bool) -> dict[str, tuple[float, float | None]]:
    measured: dict[str, tuple[float, float | None]] = {}
    for side, sql in ((STATEMENT, baselines.append_statement(batch)), (FUNCTION, FUNCTION_CALL)):
        run_ids = new_run_ids(side, 1)
        (conn,) = await open_bare(url, run_ids)
        try:
            await conn.execute("SET synchronous_commit = off")
            call = functools.partial(bare_call, conn, sql, bare_params(run_ids[0], batch))
            measured[side] = await per_call_cpu(call, await backend_pid(conn), calls)
        finally:
            await conn.close()
    async with Database(url, min_size=1, max_size=1) as db:
        async with db.autocommit() as conn:
            await conn.execute("SET synchronous_commit = off")
            pid = await backend_pid(conn)
        (run_id,) = new_run_ids(APPEND, 1)
        await bench_runlog.open_runs(db, [run_id])
        runlog, batch_events = RunLog(db), bench_runlog.log_events(batch)
        measured[APPEND] = await per_call_cpu(lambda: runlog.append(run_id, batch_events), pid, calls)
        if upload:
            (run_id,) = new_run_ids(UPLOAD, 1)
            build = bench_ingest.progress(UPLOAD_NODES, nodes=UPLOAD_NODES)
            seqs = iter(range(1, 1_000_000))

            async def one_upload() -> None:
                await apply_status_upload(db, run_id, build(next(seqs)), max_events_per_run=10_000)

            measured[UPLOAD] = await per_call_cpu(one_upload, pid, calls)
    return measured


async def one_round(url: str, number: int, seconds: float, calls: int, upload: bool) -> dict[str, Any]:
    batch = UPLOAD_NODES if upload else 1
    # Alternating the order keeps a drift of the machine's load off one side.
    order = sides(upload) if number % 2 == 0 else sides(upload)[::-1]
    rates: dict[str, dict[int, float]] = {side: {} for side in order}
    for runs in RUNS:
        for side in order:
            rates[side][runs] = await rate(side, url, runs, seconds, batch)
            figure = f"{rates[side][runs]:,.0f} calls/s"
            print(f"round {number + 1}, {runs} run(s), {side}: {figure}", file=sys.stderr)
    return {"rates": rates, "cpu": await cpu_round(url, calls, batch, upload)}


def median_rates(rounds: list[dict[str, Any]], upload: bool) -> dict[str, dict[int, float]]:
    return {s: {n: statistics.median(r["rates"][s][n] for r in rounds) for n in RUNS} for s in sides(upload)}


def median_cpu(rounds: list[dict[str, Any]], upload: bool) -> dict[str, tuple[float, float | None]]:
    medians: dict[str, tuple[float, float | None]] = {}
    for side in sides(upload)[1:]:
        servers = [r["cpu"][side][1] for r in rounds]
        server = None if None in servers else statistics.median(servers)
        medians[side] = (statistics.median(r["cpu"][side][0] for r in rounds), server)
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--upload", action="store_true", help="the 50-node upload's shape: 50 events a call")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every side")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per rate")
    parser.add_argument("--calls", type=int, default=2000, help="calls per side in a CPU round")
    parser.add_argument("--quick", action="store_true", help="one round of 1 s rates and 200 calls")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    rounds, seconds, calls = (1, 1.0, 200) if args.quick else (args.rounds, args.seconds, args.calls)
    with bench_database("bench-append-floor-") as database:
        started = time.perf_counter()
        load_start = os.getloadavg()
        measured = [
            asyncio.run(one_round(database.url, n, seconds, calls, args.upload)) for n in range(rounds)
        ]
        load_end = os.getloadavg()
    rates, cpu = median_rates(measured, args.upload), median_cpu(measured, args.upload)
    if args.json:
        document = {
            "profile": "quick" if args.quick else "full",
            "where": database.where,
            "batch": UPLOAD_NODES if args.upload else 1,
            "rates": {side: {str(n): rate for n, rate in by_runs.items()} for side, by_runs in rates.items()},
            "cpu": {side: {"client_us": c, "server_us": s} for side, (c, s) in cpu.items()},
            "rounds": [
                {
                    "rates": {s: {str(n): v for n, v in r["rates"][s].items()} for s in r["rates"]},
                    "cpu": {s: {"client_us": c, "server_us": v} for s, (c, v) in r["cpu"].items()},
                }
                for r in measured
            ],
            "load_average": {"start": list(load_start), "end": list(load_end)},
        }
        print(json.dumps(document, indent=2))
        return
    shape = (
        f"{UPLOAD_NODES}-event appends and {UPLOAD_NODES}-node uploads"
        if args.upload
        else "appends of one event"
    )
    print(f"calls/s: {shape}, median of {rounds} round{'s' if rounds > 1 else ''} (every round)")
    rate_rows = []
    for side in sides(args.upload):
        cells: list[str] = [side]
        for runs in RUNS:
            each = " / ".join(f"{r['rates'][side][runs]:,.0f}" for r in measured)
            ratio = rates[side][runs] / rates[PGBENCH][runs]
            cells += [f"{rates[side][runs]:,.0f} ({each})", f"{ratio:.2f}"]
        rate_rows.append(tuple(cells))
    print_table(("side", "1 run", "÷ pgbench", "8 runs", "÷ pgbench"), rate_rows, align="right")
    print(f"\nCPU per call, synchronous_commit off, {calls:,} calls a round (every round)")
    cpu_rows = []
    for side in sides(args.upload)[1:]:
        client, server = cpu[side]
        clients = " / ".join(f"{r['cpu'][side][0]:.0f}" for r in measured)
        servers = " / ".join(
            "-" if r["cpu"][side][1] is None else f"{r['cpu'][side][1]:.0f}" for r in measured
        )
        server_cell = "not on this machine" if server is None else f"{server:.0f} ({servers})"
        cpu_rows.append((side, f"{client:.0f} ({clients})", server_cell))
    print_table(("side", "client µs", "server µs"), cpu_rows, align="right")
    print_load_average(load_start, load_end)
    print_footer(started, database.where)


if __name__ == "__main__":
    main()
