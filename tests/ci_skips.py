"""Under CI a skip is a failure unless it names a program or module this install lacks.

A test skipped in CI never ran, and a green run would still say the suite passed: a route that
vanished, a feature "not wired yet" or a backend that was not there would go unseen. The one skip
kept is one whose reason names something missing from this install (`tests.prerequisites`), as in
the dependency-floors venv, which installs only what the unit tests need. A pytest plugin
(`tests/conftest.py` loads it) so a test can run it in a pytest session of its own.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.prerequisites import names_a_missing_program, under_ci


def _fail_a_skip_in_ci(report: pytest.TestReport | pytest.CollectReport) -> None:
    if not (report.skipped and under_ci()) or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
    if names_a_missing_program(reason):
        return
    report.outcome = "failed"
    report.longrepr = f"skipped under CI, where only a missing program may skip a test: {reason}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _fail_a_skip_in_ci(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _fail_a_skip_in_ci(report)
    return report
