"""What a test does when a tool it needs from outside Python is missing (Chromium, pgbouncer, npm).

Outside CI the test is skipped with the reason, so `pytest` passes on a machine without the
optional system packages; under CI (`CI` set to 1, true or yes) it fails, because there a skip
would hide a suite that never ran.

Under CI every other skip fails too (`tests/conftest.py` turns it into a failure): a skip there is
a test that never ran and says nothing. The one kind kept is a skip that names a program or module
really missing from this install (`missing program: NAME`, `missing module: NAME`, or pytest's
`importorskip`), as in the dependency-floors venv, which installs only what the unit tests need.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from typing import NoReturn

import pytest


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(what: str, reason: str) -> NoReturn:
    """Skip the test for `reason`, or fail it under CI (`what` names the suite that cannot run)."""
    if under_ci():
        pytest.fail(f"{what} cannot run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


_MISSING = re.compile(r"^(?:Skipped: )?(?:missing (program|module): ([\w.+-]+)|could not import '([\w.]+)')")


def missing_module(name: str) -> str:
    """A skip reason naming a module this install lacks (kept under CI while it really is missing)."""
    return f"missing module: {name}"


def names_a_missing_program(reason: str) -> bool:
    """True when a skip's reason names a program (on PATH) or a module that this install lacks."""
    match = _MISSING.match(reason.strip())
    if match is None:
        return False
    kind, name, imported = match.groups()
    if kind == "program":
        return shutil.which(name) is None
    module = name or imported
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # a parent package is missing
        return True
