"""Names in `ledger` and `reporter`: one name per type, so a reader (and a traceback) never has to
ask which `TerminalState` is meant."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("ledger", "reporter")
# Shipped migrations are frozen history: they are never edited, so they are not held to the rules.
FROZEN = ("ledger/migrations/versions/",)


def modules() -> Iterator[tuple[str, ast.Module]]:
    """(path relative to the repository, syntax tree) of every module of the packages."""
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            if not relative.startswith(FROZEN):
                yield relative, ast.parse(path.read_text(encoding="utf-8"), filename=relative)


def duplicate_class_names(trees: list[tuple[str, ast.Module]]) -> dict[str, list[str]]:
    homes: dict[str, list[str]] = defaultdict(list)
    for relative, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                homes[node.name].append(f"{relative}:{node.lineno}")
    return {name: places for name, places in homes.items() if len(places) > 1}


def test_no_two_classes_share_a_name() -> None:
    assert duplicate_class_names(list(modules())) == {}


def test_a_second_class_of_the_same_name_is_caught() -> None:
    one = ast.parse("class TerminalState:\n    pass\n")
    other = ast.parse("def f():\n    class TerminalState(dict):\n        pass\n")
    assert duplicate_class_names([("a.py", one), ("b.py", other)]) == {"TerminalState": ["a.py:1", "b.py:2"]}
