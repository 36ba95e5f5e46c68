"""Under CI no test passes by being skipped, and the oracle cannot be told to let failures pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.prerequisites import names_a_missing_program

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ("-p", "tests.ci_skips", "-p", "no:ledger", "-p", "no:asyncio", "-p", "no:cacheprovider")

SKIPS = """
import pytest

def test_not_wired_yet():
    pytest.skip("GET /v1/runs is not wired into the service yet")

def test_missing_program():
    pytest.skip("missing program: no-such-program-anywhere")

def test_present_program():
    pytest.skip("missing program: python3")

def test_missing_module():
    pytest.importorskip("no_such_module_anywhere")

@pytest.mark.skipif(True, reason="embedded server only")
def test_skipif():
    pass
"""


def run_skips(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str) -> pytest.RunResult:
    monkeypatch.setenv("CI", ci)
    pytester.makepyfile(test_skips=SKIPS)
    return pytester.runpytest_inprocess(*PLUGINS)


def test_under_ci_a_skip_fails_unless_it_names_a_program_or_module_this_install_lacks(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A skip in CI hides a test that never ran: only one naming what is really missing is kept."""
    result = run_skips(pytester, monkeypatch, "true")
    # A skip in setup (a skipif mark) fails as an error of the setup.
    result.assert_outcomes(failed=2, errors=1, skipped=2)
    result.stdout.fnmatch_lines(
        ["FAILED *test_not_wired_yet*", "FAILED *test_present_program*", "ERROR *test_skipif*"],
        consecutive=False,
    )


def test_outside_ci_every_skip_stays_a_skip(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_skips(pytester, monkeypatch, "").assert_outcomes(skipped=5)


def test_a_module_skipped_whole_fails_under_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "1")
    pytester.makepyfile(test_module='import pytest\npytest.skip("later", allow_module_level=True)\n')
    result = pytester.runpytest_inprocess(*PLUGINS)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*skipped under CI*later*"])


def test_a_missing_program_or_module_is_named_and_really_missing() -> None:
    assert names_a_missing_program("missing program: no-such-program-anywhere")
    assert not names_a_missing_program("missing program: python3")
    assert names_a_missing_program("Skipped: missing module: no_such_module.sub")
    assert not names_a_missing_program("missing module: json")
    assert names_a_missing_program("could not import 'no_such_module': No module named 'no_such_module'")
    assert not names_a_missing_program("only on LEDGER_TEST_BACKEND=docker (missing program: nothing)")


def test_the_oracle_cannot_tally_failures_away_under_ci(tmp_path: Path) -> None:
    """ORACLE_TALLY lets every oracle failure pass (a soak's tally): under CI it is refused."""
    env = {**os.environ, "CI": "true", "ORACLE_TALLY": str(tmp_path / "tally.jsonl")}
    done = subprocess.run(
        [sys.executable, "-c", "import tests.oracle.profiles"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "ORACLE_TALLY" in done.stderr, done.stderr
    env["CI"] = ""
    done = subprocess.run(
        [sys.executable, "-c", "import tests.oracle.profiles"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
