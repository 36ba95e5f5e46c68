"""How long the pytest plugin's fixtures take to set up in a downstream project.

    .venv/bin/python bench/plugin_setup.py [--runs 3] [--subprocess]

Not part of CI. Copies the downstream project's one test (`.ci/downstream/test_ledger_fixtures.py`:
`ledger_client`, `ledger_service`, `database_url`) into a throwaway directory and runs pytest on
it `--runs` times in a row with this interpreter (the installed `ledger.testing` plugin), each a
fresh process as a person's `pytest` is. For each run it prints the fixture set-up and teardown
times pytest reports (`--durations`: the test's setup phase starts every fixture, its teardown
stops them) and the whole process's wall time. The first run may build what later runs reuse
from the user's cache dir (the embedded Postgres, its migrated template database);
`LEDGER_TEST_FRESH_SERVER=1` in the environment measures a session that reuses nothing. The load
average is printed beside the figures: on a busy machine they grow with it. `--subprocess` adds a
conftest that serves the fixture as a `ledger serve` subprocess instead (`start_server`, what the
plugin did before it served from the test process), for a comparison under the same load.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_FILE = ROOT / ".ci" / "downstream" / "test_ledger_fixtures.py"
# What `--subprocess` puts beside the test: the service as a `ledger serve` subprocess.
_SUBPROCESS_CONFTEST = """
import pytest

from ledger.testing import start_server, stop_server


@pytest.fixture(scope="session")
def ledger_service(database_url, ledger_service_env, tmp_path_factory):
    server = start_server(database_url, tmp_path_factory.mktemp("ledger-service"), **ledger_service_env)
    yield server
    stop_server(server)
"""
# `0.52s setup    test_ledger_fixtures.py::test_...` in pytest's --durations table.
_PHASE = r"^\s*([0-9.]+)s {}\s"
_SETUP = re.compile(_PHASE.format("setup"), re.MULTILINE)
_TEARDOWN = re.compile(_PHASE.format("teardown"), re.MULTILINE)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(project: Path, number: int) -> tuple[float, float, float, float]:
    """(fixture set-up, fixture teardown, the pytest process's wall time and CPU time) of one run,
    in seconds. The CPU time (the process and the children it waited for: a `ledger serve`, not
    the Postgres server, which outlives it) is what a quiet machine's wall time would be at most."""
    cpu = _children_cpu_s()
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--basetemp={project / f'tmp-{number}'}",
            "--durations=0",
            "--durations-min=0",
            TEST_FILE.name,
        ],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    setups = [float(found) for found in _SETUP.findall(done.stdout)]
    if done.returncode != 0 or not setups:
        raise SystemExit(f"run {number} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    teardown = sum(float(found) for found in _TEARDOWN.findall(done.stdout))
    return sum(setups), teardown, wall, _children_cpu_s() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="pytest runs in a row (default 3)")
    parser.add_argument(
        "--subprocess", action="store_true", help="serve the fixture as a `ledger serve` subprocess"
    )
    args = parser.parse_args()
    project = Path(tempfile.mkdtemp(prefix="ledger-plugin-bench-"))
    try:
        shutil.copy(TEST_FILE, project / TEST_FILE.name)
        if args.subprocess:
            (project / "conftest.py").write_text(_SUBPROCESS_CONFTEST)
        print(f"load average before: {' '.join(f'{n:.2f}' for n in os.getloadavg())}")
        print(f"{'run':>3}  {'fixture set-up':>14}  {'teardown':>8}  {'pytest wall':>11}  {'pytest CPU':>10}")
        for number in range(1, args.runs + 1):
            setup_s, teardown_s, wall_s, cpu_s = one_run(project, number)
            print(f"{number:>3}  {setup_s:>13.2f}s  {teardown_s:>7.2f}s  {wall_s:>10.2f}s  {cpu_s:>9.2f}s")
        print(f"load average after:  {' '.join(f'{n:.2f}' for n in os.getloadavg())}")
    finally:
        shutil.rmtree(project, ignore_errors=True)


if __name__ == "__main__":
    main()
