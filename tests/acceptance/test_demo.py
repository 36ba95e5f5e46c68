"""`ledger demo` as a person runs it (a subprocess), checked through SQL and the page it names.

Piped, it runs and exits; under a pseudo-terminal (as at a person's terminal) it keeps serving the
dashboard after the run until Ctrl-C, unless `--exit`.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from ledger.cli.demo.scenario import DEMO_PLAY, DemoPlan
from ledger.embedded import EmbeddedPostgres
from ledger.service.security import SESSION_COOKIE
from tests.acceptance.conftest import ROOT

ANSI = re.compile(r"\x1b\[")
ANSI_SEQUENCE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
PAGE_LINE = re.compile(
    r"^watch it in a browser: (http://127\.0\.0\.1:\d+/ui/runs/(demo-[0-9a-z-]+))\s*$", re.M
)
TOKEN_LINE = re.compile(r"^  sign in with this demo's token \(valid [^)]*\): (\S+)\s*$", re.M)
# Generous bounds on how long a small demo takes on a loaded machine, not performance thresholds.
DEMO_TIMEOUT_S = 100.0


def run_demo(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    return subprocess.run(
        [sys.executable, "-m", "ledger.cli", "demo", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=100,
    )


def demo_run_id(stdout: str) -> str:
    found = re.search(r"^run (demo-[0-9a-z-]+): completed", stdout, re.MULTILINE)
    assert found, stdout
    return found.group(1)


def ledger_state(url: str, run_id: str) -> dict[str, Any]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        run = conn.execute("SELECT * FROM ledger.runs WHERE run_id = %s", (run_id,)).fetchone()
        steps = conn.execute(
            "SELECT * FROM ledger.step_progress WHERE run_id = %s ORDER BY node_id", (run_id,)
        ).fetchall()
        overview = conn.execute("SELECT * FROM ledger.run_overview WHERE run_id = %s", (run_id,)).fetchone()
        events = conn.execute(
            "SELECT seq, type, payload FROM ledger.run_events WHERE run_id = %s ORDER BY seq", (run_id,)
        ).fetchall()
        sheets = conn.execute(
            "SELECT status, count(*) AS n FROM ledger.sheet_rows WHERE run_id = %s GROUP BY status", (run_id,)
        ).fetchall()
    return {
        "run": run,
        "steps": {s["node_id"]: s for s in steps},
        "overview": overview,
        "events": events,
        "sheets": {s["status"]: s["n"] for s in sheets},
    }


def check_demo_run(state: dict[str, Any], plan: DemoPlan) -> None:
    expected = plan.expected()
    run = state["run"]
    assert run is not None
    assert (run["status"], run["terminal_status"], run["play_name"]) == ("completed", "completed", DEMO_PLAY)
    assert run["terminal_error"] is None

    # The map step ends with the counts every source agrees on.
    enrich = state["steps"]["enrich"]
    assert (enrich["completed"], enrich["failed"], enrich["total"]) == (
        expected["completed"],
        expected["failed"],
        expected["total"],
    )
    assert state["sheets"] == {"completed": expected["completed"], "failed": expected["failed"]}

    # Every executed step started and settled; the untaken branch never ran.
    for node_id in ("load", "validate", "dedupe", "enrich", "notify"):
        step = state["steps"][node_id]
        assert step["started_at"] is not None and step["completed_at"] is not None, node_id
        assert step["started_at"] <= step["completed_at"]
    assert state["steps"].get("on_error") is None or state["steps"]["on_error"]["started_at"] is None
    assert state["steps"]["load"]["completed_at"] <= state["steps"]["enrich"]["started_at"]

    # A gapless log ending in exactly one terminal event; each executed step started once.
    events = state["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)) and run["last_seq"] == len(events)
    assert [e["type"] for e in events].count("terminal") == 1 and events[-1]["type"] == "terminal"
    started = sorted(e["payload"]["node_id"] for e in events if e["type"] == "step.started")
    assert started == ["dedupe", "enrich", "load", "notify", "validate"]
    assert any(e["type"] == "log" for e in events) and any(e["type"] == "dataset.lifecycle" for e in events)

    overview = state["overview"]
    assert (overview["steps_done"], overview["rows_total"]) == (5, expected["total"])
    assert overview["rows_failed"] == expected["failed"]


def test_demo_on_the_configured_database(database_url: str, tmp_path: Path) -> None:
    # The default 6,000 rows, paced faster than a person would watch them.
    result = run_demo(
        {"LEDGER_DATABASE_URL": database_url, "LEDGER_DATA_DIR": str(tmp_path)}, "--rate", "4000"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # Not a terminal: plain lines, no escape codes, and progress as it happened.
    assert not ANSI.search(out)
    assert re.search(r"^\[\s*\d+\.\ds\] progress   enrich [\d,]+ / 6,000", out, re.MULTILINE)
    assert re.search(r"^\[\s*\d+\.\ds\] terminal   completed", out, re.MULTILINE)
    assert "FROM ledger.run_overview" in out and "FROM ledger.step_progress" in out
    plan = DemoPlan()
    expected = plan.expected()
    assert (
        f"step 'enrich': {expected['completed']:,} / 6,000 ({expected['failed']} failed) rows; the live "
        "counters, the checkpoint and the sheet outcomes of leads_demo agree"
    ) in out
    # One story while it runs: the counts it prints only ever grow.
    progress = [
        (int(done.replace(",", "")), int(failed or 0))
        for done, failed in re.findall(r"progress   enrich ([\d,]+) / 6,000(?: \((\d+) failed\))?", out)
    ]
    assert progress and all(a[0] <= b[0] and a[1] <= b[1] for a, b in pairwise(progress)), progress
    state = ledger_state(database_url, demo_run_id(out))
    check_demo_run(state, plan)
    # Its log lines carry the time they were written, not the simulation's fixed date.
    stamps = [
        datetime.fromisoformat(e["payload"]["line"][1:25].replace("Z", "+00:00"))
        for e in state["events"]
        if e["type"] == "log" and e["payload"]["line"].startswith("[")
    ]
    assert stamps and all(abs(stamp - state["run"]["created_at"]) < timedelta(hours=1) for stamp in stamps)
    # Piped, it does not linger, so it names no page that would be gone by the time it is read.
    assert not PAGE_LINE.search(out) and not TOKEN_LINE.search(out), out
    assert "until Ctrl-C" not in out


def test_demo_with_nothing_configured_starts_the_embedded_postgres(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh"
    result = run_demo({"LEDGER_DATA_DIR": str(data_dir)}, "--rows", "1000", "--rate", "5000")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"embedded Postgres: data in {data_dir / 'pgdata'}" in result.stdout
    run_id = demo_run_id(result.stdout)
    # The data stays: the same data dir serves it again after the demo exited.
    server = EmbeddedPostgres(data_dir)
    try:
        check_demo_run(ledger_state(server.url(), run_id), DemoPlan(rows=1000))
    finally:
        server.stop()


class TerminalDemo:
    """`ledger demo` with a pseudo-terminal as its stdin, stdout and stderr, as a person runs it."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        base = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
        master, slave = os.openpty()
        # Wide, so that nothing is wrapped; a fresh pty has no size at all.
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 240, 0, 0))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ledger.cli", "demo", *args],
            cwd=ROOT,
            env={**base, "TERM": "xterm-256color", **env},
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        self.master = master
        self.chunks: list[bytes] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO once the child has closed the terminal
                return
            if not chunk:
                return
            self.chunks.append(chunk)

    def text(self) -> str:
        raw = b"".join(self.chunks).decode("utf-8", "replace")
        return ANSI_SEQUENCE.sub("", raw).replace("\r\n", "\n").replace("\r", "\n")

    def wait_for(self, pattern: re.Pattern[str]) -> re.Match[str]:
        deadline = time.monotonic() + DEMO_TIMEOUT_S
        while time.monotonic() < deadline:
            if found := pattern.search(self.text()):
                return found
            if self.process.poll() is not None:
                self.reader.join(5)
                if found := pattern.search(self.text()):
                    return found
                raise AssertionError(
                    f"the demo exited ({self.process.returncode}) without it:\n{self.text()}"
                )
            time.sleep(0.1)
        raise AssertionError(f"not in the demo's output within {DEMO_TIMEOUT_S:g}s:\n{self.text()}")

    def wait(self) -> int:
        code = self.process.wait(DEMO_TIMEOUT_S)
        self.reader.join(5)
        return code

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.reader.join(5)
        os.close(self.master)


@pytest.fixture
def terminal_demo(database_url: str, tmp_path: Path) -> Iterator[Any]:
    started: list[TerminalDemo] = []

    def start(*args: str) -> TerminalDemo:
        env = {"LEDGER_DATABASE_URL": database_url, "LEDGER_DATA_DIR": str(tmp_path)}
        # `--pace 0`: at once, not stretched to a minute as a terminal would get by default.
        started.append(TerminalDemo(env, "--rows", "100", "--rate", "20000", "--pace", "0", *args))
        return started[-1]

    yield start
    for demo in started:
        demo.close()


SERVING = re.compile(r"^serving (http://\S+) until Ctrl-C\s*$", re.M)


def test_on_a_terminal_the_demo_serves_its_run_page_until_ctrl_c(terminal_demo: Any) -> None:
    demo = terminal_demo()
    page = demo.wait_for(PAGE_LINE)
    url, run_id = page.group(1), page.group(2)
    token = demo.wait_for(TOKEN_LINE).group(1)
    assert token not in url
    # The run ends, the summary is printed, and the service stays up at the page it named.
    serving = demo.wait_for(SERVING)
    assert serving.group(1) == url
    out = demo.text()
    assert re.search(rf"^run {run_id}: completed", out, re.M), out
    assert out.index("sheet outcomes of leads_demo agree") < serving.start()
    assert demo.process.poll() is None

    origin = url.split("/ui/")[0]
    with httpx.Client(timeout=10) as http:
        # Without signing in, the page sends the browser to sign in; the printed token lets it in,
        # and back to the run's page.
        path = url.removeprefix(origin)
        bare = http.get(url)
        assert bare.status_code == 303 and bare.headers["location"] == f"/ui/sign-in?next={path}"
        signed = http.post(
            f"{origin}/ui/sign-in", data={"token": token, "next": path}, headers={"Origin": origin}
        )
        assert signed.status_code == 303, signed.text
        assert signed.headers["location"] == path
        assert http.cookies.get(SESSION_COOKIE) == token
        shown = http.get(url)
        assert shown.status_code == 200 and run_id in shown.text
        run = http.get(f"{origin}/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"})
        assert run.status_code == 200 and run.json()["status"] == "completed"

    demo.process.send_signal(signal.SIGINT)
    assert demo.wait() == 0, demo.text()
    assert "Traceback" not in demo.text() and "Aborted" not in demo.text()
    with pytest.raises(httpx.TransportError), httpx.Client(timeout=5) as http:
        http.get(url)


def test_on_a_terminal_the_demo_stops_on_sigterm_and_with_exit_at_once(terminal_demo: Any) -> None:
    # SIGTERM (a service manager, `kill`) stops the lingering service as Ctrl-C does.
    lingering = terminal_demo()
    url = lingering.wait_for(SERVING).group(1)
    lingering.process.send_signal(signal.SIGTERM)
    assert lingering.wait() == 0, lingering.text()
    assert "Traceback" not in lingering.text()

    # `--exit`: the same run, then the process ends by itself.
    at_once = terminal_demo("--exit")
    assert at_once.wait() == 0, at_once.text()
    out = at_once.text()
    assert re.search(r"^run demo-[0-9a-z-]+: completed", out, re.M), out
    # It stops at once: no page to open, so none is named.
    assert not PAGE_LINE.search(out), out
    assert "until Ctrl-C" not in out and "Traceback" not in out
    with pytest.raises(httpx.TransportError), httpx.Client(timeout=5) as http:
        http.get(url)
