"""The package root's lazy names: one literal table, which `__all__`, `dir()`, the type checker's
imports and `from ledger import X` all agree with, and which needs no source file to read."""

from __future__ import annotations

import ast
import compileall
import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import ledger

ROOT = Path(ledger.__file__)


def _root_syntax() -> ast.Module:
    return ast.parse(ROOT.read_text(encoding="utf-8"))


def lazy_table() -> dict[str, str]:
    """The literal `{name: module}` table of the package root, read from its source."""
    for node in _root_syntax().body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "_HOMES" for t in targets) and node.value is not None:
                table = ast.literal_eval(node.value)
                assert isinstance(table, dict)
                return table
    raise AssertionError("ledger/__init__.py holds no `_HOMES` table")


def type_checking_imports() -> dict[str, str]:
    """`{name: module}` of the imports under `if TYPE_CHECKING:` (what the type checker sees)."""
    found: dict[str, str] = {}
    for node in _root_syntax().body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module is not None, ast.unparse(stmt)
                for alias in stmt.names:
                    # `X as X`: the form a type checker takes as a re-export.
                    assert alias.asname == alias.name, ast.unparse(stmt)
                    found[alias.name] = stmt.module
    return found


def test_every_lazy_name_resolves_to_its_home() -> None:
    table = lazy_table()
    assert table
    for name, home in table.items():
        assert getattr(ledger, name) is getattr(importlib.import_module(home), name), name


def test_the_table_all_dir_and_the_type_checker_agree() -> None:
    table = lazy_table()
    assert sorted(ledger.__all__) == ledger.__all__
    assert set(ledger.__all__) == {*table, "__version__"}
    assert len(ledger.__all__) == len(set(ledger.__all__))
    assert type_checking_imports() == table
    assert set(ledger.__all__) <= set(dir(ledger))


def test_star_import_gives_every_public_name() -> None:
    namespace: dict[str, object] = {}
    exec("from ledger import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(ledger.__all__)


def test_the_root_imports_without_its_source(tmp_path: Path) -> None:
    # An install may ship bytecode alone (a frozen app, a zipped or stripped tree): the root must
    # not read its own source to learn its names.
    package = tmp_path / "ledger"
    shutil.copytree(ROOT.parent, package, ignore=shutil.ignore_patterns("__pycache__", "migrations", "sql"))
    assert compileall.compile_dir(package, legacy=True, quiet=1)
    for source in package.rglob("*.py"):
        source.unlink()
    probe = (
        "import ledger, ledger.errors; "
        "assert ledger.__file__.endswith('.pyc'), ledger.__file__; "
        "from ledger import InvalidInput, LedgerFailure; "
        "assert InvalidInput is ledger.errors.InvalidInput and issubclass(InvalidInput, LedgerFailure); "
        "print(len(ledger.__all__))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(len(ledger.__all__))
