"""What a test does when a tool it needs from outside Python is missing (Chromium, pgbouncer, npm).

Outside CI the test is skipped with the reason, so `pytest` passes on a machine without the
optional system packages; under CI (`CI` set to 1, true or yes) it fails, because there a skip
would hide a suite that never ran.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(what: str, reason: str) -> NoReturn:
    """Skip the test for `reason`, or fail it under CI (`what` names the suite that cannot run)."""
    if under_ci():
        pytest.fail(f"{what} cannot run in CI: {reason}", pytrace=False)
    pytest.skip(reason)
