"""The embedded Postgres: reused across processes for one data dir, stopped by the last live one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import psycopg
import pytest

from ledger.embedded import EmbeddedPostgres

HOLDER = """
import sys, time
from pathlib import Path
from ledger.embedded import EmbeddedPostgres
server = EmbeddedPostgres(Path(sys.argv[1]))
print(server.url(), flush=True)
time.sleep(600)
"""


def stop_holder(proc: subprocess.Popen[str], sig: signal.Signals) -> None:
    # Either signal ends the holder without its exit hook running.
    proc.send_signal(sig)
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


def start_holder(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(data_dir)], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    assert url.startswith("postgresql://"), url
    return proc, url


def wait_for_zombie(pid: int) -> None:
    for _ in range(100):
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return
        time.sleep(0.05)
    pytest.fail(f"process {pid} did not die")


def postmaster_pid(data_dir: Path) -> int | None:
    pid_file = data_dir / "pgdata" / "postmaster.pid"
    return int(pid_file.read_text().splitlines()[0]) if pid_file.exists() else None


def wait_until_stopped(data_dir: Path) -> None:
    for _ in range(100):
        if postmaster_pid(data_dir) is None:
            return
        time.sleep(0.1)
    pytest.fail("the embedded server is still running")


@pytest.mark.skipif(bool(os.environ.get("LEDGER_DATABASE_URL")), reason="embedded server only")
def test_reused_while_another_process_holds_it_and_stopped_by_the_last_live_one(tmp_path: Path) -> None:
    holder, url = start_holder(tmp_path)
    first_pid = postmaster_pid(tmp_path)
    server = EmbeddedPostgres(tmp_path)
    try:
        # Same server, not a second one.
        assert server.url() == url and postmaster_pid(tmp_path) == first_pid
        with psycopg.connect(server.url()) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        # The holder dies without running its exit hook, and is not even reaped yet (a zombie):
        # its handle must not keep the server up.
        holder.send_signal(signal.SIGKILL)
        wait_for_zombie(holder.pid)
        server.stop()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    wait_until_stopped(tmp_path)


@pytest.mark.skipif(bool(os.environ.get("LEDGER_DATABASE_URL")), reason="embedded server only")
def test_a_live_holder_keeps_the_server_up(tmp_path: Path) -> None:
    holder, url = start_holder(tmp_path)
    try:
        server = EmbeddedPostgres(tmp_path)
        server.stop()
        # The holder is alive and still connected to a running server.
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        stop_holder(holder, signal.SIGTERM)
    # A later handle's stop cleans up after the dead holder.
    EmbeddedPostgres(tmp_path).stop()
    wait_until_stopped(tmp_path)
