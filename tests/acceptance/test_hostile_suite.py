"""The hostile-runner suite: pathological runner streams (`tests.oracle.hostile`) through the real
`ledger report` against a real `ledger serve`, each checked for the properties a runner must never
break, whatever it writes:

- `ledger report` ends within its `--deadline` plus `MARGIN_S` (interpreter start-up, the service's
  answers, the final upload's bounded wait), and its peak memory stays under `MAX_RSS_BYTES`;
- no traceback, from `ledger report` or from `ledger runs`, `ledger run` and `ledger events` on
  the run (nor a control character from the runner on their output);
- the exit code agrees with the ledger's final state: 0 and 1 when the run ended as reported
  (a `suspended` result: still in flight), 2 (a contract it refuses) when the run was never
  created, 5 only when the ledger does not hold the run ended as reported;
- no other caller's answer changes: a bystander run, its events, a pool's counts and the run list
  answer as they did before.

Profiles (LEDGER_HOSTILE_PROFILE): ``ci`` (the default) plays a fixed, seeded set of streams, a
minute or two; ``soak`` plays streams with a random seed (printed; LEDGER_HOSTILE_SEED replays
one) for LEDGER_HOSTILE_SECONDS (default 600) and reports how many it played.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from ledger.cli.app import cli
from ledger.validate import INT64_MAX
from tests.acceptance.conftest import ROOT, Server, new_id
from tests.acceptance.test_cli import client_env
from tests.oracle.hostile import HUGE_COUNTS, HostileStream, hostile_stream

DEADLINE_S = 5.0
# Past the deadline: start-up, the service's answers on a loaded machine, and the reporter's own
# bounded wait for an upload still in flight (10 s) and for the ledger's answer (5 s).
MARGIN_S = 45.0
# A stream holds at most 8 MB of lines; the reporter keeps what it reads bounded.
MAX_RSS_BYTES = 768 * 1024 * 1024
# What the runner's text may not bring to the operator's terminal.
CONTROLS = ("\x1b", "\x07", "\x9b", "\x08", "\x00")


@dataclass(frozen=True)
class HostileProfile:
    name: str
    seed: int
    streams: int | None  # None: until `seconds` have passed
    seconds: float | None


def hostile_profile(environ: Mapping[str, str] = os.environ) -> HostileProfile:
    name = environ.get("LEDGER_HOSTILE_PROFILE", "ci").strip() or "ci"
    seed_text = environ.get("LEDGER_HOSTILE_SEED", "").strip()
    if name == "ci":
        streams = int(environ.get("LEDGER_HOSTILE_STREAMS", "8"))
        return HostileProfile("ci", int(seed_text or 35), streams=streams, seconds=None)
    if name == "soak":
        seed = int(seed_text) if seed_text else random.SystemRandom().randrange(2**32)
        seconds = float(environ.get("LEDGER_HOSTILE_SECONDS", "600"))
        return HostileProfile("soak", seed, streams=None, seconds=seconds)
    raise pytest.UsageError(f"LEDGER_HOSTILE_PROFILE must be ci or soak (got {name!r})")


PROFILE = hostile_profile()


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    seconds: float
    max_rss_bytes: int


def run_report(server: Server, tmp_path: Path, run_id: str, stream: HostileStream) -> Outcome:
    """`ledger report` on `stream`, its exit code, output, time and peak memory (its own rusage)."""
    args = [sys.executable, "-m", "ledger.cli", "report", "--run-id", run_id, "--deadline", str(DEADLINE_S)]
    if stream.contract is not None:
        contract = tmp_path / f"{run_id}.json"
        contract.write_text(stream.contract, encoding="utf-8", errors="surrogatepass")
        args += ["--contract", str(contract)]
    started = time.monotonic()
    proc = subprocess.Popen(
        args,
        cwd=ROOT,
        env={**os.environ, **client_env(server, tmp_path)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out: dict[str, bytes] = {}

    def feed() -> None:
        assert proc.stdin is not None
        # It may stop reading (a refused contract): what it read is enough.
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(stream.stdin.encode("utf-8", "surrogatepass"))
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()

    def drain(name: str) -> None:
        pipe = getattr(proc, name)
        out[name] = pipe.read()

    threads = [threading.Thread(target=feed)] + [
        threading.Thread(target=drain, args=(name,)) for name in ("stdout", "stderr")
    ]
    for thread in threads:
        thread.start()
    # A hung reporter is killed well past what the property allows, so the test reports it.
    killer = threading.Timer(DEADLINE_S + 4 * MARGIN_S, lambda: os.kill(proc.pid, signal.SIGKILL))
    killer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        killer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    for thread in threads:
        thread.join()
    for pipe in (proc.stdout, proc.stderr):
        assert pipe is not None
        pipe.close()
    return Outcome(
        proc.returncode,
        out["stdout"].decode(errors="replace"),
        out["stderr"].decode(errors="replace"),
        time.monotonic() - started,
        usage.ru_maxrss * 1024,
    )


def cli_output(server: Server, tmp_path: Path, *args: str) -> tuple[int, str, BaseException | None]:
    """A client command in process (its code, output and any exception it did not handle)."""
    env = {**client_env(server, tmp_path), "COLUMNS": "160"}
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=True)
    unhandled = result.exception if not isinstance(result.exception, SystemExit) else None
    return result.exit_code, result.output, unhandled


@dataclass
class Bystander:
    """Another caller's run and pool: what they answer must not change, whatever a runner does."""

    run_id: str
    pool: str
    answers: dict[str, Any] = field(default_factory=dict)
    first: dict[str, Any] = field(default_factory=dict)  # the answers before the first stream

    def refresh(self, server: Server) -> None:
        """Its pool entry made ready anew (a ready entry leaves the counts as it ages, by design),
        and its answers read: what one stream must leave as they are."""
        with server.client() as client:
            entries = {"version": "v1", "ids": ["b-1"], "ready": True}
            added = client.post(f"/v1/pools/{self.pool}/entries", json=entries)
            assert added.status_code == 200, added.text
        self.answers = self.read(server)

    def read(self, server: Server) -> dict[str, Any]:
        with server.client() as client:
            run = client.get(f"/v1/runs/{self.run_id}")
            events = client.get(f"/v1/runs/{self.run_id}/events", params={"after": "-1"})
            counts = client.get(f"/v1/pools/{self.pool}/counts", params={"version": "v1"})
            page = client.get("/v1/runs", params={"limit": 50})
        assert page.status_code == 200, f"the run list answers {page.status_code}: {page.text[:300]}"
        return {
            "run": (run.status_code, run.json()),
            "events": (events.status_code, events.json()),
            "counts": (counts.status_code, counts.json()),
        }


@pytest.fixture(scope="module")
def bystander(server: Server) -> Bystander:
    run_id, pool = new_id("bystander"), new_id("bystander-pool")
    with server.client() as client:
        assert client.post("/v1/runs", json={"run_id": run_id}).status_code in (200, 201)
        events = [{"type": "log", "line": f"bystander {i}"} for i in range(3)]
        assert client.post(f"/v1/runs/{run_id}/events", json={"events": events}).status_code in (200, 201)
        assert client.put(f"/v1/runs/{run_id}/terminal", json={"status": "completed"}).status_code == 200
    watcher = Bystander(run_id, pool)
    watcher.refresh(server)
    watcher.first = watcher.answers
    return watcher


@pytest.fixture(scope="module")
def huge_counts(database_url: str) -> tuple[int, ...]:
    """Counts at and past the bigint, when the run overview sums them as numeric; until it does,
    counts a few maps can sum without overflowing a bigint (the overview's own fix)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT data_type FROM information_schema.columns WHERE table_schema = 'ledger' "
            "AND table_name = 'run_overview' AND column_name = 'rows_completed'"
        ).fetchone()
    if row is not None and row[0] == "numeric":
        return HUGE_COUNTS
    return tuple(min(count, INT64_MAX // 64) for count in HUGE_COUNTS)


def check_stream(server: Server, tmp_path: Path, bystander: Bystander, stream: HostileStream) -> list[str]:
    """Every property of one stream; the problems found (empty: none)."""
    run_id = new_id(f"hostile-{stream.seed}")
    bystander.refresh(server)
    outcome = run_report(server, tmp_path, run_id, stream)
    what = f"{stream.describe()} exit={outcome.code} seconds={outcome.seconds:.1f}"
    problems: list[str] = []

    def problem(text: str) -> None:
        problems.append(f"{what}: {text}\n    stderr: {outcome.stderr[-1500:]!r}")

    if outcome.seconds > DEADLINE_S + MARGIN_S:
        problem(f"took {outcome.seconds:.0f} s, past the deadline {DEADLINE_S:g} s + {MARGIN_S:g} s")
    if outcome.max_rss_bytes > MAX_RSS_BYTES:
        problem(f"peak memory {outcome.max_rss_bytes // 2**20} MiB")
    if "Traceback" in outcome.stderr or "Traceback" in outcome.stdout:
        problem("a traceback")
    if any(line.rstrip().endswith(("failed:", ": ")) for line in outcome.stderr.splitlines()):
        problem("a line without its reason")

    with server.client() as client:
        answer = client.get(f"/v1/runs/{run_id}")
    run = answer.json() if answer.status_code == 200 else None
    ended = None if run is None or run["terminal"] is None else run["terminal"]["status"]
    expected = stream.reported_status()
    if stream.contract_refused:
        if outcome.code != 2 or run is not None or len(outcome.stderr.strip().splitlines()) != 1:
            problem(f"a refused contract: exit {outcome.code}, run {run is not None}, not one line")
    elif outcome.code in (0, 1):
        if outcome.code != (0 if stream.status in ("completed", "failed", "cancelled", "suspended") else 1):
            problem(f"exit {outcome.code} for a result status {stream.status!r}")
        if ended != expected:
            problem(f"exit {outcome.code} but the ledger holds {ended!r}, not {expected!r}")
    elif outcome.code == 5:
        if expected is not None and ended == expected:
            problem(f"exit 5 but the ledger holds the run ended {ended!r} as reported")
    else:
        problem(f"exit {outcome.code}")

    if not stream.contract_refused:
        for args in (("run", run_id), ("events", run_id)):
            code, output, unhandled = cli_output(server, tmp_path, *args)
            if unhandled is not None or code not in (0, 1):
                problem(f"`ledger {' '.join(args)}`: exit {code}, {unhandled!r}")
            if any(control in output for control in CONTROLS):
                problem(f"`ledger {args[0]}` printed a control character: {output[:300]!r}")
    code, output, unhandled = cli_output(server, tmp_path, "runs", "--limit", "20")
    if unhandled is not None or code != 0:
        problem(f"`ledger runs`: exit {code}, {unhandled!r}: {output[-300:]!r}")
    try:
        now = bystander.read(server)
    except AssertionError as exc:
        problem(str(exc))
    else:
        if (
            now != bystander.answers
            or now["run"] != bystander.first["run"]
            or now["events"] != bystander.first["events"]
        ):
            problem(f"another caller's answers changed: {now} != {bystander.answers}")
    return problems


@pytest.mark.hostile
# The ci profile takes a minute or two; the soak as long as it is told; this only stops a hung run.
@pytest.mark.timeout((PROFILE.seconds or 0) + 900)
def test_no_runner_stream_hangs_crashes_lies_or_hurts_another_caller(
    server: Server, tmp_path: Path, bystander: Bystander, huge_counts: tuple[int, ...]
) -> None:
    profile = PROFILE
    seeds = random.Random(profile.seed)
    started = time.monotonic()
    log_start = len(server.log())
    streams = 0
    played: list[str] = []
    problems: list[str] = []
    try:
        while True:
            if profile.streams is not None and streams >= profile.streams:
                break
            if profile.seconds is not None and time.monotonic() - started >= profile.seconds:
                break
            stream = hostile_stream(seeds.randrange(2**32), huge_counts=huge_counts)
            streams += 1
            played.extend(stream.kinds)
            problems.extend(check_stream(server, tmp_path, bystander, stream))
            if len(problems) > 20:
                break
        logged = [line[:400] for line in server.log()[log_start:].splitlines() if "Traceback" in line]
        problems.extend(f"the service logged: {line}" for line in logged[:5])
    finally:
        kinds = {kind: played.count(kind) for kind in sorted(set(played))}
        print(
            f"\nhostile profile={profile.name} seed={profile.seed} streams={streams} "
            f"seconds={time.monotonic() - started:.0f} problems={len(problems)} kinds={kinds}"
        )
    assert not problems, f"seed {profile.seed}: {len(problems)} problems:\n" + "\n".join(problems)
