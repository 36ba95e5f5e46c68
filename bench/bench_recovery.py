"""Availability under database trouble, measured over the real `ledger serve`.

    .venv/bin/python bench/bench_recovery.py [--outage 35] [--locked 20]

Always on a throwaway embedded Postgres of its own (it stops that server, so never
LEDGER_DATABASE_URL), with `ledger serve` (default settings) as a subprocess. It measures:

- an outage of `--outage` seconds, one client asking GET /v1/runs/{id} in a loop: the slowest
  answer while Postgres is down (all must be 503), the statuses seen, and the time from Postgres
  accepting connections again to the first 200 and to /readyz answering 200;
- a frozen listener: its backend SIGSTOPped (as a dead network looks), a long-poll waiting; the
  time from an append to the waiter's answer, and until the listener has a new connection;
- a locked run: one run's row held FOR UPDATE by another session, `--locked` concurrent appends
  to it; the latency of unrelated GETs meanwhile, and how long the blocked appends took to get 503;
- hostile connections: 8 connections each sending a 13 MB header block that never ends; how much
  the server process grew (resident memory) and what they were answered.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
from common import print_footer, print_table, serve

from ledger import migrate
from ledger.embedded import EmbeddedPostgres

TOKEN = "bench-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


def stop_postgres(server: EmbeddedPostgres) -> None:
    pg = server._server
    with type(pg)._lock:
        pg._stop()


def start_postgres(server: EmbeddedPostgres) -> None:
    pg = server._server
    with type(pg)._lock:
        pg.ensure_postgres_running()


def outage(server: EmbeddedPostgres, http: httpx.Client, outage_s: float) -> list[tuple[str, str]]:
    run_id = f"outage-{time.time_ns()}"
    assert http.post("/v1/runs", json={"run_id": run_id}).status_code == 200
    statuses: Counter[int] = Counter()
    slowest_down = 0.0
    stop_postgres(server)
    down_until = time.monotonic() + outage_s
    while time.monotonic() < down_until:
        started = time.monotonic()
        answer = http.get(f"/v1/runs/{run_id}")
        slowest_down = max(slowest_down, time.monotonic() - started)
        statuses[answer.status_code] += 1
        time.sleep(0.05)
    ready_started = time.monotonic()
    readyz_down = http.get("/readyz")
    readyz_down_s = time.monotonic() - ready_started
    start_postgres(server)
    back = time.monotonic()
    served_after = ready_after = None
    while served_after is None or ready_after is None:
        now = time.monotonic()
        if served_after is None and http.get(f"/v1/runs/{run_id}").status_code == 200:
            served_after = time.monotonic() - back
        if ready_after is None and http.get("/readyz").status_code == 200:
            ready_after = time.monotonic() - back
        if now - back > 120:
            raise SystemExit("the service did not recover within 120 s")
        time.sleep(0.02)
    seen = ", ".join(f"{code}: {n}" for code, n in sorted(statuses.items()))
    return [
        ("outage", f"{outage_s:g} s"),
        ("answers while down", seen),
        ("slowest answer while down", f"{slowest_down * 1000:.0f} ms"),
        ("/readyz while down", f"{readyz_down.status_code} in {readyz_down_s * 1000:.0f} ms"),
        ("Postgres back -> first 200", f"{served_after * 1000:.0f} ms"),
        ("Postgres back -> /readyz 200", f"{ready_after * 1000:.0f} ms"),
    ]


def listener_pid(url: str, other_than: int = 0) -> int | None:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'run-ledger-listener' AND pid <> %s",
            (other_than,),
        ).fetchone()
    return int(row[0]) if row else None


def frozen_listener(url: str, http: httpx.Client) -> list[tuple[str, str]]:
    run_id = f"frozen-{time.time_ns()}"
    assert http.post("/v1/runs", json={"run_id": run_id}).status_code == 200
    pid = listener_pid(url)
    assert pid is not None, "no listener connection"
    answer: dict[str, float] = {}

    def wait() -> None:
        page = http.get(f"/v1/runs/{run_id}/events", params={"after": 0, "timeout_ms": 60_000})
        assert page.json()["events"], page.text
        answer["at"] = time.monotonic()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.5)  # the long-poll is registered and waiting
    os.kill(pid, signal.SIGSTOP)
    try:
        frozen_at = time.monotonic()
        assert http.post(
            f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": "x"}]}
        ).is_success
        appended = time.monotonic()
        waiter.join()
        while (new := listener_pid(url, other_than=pid)) is None:
            if time.monotonic() - frozen_at > 60:
                raise SystemExit("the listener never reconnected")
            time.sleep(0.02)
        reconnected = time.monotonic() - frozen_at
    finally:
        os.kill(pid, signal.SIGCONT)
    return [
        ("append -> frozen listener's waiter answered", f"{(answer['at'] - appended) * 1000:.0f} ms"),
        ("freeze -> listener reconnected", f"{reconnected * 1000:.0f} ms (pid {pid} -> {new})"),
    ]


def locked_run(url: str, http: httpx.Client, blocked: int) -> list[tuple[str, str]]:
    held, free = f"held-{time.time_ns()}", f"free-{time.time_ns()}"
    for run_id in (held, free):
        assert http.post("/v1/runs", json={"run_id": run_id}).status_code == 200
    line = {"events": [{"type": "log", "line": "x"}]}

    def timed(method: str, path: str) -> tuple[int, float]:
        started = time.monotonic()
        status = http.request(method, path, json=line if method == "POST" else None).status_code
        return status, time.monotonic() - started

    with psycopg.connect(url) as holder, ThreadPoolExecutor(blocked + 4) as pool:
        holder.execute("SELECT 1 FROM ledger.runs WHERE run_id = %s FOR UPDATE", (held,))
        appends = [pool.submit(timed, "POST", f"/v1/runs/{held}/events") for _ in range(blocked)]
        time.sleep(0.3)
        unrelated = [timed("GET", f"/v1/runs/{free}") for _ in range(50)]
        results = [future.result() for future in appends]
        holder.rollback()
    latencies = sorted(took for _, took in unrelated)
    codes = Counter(status for status, _ in results)
    return [
        (
            f"unrelated GETs while {blocked} appends wait on a held run",
            "statuses " + str(dict(Counter(s for s, _ in unrelated))),
        ),
        ("  their p50 / max", f"{statistics.median(latencies) * 1000:.0f} / {latencies[-1] * 1000:.0f} ms"),
        ("blocked appends", f"statuses {dict(codes)}, slowest {max(t for _, t in results) * 1000:.0f} ms"),
    ]


def resident_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def oversized_headers(base: str, pid: int) -> list[tuple[str, str]]:
    host, port = base.removeprefix("http://").split(":")
    before = resident_mib(pid)
    peak = before
    answers: Counter[str] = Counter()

    def flood() -> None:
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            line = b"X-Pad: " + b"y" * 1000 + b"\r\n"
            sent = 0
            try:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: bench\r\n")
                while sent < 13 * 1024 * 1024:
                    sock.sendall(line * 64)
                    sent += len(line) * 64
            except OSError:
                pass
            try:
                head = sock.recv(64)
            except OSError:
                head = b""
            answers[head.split(b"\r\n", 1)[0].decode() or "closed without an answer"] += 1

    threads = [threading.Thread(target=flood) for _ in range(8)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        peak = max(peak, resident_mib(pid))
        time.sleep(0.01)
    return [
        ("8 never-finished 13 MB header blocks", ", ".join(f"{k}: {n}" for k, n in answers.items())),
        ("  server resident memory", f"{before:.0f} MiB -> peak {peak:.0f} MiB (+{peak - before:.1f} MiB)"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--outage", type=float, default=35.0, help="seconds Postgres stays down")
    parser.add_argument("--locked", type=int, default=20, help="concurrent appends to the held run")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmp:
        server = EmbeddedPostgres(Path(tmp) / "pg")
        url = server.url()
        migrate.upgrade(url)
        proc, base = serve(url, Path(tmp), TOKEN, LEDGER_WATCHDOG="0")
        try:
            limits = httpx.Limits(max_connections=args.locked + 10)
            with httpx.Client(base_url=base, headers=HEADERS, timeout=60, limits=limits) as http:
                rows = oversized_headers(base, proc.pid)
                rows += locked_run(url, http, args.locked)
                rows += frozen_listener(url, http)
                rows += outage(server, http, args.outage)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            server.stop()
    print_table(["measure", "value"], [list(row) for row in rows])
    print_footer(started, "embedded Postgres of its own, ledger serve with default settings")


if __name__ == "__main__":
    main()
