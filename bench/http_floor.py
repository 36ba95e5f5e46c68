"""The floor under the HTTP fan-out: our service beside uvicorn serving the same answers from a bare app.

    .venv/bin/python bench/http_floor.py [--readers 1000] [--rounds 3] [--quick] [--json]

Each round runs, one server at a time (which goes first alternates), `bench_service.fanout` as
`python -m bench` runs it: `--readers` long-polls of one run woken by one append, then as many SSE
tails; against

- ours: `ledger serve` on LEDGER_DATABASE_URL, else a throwaway embedded Postgres (fsync on);
- the floor: `bench/floor_app.py`, a bare ASGI app answering the same bytes from memory, under
  uvicorn configured as `ledger serve` configures it (httptools, uvloop, the same options).

Each server is started fresh for its turn of the round. Its CPU (the process with its children,
from /proc schedstat) is read just before the append and after the last answer, per answer; ours
does not count Postgres, which serves the one read all the answers share. The table shows the
median of the rounds per figure, then every round and the load average at the start and the end.
`--quick` is one round of 100 readers; `--json` prints the figures as JSON instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import bench_service
from common import bench_database, print_footer, print_load_average, print_table, serve, serve_floor

SERVERS = ("ours", "floor")
FIGURES = ("poll_p50", "poll_p99", "sse_p50", "sse_p99", "poll_cpu_us", "sse_cpu_us")


@dataclass(frozen=True)
class Figures:
    """One server's two fan-outs in one round: latencies in ms, CPU in µs per answer."""

    poll_p50: float
    poll_p99: float
    sse_p50: float
    sse_p99: float
    poll_cpu_us: float
    sse_cpu_us: float
    poll_answers: int
    sse_answers: int


async def fanouts(base: str, url: str | None, pid: int, readers: int) -> Figures:
    poll = await bench_service.fanout(base, url, readers, sse=False, server_pid=pid)
    tails = await bench_service.fanout(base, url, readers, sse=True, server_pid=pid)
    return Figures(
        poll_p50=poll["p50"],
        poll_p99=poll["p99"],
        sse_p50=tails["p50"],
        sse_p99=tails["p99"],
        poll_cpu_us=poll["cpu_us"],
        sse_cpu_us=tails["cpu_us"],
        poll_answers=int(poll["answers"]),
        sse_answers=int(tails["answers"]),
    )


def one_turn(server: str, url: str, readers: int) -> Figures:
    with tempfile.TemporaryDirectory(prefix=f"bench-floor-{server}-") as tmp:
        proc, base = (
            serve(url, Path(tmp), bench_service.TOKEN) if server == "ours" else serve_floor(Path(tmp))
        )
        try:
            return asyncio.run(fanouts(base, url if server == "ours" else None, proc.pid, readers))
        finally:
            proc.terminate()
            proc.wait(30)


def run(url: str, readers: int, rounds: int) -> list[dict[str, Figures]]:
    measured: list[dict[str, Figures]] = []
    for number in range(rounds):
        # Alternating who goes first keeps a drift of the machine's load off one server.
        order = SERVERS if number % 2 == 0 else SERVERS[::-1]
        this_round: dict[str, Figures] = {}
        for server in order:
            figures = one_turn(server, url, readers)
            print(
                f"round {number + 1}, {server}: long-poll p99 {figures.poll_p99:.1f} ms,"
                f" SSE p99 {figures.sse_p99:.1f} ms",
                file=sys.stderr,
            )
            this_round[server] = figures
        measured.append(this_round)
    return measured


def medians(measured: list[dict[str, Figures]], server: str) -> dict[str, float]:
    return {name: statistics.median(getattr(r[server], name) for r in measured) for name in FIGURES}


def pair(a: float, b: float) -> str:
    return f"{a:.1f} / {b:.1f}"


def table_rows(figures: dict[str, float]) -> tuple[str, str, str, str]:
    return (
        pair(figures["poll_p50"], figures["poll_p99"]),
        pair(figures["sse_p50"], figures["sse_p99"]),
        f"{figures['poll_cpu_us']:.0f}",
        f"{figures['sse_cpu_us']:.0f}",
    )


HEADER = ("long-poll p50 / p99 ms", "SSE p50 / p99 ms", "CPU µs per long-poll", "CPU µs per tail woken")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--readers", type=int, default=1000, help="long-polls, and SSE tails, per fan-out")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of both servers")
    parser.add_argument("--quick", action="store_true", help="one round of 100 readers")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    readers, rounds = (100, 1) if args.quick else (args.readers, args.rounds)
    with bench_database("bench-http-floor-") as database:
        started = time.perf_counter()
        load_start = os.getloadavg()
        measured = run(database.url, readers, rounds)
        load_end = os.getloadavg()
    summary = {server: medians(measured, server) for server in SERVERS}
    if args.json:
        document: dict[str, Any] = {
            "profile": "quick" if args.quick else "full",
            "where": database.where,
            "readers": readers,
            "rounds": [{server: asdict(figures) for server, figures in r.items()} for r in measured],
            "servers": summary,
            "load_average": {"start": list(load_start), "end": list(load_end)},
        }
        print(json.dumps(document, indent=2))
        return
    print(f"{readers:,} readers, median of {rounds} round{'s' if rounds > 1 else ''}")
    print_table(("server", *HEADER), [(s, *table_rows(summary[s])) for s in SERVERS], align="right")
    print()
    rows = [
        (f"{number + 1}", server, *table_rows(asdict(r[server])))
        for number, r in enumerate(measured)
        for server in SERVERS
    ]
    print_table(("round", "server", *HEADER), rows, align="right")
    print_load_average(load_start, load_end)
    print_footer(started, database.where)


if __name__ == "__main__":
    main()
