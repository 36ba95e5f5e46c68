"""Names in `ledger` and `reporter`: private by default, one name per type, records built with
keywords.

Every module says what it offers (`__all__`); everything else it defines starts with `_`, so a
name without the underscore is one another module, a test or the documentation relies on, and a
helper can change without a search of the whole tree. One name is one type, so a reader (and a
traceback) never has to ask which `TerminalState` is meant."""

from __future__ import annotations

import ast
import importlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

if Path(__file__).resolve().parents[2].name == "mutants":
    # mutmut's copy of the sources: its trampolines add names to every mutated module.
    pytest.skip("the names of mutmut's copy are not the modules'", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("ledger", "reporter")
# Alembic's, not ours to shape: shipped migrations are frozen history (never edited), and `env.py`
# is a script Alembic runs, which nothing imports. Neither is held to the rules.
FROZEN = ("ledger/migrations/",)
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


def top_level_names(tree: ast.Module) -> dict[str, ast.stmt]:
    """What a module defines at its top level (also under `if`/`try`): functions, classes and
    assigned names, each with the statement defining it."""
    found: dict[str, ast.stmt] = {}

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found[node.name] = node
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            found.setdefault(name.id, node)
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                    visit(block)

    visit(tree.body)
    return found


def declared_all(relative: str, tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            assert isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None
            try:
                return list(ast.literal_eval(node.value))
            except ValueError:  # computed (the package's lazy names): ask the module
                name = relative.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
                return list(importlib.import_module(name).__all__)
    return None


ROUTE_DECORATORS = frozenset(
    f"{owner}.{method}"
    for owner in ("router", "app")
    for method in ("get", "post", "put", "patch", "delete", "head", "options", "api_route")
)


def named_by_a_framework(node: ast.stmt) -> bool:
    """pytest finds its hooks and the plugin's fixtures by their names, and FastAPI names each
    operation of the OpenAPI document after its route handler (`get_run` is the operation id
    `get_run_v1_runs__run_id__get`): those names are their interface, though nothing imports them."""
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    decorators = [
        decorator.func if isinstance(decorator, ast.Call) else decorator for decorator in node.decorator_list
    ]
    return (
        node.name.startswith("pytest_")
        or any("fixture" in ast.unparse(decorator) for decorator in decorators)
        or any(ast.unparse(decorator) in ROUTE_DECORATORS for decorator in decorators)
    )


def public_by_accident(relative: str, tree: ast.Module) -> list[str]:
    """What is wrong with a module's names: no `__all__`, or a name it defines without `_` that its
    `__all__` does not list (or lists without defining or importing it)."""
    exported = declared_all(relative, tree)
    if exported is None:
        return [f"{relative}: no __all__"]
    defined = top_level_names(tree)
    problems = [
        f"{relative}: {name} is neither in __all__ nor private"
        for name, node in defined.items()
        if not name.startswith("_") and name not in exported and not named_by_a_framework(node)
    ]
    imported = {
        alias.asname or alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    lazy = any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)
    problems += [
        f"{relative}: __all__ lists {name}, which it does not define"
        for name in exported
        if name not in defined and name not in imported and not lazy
    ]
    return problems


def test_every_module_is_private_by_default() -> None:
    problems = [problem for relative, tree in modules() for problem in public_by_accident(relative, tree)]
    assert problems == []


def test_a_public_helper_outside_all_is_caught() -> None:
    source = """
__all__ = ["api", "Thing", "LIMIT", "missing"]

LIMIT = 3
_CACHE: dict[str, int] = {}
helper_limit = 4


class Thing:
    pass


def api() -> None:
    pass


def helper() -> None:
    pass


@pytest.fixture
def some_fixture() -> None:
    pass


def pytest_configure(config: object) -> None:
    pass


@router.get("/runs/{run_id}")
async def get_run(run_id: str) -> None:
    pass


@router_helpers.get("/x")
def not_a_route() -> None:
    pass
"""
    assert public_by_accident("m.py", ast.parse(source)) == [
        "m.py: helper_limit is neither in __all__ nor private",
        "m.py: helper is neither in __all__ nor private",
        "m.py: not_a_route is neither in __all__ nor private",
        "m.py: __all__ lists missing, which it does not define",
    ]
    assert public_by_accident("m.py", ast.parse("def f() -> None:\n    pass\n")) == ["m.py: no __all__"]


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
    assert positional_records(list(modules())) == []


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
