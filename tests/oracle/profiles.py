"""Hypothesis profiles of the oracle tests: ``oracle`` (the default) and ``soak``.

Only the oracle tests read them (through `budget`), so loading neither globally leaves every other
property test of the suite alone. ``HYPOTHESIS_PROFILE=soak`` selects the soak budgets (5,000+
examples for the main property) and turns the per-test timeout off.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.prerequisites import under_ci

SOAK = os.environ.get("HYPOTHESIS_PROFILE", "").strip() == "soak"

_COMMON = {
    "deadline": None,
    "derandomize": False,
    "print_blob": True,
    "suppress_health_check": [
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
}
settings.register_profile("oracle", max_examples=200, **_COMMON)  # type: ignore[arg-type]
settings.register_profile("soak", max_examples=5_000, **_COMMON)  # type: ignore[arg-type]

# Examples per test: (default, soak).
BUDGETS = {
    "direct": (220, 5_000),
    "http": (60, 1_500),
    "postgres_restart": (6, 150),
    # Each example runs `ledger report` and the CLI as processes: with the stories played by name
    # (`tests.oracle.failure_examples`), about two minutes of CI.
    "failures": (4, 400),
}

# pytest-timeout's per-test limit (pyproject: 120 s) would cut a soak run short, and a failing
# example's shrinking (each HTTP example may restart the service) off before it is reported. A hung
# example is bounded on its own (`tests.oracle.test_oracle.EXAMPLE_TIMEOUT_S`).
timeout = pytest.mark.timeout(0 if SOAK else 900)

# Hypothesis warns when the global `random` state changes while it draws an example. The service's
# and the pools' threads (uvicorn, psycopg_pool reconnect jitter, tenacity) use `random` in the
# background; the strategies never do.
background_random = pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies:hypothesis.errors.HypothesisDeprecationWarning"
)


# ORACLE_TALLY=FILE: every example is tallied in FILE (one JSON line: backend, runner lines,
# failure class and message) and a failing one does not stop the run, so one soak run reports how
# often each kind of failure comes up rather than the first one, shrunk.
# Under CI every failure must fail the build: nothing there may swallow or narrow the oracle.
CI = under_ci()
TALLY = os.environ.get("ORACLE_TALLY", "").strip()
if TALLY and under_ci():
    # Tallying lets every failure pass: CI's oracle must fail on the first one.
    raise pytest.UsageError("ORACLE_TALLY swallows the oracle's failures: it cannot be set under CI")


def tally(backend: str, scenario: Any, failure: BaseException | None) -> bool:
    """Tally one example when ORACLE_TALLY is set (True: the failure is taken care of)."""
    if not TALLY:
        return False
    if hasattr(scenario, "items"):
        lines = sum(item[1] if item[0] == "burst" else 1 for item in scenario.items if item[0] != "flush")
    else:
        lines = len(scenario.lines)
    entry = {
        "backend": backend,
        "lines": lines + (scenario.result is not None),
        "failure": None if failure is None else type(failure).__name__,
        "message": None if failure is None else str(failure).splitlines()[0][:300],
        "detail": None if failure is None else str(failure)[:6_000],
    }
    with open(TALLY, "a", encoding="utf-8") as out:
        out.write(json.dumps(entry) + "\n")
    return True


def budget(test: str) -> settings:
    """The Hypothesis settings of one oracle test under the active profile."""
    default, soak = BUDGETS[test]
    return settings(
        settings.get_profile("soak" if SOAK else "oracle"), max_examples=soak if SOAK else default
    )
