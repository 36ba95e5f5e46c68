"""The Durable Streams conformance suite (`@durable-streams/server-conformance-tests`, pinned in
tests/conformance/streams) against the real service: `npx vitest run` with the server's URL and a
token (a setup file adds it to every request), then the counts from vitest's JSON report.

The gate: every test passes but the known failures listed below, each with its reason; a known
failure that starts passing fails this test too, so the list stays true.

The suite's npm packages are installed by the test itself (`install_suite`): `npm ci` once per
checkout, again only when package-lock.json changes, under a file lock so xdist workers and
concurrent sessions never run two installs into one node_modules.

The folder's package.json overrides vite to 8.3.8: vite 8.4.0 (which vitest 4 would take) names an
optional dependency the registry does not have, and `npm ci` refuses such a lock file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.conftest import Server, start_server, stop_server
from tests.prerequisites import unavailable

SUITE_DIR = Path(__file__).resolve().parents[1] / "conformance" / "streams"
# The server's long-poll wait, short so the suite's timeout tests do not wait 20 s each.
LONG_POLL_S = 2
# Generous: the suite takes well under a minute here; this only stops a hung run.
SUITE_TIMEOUT_S = 600
# `npm ci` downloads about 30 MB on a cold cache; a hung registry stops here.
INSTALL_TIMEOUT_S = 300
# Both ignored by git: the lock beside package.json, the stamp inside node_modules.
INSTALL_LOCK = ".install.lock"
INSTALLED_STAMP = ".run-ledger-installed"
# The suite holds 338 tests; its 6 subscription tests are opt-in (off here), so 332 run.
SUITE_TOTAL = 338
SUITE_SKIPPED = 6

# Full test name (describe blocks and title, space-separated) -> why this server fails it.
KNOWN_FAILURES: dict[str, str] = {}


def install_suite() -> None:
    """`npm ci` in the suite's folder unless this package-lock.json is already installed there.

    The stamp is written inside node_modules after a successful install (`npm ci` deletes the folder
    first, so a failed or interrupted install leaves no stamp and is run again next time). Without
    npm the test is skipped, or fails under CI.
    """
    npm = shutil.which("npm")
    if npm is None or shutil.which("npx") is None:
        unavailable("the Durable Streams conformance suite", "npm is not installed (Node 20 and npm)")
    wanted = hashlib.sha256((SUITE_DIR / "package-lock.json").read_bytes()).hexdigest()
    stamp = SUITE_DIR / "node_modules" / INSTALLED_STAMP
    with (SUITE_DIR / INSTALL_LOCK).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == wanted:
            return
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--prefer-offline"],
            cwd=SUITE_DIR,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
            pytest.fail(f"`npm ci` in {SUITE_DIR} failed (exit {done.returncode}):\n{tail}", pytrace=False)
        stamp.write_text(wanted)


@pytest.fixture(scope="module")
def streams_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(
        database_url,
        tmp_path_factory.mktemp("streams-conformance"),
        LEDGER_STREAM_LONG_POLL_S=str(LONG_POLL_S),
        LEDGER_WATCHDOG="0",
        # Longer than the clients' own keep-alive (undici 4 s, httpx 5 s), so a loaded machine never
        # has the server close an idle connection just as the client reuses it.
        LEDGER_KEEPALIVE_TIMEOUT_S="30",
    )
    yield running
    stop_server(running)


def run_suite(server: Server, report: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "DS_BASE_URL": server.base_url,
        "DS_TOKEN": server.token,
        "DS_LONG_POLL_MS": str(LONG_POLL_S * 1000),
        "CI": "1",
    }
    done = subprocess.run(
        ["npx", "vitest", "run", "--reporter=dot", "--reporter=json", f"--outputFile={report}"],
        cwd=SUITE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=SUITE_TIMEOUT_S,
        check=False,
    )
    if not report.exists():
        raise AssertionError(
            f"vitest wrote no report (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    result: dict[str, Any] = json.loads(report.read_text())
    return result


def outcomes(report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Each test's full name -> (status, first failure message)."""
    found: dict[str, tuple[str, str]] = {}
    for file in report["testResults"]:
        for test in file["assertionResults"]:
            messages = test.get("failureMessages") or [""]
            found[test["fullName"]] = (test["status"], messages[0].splitlines()[0] if messages[0] else "")
    return found


# Above the project's per-test default: the suite takes about a minute, more on a loaded machine.
@pytest.mark.timeout(INSTALL_TIMEOUT_S + SUITE_TIMEOUT_S + 120)
def test_conformance_suite_passes(streams_server: Server, tmp_path: Path) -> None:
    install_suite()
    report = run_suite(streams_server, tmp_path / "report.json")
    results = outcomes(report)
    passed = sorted(name for name, (status, _) in results.items() if status == "passed")
    failed = {name: message for name, (status, message) in results.items() if status == "failed"}
    skipped = sorted(
        name for name, (status, _) in results.items() if status in ("skipped", "pending", "todo")
    )
    print(f"durable streams conformance: {len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped")
    unexpected = {name: message for name, message in failed.items() if name not in KNOWN_FAILURES}
    assert not unexpected, "unexpected failures:\n" + "\n".join(
        f"- {n}: {m}" for n, m in sorted(unexpected.items())
    )
    fixed = sorted(name for name in KNOWN_FAILURES if results.get(name, ("", ""))[0] == "passed")
    assert not fixed, f"known failures now pass (take them off the list): {fixed}"
    assert len(results) == SUITE_TOTAL
    assert len(skipped) == SUITE_SKIPPED
    assert len(passed) == SUITE_TOTAL - SUITE_SKIPPED - len(KNOWN_FAILURES)
