"""What a trace collector that is down, or hangs, costs the service and `ledger report`.

    .venv/bin/python bench/dead_collector.py [--seconds 6] [--clients 8]

Not part of CI. On a throwaway embedded Postgres (or LEDGER_DATABASE_URL's server), for each of:
tracing off, a collector that records (a local OTLP/HTTP receiver), one that accepts and never
reads, and a closed port (all on 127.0.0.1): `ledger serve` under `--clients` appending clients
for `--seconds` (appends answered), then how long it takes to exit after SIGTERM; and `ledger
report` over a two-line run (how long, start-up included).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import common
import httpx

from tests.acceptance.tracing.otlp_receiver import blackhole, receiving

TOKEN = "bench-dead-collector-token-0123456789"


@contextmanager
def collector(kind: str) -> Iterator[dict[str, str]]:
    if kind == "off":
        yield {"OTEL_SDK_DISABLED": "true"}
        return
    if kind == "recording":
        with receiving() as receiver:
            yield {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
        return
    if kind == "hanging":
        with blackhole() as endpoint:
            yield {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
        return
    yield {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{common.free_port()}",
    }


async def appends(base: str, clients: int, seconds: float) -> int:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    done = 0
    end = time.monotonic() + seconds

    async def client() -> None:
        nonlocal done
        run_id = f"bench-{uuid.uuid4().hex[:12]}"
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as http:
            await http.post("/v1/runs", json={"run_id": run_id})
            while time.monotonic() < end:
                answer = await http.post(
                    f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": "x"}]}
                )
                done += answer.status_code == 200

    await asyncio.gather(*(client() for _ in range(clients)))
    return done


def report(url: str, base: str, env: dict[str, str]) -> float:
    lines = [{"type": "log", "line": "hello"}, {"type": "result", "status": "completed"}]
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "ledger.cli", "report", "--run-id", f"bench-{uuid.uuid4().hex[:12]}"],
        input="\n".join(json.dumps(line) for line in lines) + "\n",
        env={**os.environ, "LEDGER_URL": base, "LEDGER_TOKEN": TOKEN, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    started = time.perf_counter()
    rows = []
    with common.bench_database("bench-dead-collector-") as database:
        for kind in ("off", "recording", "hanging", "closed port"):
            with collector(kind) as env, tempfile.TemporaryDirectory() as work:
                proc, base = common.serve(database.url, Path(work), TOKEN, **env)
                answered = asyncio.run(appends(base, args.clients, args.seconds))
                took = report(database.url, base, env)
                stopping = time.perf_counter()
                proc.send_signal(signal.SIGTERM)
                proc.wait()
                stop = time.perf_counter() - stopping
                rows.append((kind, f"{answered:,}", f"{stop:.1f} s", f"{took:.1f} s"))
                print(" | ".join(rows[-1]), file=sys.stderr)
    common.print_table(
        (
            "collector",
            f"appends in {args.seconds:g} s ({args.clients} clients)",
            "serve exits after SIGTERM",
            "ledger report",
        ),
        rows,
    )
    common.print_footer(started, database.where)


if __name__ == "__main__":
    main()
