"""Scaffolding shared by the bench scripts: the database they measure on and the table they print.

The scripts run as files (`.venv/bin/python bench/bench_x.py`), which puts bench/ on sys.path, so
they import this module as `common`. Importing it also puts the project root on sys.path, so the
scripts find `ledger` and `reporter` even outside the editable install.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ledger import migrate  # noqa: E402
from ledger.config import load_settings  # noqa: E402
from ledger.embedded import EmbeddedPostgres  # noqa: E402


@dataclass(frozen=True)
class BenchDatabase:
    """A migrated database to measure on: its URL and, for the table's footer, where it runs."""

    url: str
    where: str


@contextmanager
def bench_database(prefix: str) -> Iterator[BenchDatabase]:
    """LEDGER_DATABASE_URL when set, else a throwaway embedded Postgres; migrated either way.

    The embedded server keeps the server defaults (fsync and synchronous_commit on) and lives in a
    temporary directory named with `prefix`; it is stopped and removed on exit. With
    LEDGER_DATABASE_URL set no embedded server is started at all.
    """
    url = load_settings().database_url
    if url is not None:
        migrate.upgrade(url)
        yield BenchDatabase(url, "LEDGER_DATABASE_URL")
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        server = EmbeddedPostgres(Path(tmp))
        try:
            url = server.url()
            migrate.upgrade(url)
            yield BenchDatabase(url, "embedded Postgres (fsync on)")
        finally:
            server.stop()


def print_table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    align: Literal["left", "right"] = "left",
) -> None:
    """Print `rows` under `header` as columns separated by ` | `, each as wide as its widest cell.

    `align="right"` right-aligns every column but the first, which holds the row's label.
    """
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return " | ".join(
            cell.rjust(width) if align == "right" and i > 0 else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    print(line(header))
    print("-+-".join("-" * width for width in widths))
    for row in rows:
        print(line(row))


def print_footer(started: float, where: str | None = None) -> None:
    """The line under a table: seconds since `started` (perf_counter), `where` it ran, the cores."""
    parts = [where] if where else []
    parts.append(f"{time.perf_counter() - started:.0f} s")
    parts.append(f"{os.cpu_count()} cores shared with other work")
    print(f"\n({'; '.join(parts)})")


def print_load_average(start: Sequence[float], end: Sequence[float]) -> None:
    """The machine's load average (`os.getloadavg()`) at a measure's start and end: whether the
    figures above it were taken on a quiet machine."""
    print(
        f"\nload average (1, 5, 15 min) at the start {', '.join(f'{x:.1f}' for x in start)},"
        f" at the end {', '.join(f'{x:.1f}' for x in end)}"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_ready(proc: subprocess.Popen[bytes], base: str, what: str) -> None:
    """Return once `base`/readyz answers 200; exit the bench if `proc` ends first or takes a minute."""
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with code {proc.returncode} before it was ready")
        try:
            if httpx.get(base + "/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{what} did not become ready")


def start_server(
    argv: list[str], env: dict[str, str], log_path: Path, what: str
) -> tuple[subprocess.Popen[bytes], str]:
    """`argv` plus `--port` on a free port, as a process of its own logging to `log_path`, once it
    answers ready: its process and base URL."""
    port = free_port()
    # The child holds the log open itself; the bench's copy is closed at once.
    with log_path.open("wb") as log:
        proc = subprocess.Popen([*argv, "--port", str(port)], cwd=ROOT, env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    wait_ready(proc, base, what)
    return proc, base


def serve(url: str, work: Path, token: str, **extra_env: str) -> tuple[subprocess.Popen[bytes], str]:
    """`ledger serve` on `url` as a process of its own (its log in `work`), once it answers ready."""
    env = {**os.environ, "LEDGER_DATABASE_URL": url, "LEDGER_API_TOKENS": token, "LEDGER_DATA_DIR": str(work)}
    argv = [sys.executable, "-m", "ledger.cli", "serve"]
    return start_server(argv, {**env, **extra_env}, work / "server.log", "ledger serve")


def serve_floor(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`bench/floor_app.py` (a bare app under uvicorn as `ledger serve` runs it) started as `serve`
    starts ours: a process of its own in the same environment, once it answers ready."""
    argv = [sys.executable, str(ROOT / "bench" / "floor_app.py")]
    return start_server(argv, dict(os.environ), work / "floor.log", "the floor app")


def cpu_ns(pid: int) -> int:
    """CPU time so far of process `pid` and its live descendants, every thread, in nanoseconds.

    From `/proc/<pid>/task/*/schedstat`: `/proc/<pid>/stat` counts 10 ms ticks, too coarse for the
    few hundred microseconds one answer costs. A process already gone counts 0.
    """
    try:
        pids = [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for each in pids:
        for schedstat in Path(f"/proc/{each}/task").glob("*/schedstat"):
            try:
                total += int(schedstat.read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue  # a thread that ended between the listing and the read
    return total
