"""Names in `ledger` and `reporter`: one name per type, so a reader (and a traceback) never has to
ask which `TerminalState` is meant."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("ledger", "reporter")
# Shipped migrations are frozen history: they are never edited, so they are not held to the rules.
FROZEN = ("ledger/migrations/versions/",)
# Edited in parallel by the SQL-in-one-place work, which brings them under these rules itself; the
# exclusion goes once both have landed.
NOT_YET = ("ledger/pool/", "ledger/service/ui/", "ledger/migrations/", "ledger/sql/")
# A record with more fields than this is built with keywords only: past three, a positional call
# no longer says which value is which, and adding a field could shift the others silently.
MAX_POSITIONAL_FIELDS = 3


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


def positional_records(trees: list[tuple[str, ast.Module]]) -> list[str]:
    """Dataclasses and named tuples of more than `MAX_POSITIONAL_FIELDS` fields that can still be
    built positionally."""
    found = []
    for relative, tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            decorators = [ast.unparse(d) for d in node.decorator_list]
            dataclass = [d for d in decorators if d.split("(")[0].endswith("dataclass")]
            named_tuple = any(ast.unparse(base).endswith("NamedTuple") for base in node.bases)
            fields = [
                statement
                for statement in node.body
                if isinstance(statement, ast.AnnAssign)
                and "ClassVar" not in ast.unparse(statement.annotation)
            ]
            if len(fields) > MAX_POSITIONAL_FIELDS and (
                named_tuple or (dataclass and "kw_only=True" not in dataclass[0])
            ):
                found.append(f"{relative}:{node.lineno} {node.name}")
    return found


def test_records_of_many_fields_are_keyword_only() -> None:
    trees = [(relative, tree) for relative, tree in modules() if not relative.startswith(NOT_YET)]
    assert positional_records(trees) == []


@pytest.mark.parametrize(
    "source",
    [
        "@dataclass(frozen=True)\nclass R:\n    a: int\n    b: int\n    c: int\n    d: int\n",
        "@dataclasses.dataclass\nclass R:\n    a: int\n    b: int\n    c: int\n    d: int\n",
        "class R(typing.NamedTuple):\n    a: int\n    b: int\n    c: int\n    d: int\n",
    ],
)
def test_a_positional_record_of_four_fields_is_caught(source: str) -> None:
    class_line = (
        source.splitlines().index(next(line for line in source.splitlines() if "class R" in line)) + 1
    )
    assert positional_records([("r.py", ast.parse(source))]) == [f"r.py:{class_line} R"]


def test_three_fields_or_keyword_only_pass() -> None:
    three = "@dataclass\nclass R:\n    a: int\n    b: int\n    c: int\n    x: ClassVar[int] = 0\n"
    keywords = "@dataclass(kw_only=True)\nclass R:\n    a: int\n    b: int\n    c: int\n    d: int\n"
    assert positional_records([("a.py", ast.parse(three)), ("b.py", ast.parse(keywords))]) == []
