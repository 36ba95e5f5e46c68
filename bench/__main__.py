"""`python -m bench`: every hot path beside its minimal raw baseline, in one run, one table.

    python -m bench [--quick] [--json] [--peers]
    python -m bench --growth [--quick] [--json]
    python -m bench --growth --large [--quick] [--json]
    python -m bench --load [--seconds 60] [--workers 1 2] [--json]

Uses LEDGER_DATABASE_URL when set, else a throwaway embedded Postgres (server defaults: fsync and
synchronous_commit on), migrated; the baselines run on the same server in the same run, with the
wheel's pgbench, so a loaded machine slows both sides and the ratio still holds. `--quick` is a
CI-sized profile (seconds per measure, fewer waiters); `--json` prints the rows as JSON instead
of the table (progress goes to stderr either way). `--peers` adds the peers (DBOS streams,
Procrastinate, pgmq; bench/peers.py) on the same server after the suite, as a second table (under
"peers" in the JSON); they are the optional `bench` extra, and without it `--peers` says how to
install it and exits with code 2. `--growth` prints, instead of the table, how each hot path's
latency grows with the size of what it works on (bench/growth.py: events retained, pool size,
runs in the ledger, nodes per upload); it takes a few minutes (`--quick`: seconds). `--growth
--large` fills the ledger to 10 M events instead and measures the costs that must stay flat at
1 M / 3 M / 10 M (bench/growth_large.py; not for CI: about 4 GB of disk). `--load` prints,
instead, the mixed-load table (bench/load.py): 100 bare clients appending, uploading, long-polling
and tailing at once against `ledger serve`, once per `--workers` value.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

# The bench scripts import each other as top-level modules (they run as files from bench/).
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common
import suite

from ledger.embedded import client_bin_dir


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI-sized: about a second per measure")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--no-http", action="store_true", help="leave out the rows that start `ledger serve`")
    parser.add_argument(
        "--peers", action="store_true", help="add the peers: DBOS, Procrastinate, pgmq (`bench` extra)"
    )
    parser.add_argument(
        "--growth", action="store_true", help="instead: latency vs size per hot path (bench/growth.py)"
    )
    parser.add_argument(
        "--large",
        action="store_true",
        help="--growth: fill to 10 M events and measure at 1 M / 3 M / 10 M (bench/growth_large.py)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the table (and --peers) this many times, interleaved; each row shows its median round",
    )
    parser.add_argument("--load", action="store_true", help="instead: the mixed load (bench/load.py)")
    parser.add_argument("--seconds", type=float, default=60.0, help="--load: seconds per --workers value")
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2], help="--load: `ledger serve --workers`"
    )
    args = parser.parse_args()
    if args.load:
        import load

        mix = load.Mix(seconds=5.0 if args.quick else args.seconds)
        with common.bench_database("bench-load-") as database:
            started = time.perf_counter()
            load_rows = load.run(database.url, args.workers, mix)
            if args.json:
                load_document = {
                    "profile": "quick" if args.quick else "full",
                    "where": database.where,
                    "cores": os.cpu_count(),
                    "load": load_rows,
                }
                print(json.dumps(load_document, indent=2))
                return
            load.print_rows(load_rows, mix)
            common.print_footer(started, database.where)
        return
    if args.growth and args.large:
        import growth_large

        growth_large.run(growth_large.SMOKE if args.quick else growth_large.LARGE, args.json)
        return
    if args.growth:
        import growth

        growth.run(growth.QUICK if args.quick else growth.FULL, args.json)
        return
    if args.peers:
        import peers

        peers.require()
    profile = suite.QUICK if args.quick else suite.FULL
    if args.no_http:
        profile = suite.Profile(**{**profile.__dict__, "http": False})

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    with common.bench_database("bench-all-") as database:
        started = time.perf_counter()
        rounds: list[list[suite.Measure]] = []
        peer_rounds: list[list[suite.Measure]] = []
        for number in range(1, args.rounds + 1):
            if args.rounds > 1:
                log(f"-- round {number} of {args.rounds}")
            rounds.append(asyncio.run(suite.Suite(database.url, client_bin_dir(), profile, log).run()))
            if args.peers:
                peer_rounds.append(asyncio.run(peers.Peers(database.url, profile, log).run()))
        rows, spread = suite.median_rows(rounds)
        peer_rows, peer_spread = suite.median_rows(peer_rounds)
        if args.json:
            document: dict[str, object] = {
                "profile": profile.name,
                "where": database.where,
                "cores": os.cpu_count(),
                "rounds": args.rounds,
                "seconds": round(time.perf_counter() - started, 1),
                "measures": [{**row.as_json(), "ratios": spread[row.measure]} for row in rows],
            }
            if args.peers:
                document["peers"] = {
                    "versions": peers.versions(),
                    "measures": [{**row.as_json(), "ratios": peer_spread[row.measure]} for row in peer_rows],
                }
            print(json.dumps(document, indent=2))
            return
        several = args.rounds > 1
        headers = ("measure", "ours", "baseline", "ratio") + (("per round",) if several else ())
        common.print_table(headers, suite.table_rows(rows, spread if several else None), align="right")
        print()
        for what in dict.fromkeys(row.baseline_is for row in rows):
            print(f"  baseline: {what}")
        print("  ratio: ours / baseline for rates, baseline / ours for latencies (1.00 = as fast as raw)")
        if several:
            print(f"  {args.rounds} rounds, interleaved; each row is its median round (by ratio)")
        if args.peers:
            print()
            peers.print_table(peer_rows, peer_spread if several else None)
        common.print_footer(started, database.where)


if __name__ == "__main__":
    main()
