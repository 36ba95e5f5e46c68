"""How long the pytest plugin's fixtures take to set up in a downstream project.

    .venv/bin/python bench/plugin_setup.py [--runs 3]

Not part of CI. Copies the downstream project's one test (`.ci/downstream/test_ledger_fixtures.py`:
`ledger_client`, `ledger_service`, `database_url`) into a throwaway directory and runs pytest on
it `--runs` times in a row with this interpreter (the installed `ledger.testing` plugin), each a
fresh process as a person's `pytest` is. For each run it prints the fixture set-up and teardown
times pytest reports (`--durations`: the test's setup phase starts every fixture, its teardown
stops them) and the whole process's wall time. The first run may build what later runs reuse
from the user's cache dir (the embedded Postgres, its migrated template database);
`LEDGER_TEST_FRESH_SERVER=1` in the environment measures a session that reuses nothing. The load
average is printed beside the figures: on a busy machine they grow with it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_FILE = ROOT / ".ci" / "downstream" / "test_ledger_fixtures.py"
# `0.52s setup    test_ledger_fixtures.py::test_...` in pytest's --durations table.
_PHASE = r"^\s*([0-9.]+)s {}\s"
_SETUP = re.compile(_PHASE.format("setup"), re.MULTILINE)
_TEARDOWN = re.compile(_PHASE.format("teardown"), re.MULTILINE)


def one_run(project: Path, number: int) -> tuple[float, float, float]:
    """(fixture set-up, fixture teardown, the pytest process's wall time) of one run, in seconds."""
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
    return sum(setups), sum(float(found) for found in _TEARDOWN.findall(done.stdout)), wall


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="pytest runs in a row (default 3)")
    args = parser.parse_args()
    project = Path(tempfile.mkdtemp(prefix="ledger-plugin-bench-"))
    try:
        shutil.copy(TEST_FILE, project / TEST_FILE.name)
        print(f"load average before: {' '.join(f'{n:.2f}' for n in os.getloadavg())}")
        print(f"{'run':>3}  {'fixture set-up':>14}  {'teardown':>8}  {'pytest wall':>11}")
        for number in range(1, args.runs + 1):
            setup_s, teardown_s, wall_s = one_run(project, number)
            print(f"{number:>3}  {setup_s:>13.2f}s  {teardown_s:>7.2f}s  {wall_s:>10.2f}s")
        print(f"load average after:  {' '.join(f'{n:.2f}' for n in os.getloadavg())}")
    finally:
        shutil.rmtree(project, ignore_errors=True)


if __name__ == "__main__":
    main()
