"""The CI mutation check's choice of what to mutate: the functions a change touched."""

from __future__ import annotations

import json

from tests.mutation.changed import BASELINE, changed_functions, function_hashes, mutant_pattern, qualified
from tests.mutation.classify import ROOT

SOURCE = """
def rule(x):
    return x + 1


class Uploader:
    def _refused(self, error):
        self.failed_uploads += 1
"""


def test_a_function_is_changed_by_its_code_not_by_comments_or_formatting() -> None:
    before = {"m.py": function_hashes(SOURCE)}
    assert set(before["m.py"]) == {"rule", "Uploader._refused"}
    reworded = SOURCE.replace("return x + 1", "return (x + 1)  # one more")
    assert changed_functions(before, {"m.py": function_hashes(reworded)}) == {}
    edited = SOURCE.replace("+= 1", "+= 2")
    assert changed_functions(before, {"m.py": function_hashes(edited)}) == {"m.py": ["Uploader._refused"]}


def test_new_functions_and_new_modules_count_as_changed() -> None:
    before = {"m.py": function_hashes(SOURCE)}
    grown = SOURCE + "\n\ndef added():\n    return 2\n"
    after = {"m.py": function_hashes(grown), "n.py": function_hashes("def f():\n    return 1\n")}
    assert changed_functions(before, after) == {"m.py": ["added"], "n.py": ["f"]}


def test_mutmut_names_map_to_and_from_functions() -> None:
    assert mutant_pattern("reporter/uploader.py", "Uploader._refused") == (
        "reporter.uploader.xǁUploaderǁ_refused__mutmut_*"
    )
    assert mutant_pattern("ledger/validate.py", "cursor") == "ledger.validate.x_cursor__mutmut_*"
    assert qualified("reporter.uploader.xǁUploaderǁ_refused__mutmut_3") == "Uploader._refused"
    assert qualified("ledger.validate.x_cursor__mutmut_12") == "cursor"


def test_the_committed_baseline_covers_every_measured_module() -> None:
    import tomllib

    modules = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["mutmut"]["only_mutate"]
    assert sorted(json.loads(BASELINE.read_text("utf-8"))["functions"]) == sorted(modules)
