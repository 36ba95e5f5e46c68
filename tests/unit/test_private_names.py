"""Private means private: a name that starts with `_` is used only in the module that defines it.

A leading underscore promises that the name can change with a look at one file. A module that
imports another's `_name` (`from m import _name`), or reaches it through the module
(`m._name`), breaks that promise where no one looks: the change passes its own module's tests and
breaks a caller elsewhere. When another module needs a name, the name is public (in its module's
`__all__`) and says so.

A private *module* (`ledger/_tracing_sdk.py`) is its package's: any module of the package imports
it, and so do the tests, which test it as they test any other module (its public names are the
package's internal interface). Our own modules only: another project's underscores (`os._exit`) are
that project's documentation to read.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("ledger", "reporter", "bench", "tests")
OURS = frozenset(SCANNED)
# Alembic's history is frozen, never edited.
FROZEN = ("ledger/migrations/",)
# Uses of a private name that other hands are moving as they rework these modules: each entry is
# (module that uses it, the name as written), and goes when the name turns public or the use goes.
ALLOWED: set[tuple[str, str]] = set()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_file(dotted: str, importer: Path) -> Path | None:
    """The file of our module `dotted`, or None when it is not ours (the bench's scripts import
    their neighbours by their bare names)."""
    parts = dotted.split(".")
    roots = (
        [REPO] if parts[0] in OURS else [importer.parent] if importer.is_relative_to(REPO / "bench") else []
    )
    for root in roots:
        base = root.joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _owner(module_file: Path) -> Path:
    """The directory whose modules may use a private module: its package."""
    return module_file.parent.parent if module_file.name == "__init__.py" else module_file.parent


def private_uses(path: Path, source: str | None = None) -> Iterator[tuple[int, str]]:
    """(line, `module.name`) of each private name `path` takes from another module of ours."""
    tree = ast.parse(path.read_text(encoding="utf-8") if source is None else source)
    relative = path.relative_to(REPO)
    is_test = relative.parts[0] == "tests"
    modules: dict[str, str] = {}  # local name -> our module it is bound to

    def private_module(dotted: str) -> bool:
        """Whether `dotted` passes through a private module this file may not import."""
        parts = dotted.split(".")
        for i, part in enumerate(parts):
            if _private(part):
                found = _module_file(".".join(parts[: i + 1]), path)
                if found is None:
                    return False
                return not is_test and not path.resolve().is_relative_to(_owner(found).resolve())
        return False

    reached: list[ast.Attribute] = []  # `x._y`, read once the imports say what `x` is
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if _private(node.attr):
                reached.append(node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _module_file(alias.name, path) is None:
                    continue
                if private_module(alias.name):
                    yield node.lineno, alias.name
                if alias.asname:
                    modules[alias.asname] = alias.name
                else:
                    modules[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and _module_file(node.module, path) is not None:
            if private_module(node.module):
                yield node.lineno, node.module
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                is_module = _module_file(dotted, path) is not None
                if _private(alias.name) and (not is_module or private_module(dotted)):
                    yield node.lineno, dotted
                if is_module:
                    modules[alias.asname or alias.name] = dotted
    for node in reached:
        chain = [node.attr]
        base = node.value
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name) and base.id in modules:
            dotted = ".".join([modules[base.id], *reversed(chain)])
            owner = dotted.rsplit(".", 1)[0]
            if _module_file(owner, path) is not None and (
                _module_file(dotted, path) is None or private_module(dotted)
            ):
                yield node.lineno, dotted


@functools.cache
def tree_uses() -> frozenset[tuple[str, int, str]]:
    """(module, line, name) of every private use in the scanned tree, read once per session."""
    found: set[tuple[str, int, str]] = set()
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            if not relative.startswith(FROZEN):
                found.update((relative, line, name) for line, name in private_uses(path))
    return frozenset(found)


def test_the_scan_finds_each_way_of_reaching_in() -> None:
    here = REPO / "tests" / "unit" / "probe.py"
    inside = REPO / "ledger" / "probe.py"

    def uses(source: str, path: Path = here) -> list[str]:
        return [name for _, name in private_uses(path, source)]

    assert uses("from ledger.client import _TailState") == ["ledger.client._TailState"]
    assert uses("from ledger import sql\nsql._SHIPPED") == ["ledger.sql._SHIPPED"]
    assert uses("import ledger.sql\nledger.sql._SHIPPED") == ["ledger.sql._SHIPPED"]
    assert uses("import ledger.sql as s\ns._SHIPPED['x']") == ["ledger.sql._SHIPPED"]
    assert uses("from ledger.pool import store\nstore._instance_key('x')") == [
        "ledger.pool.store._instance_key"
    ]
    # A private module is its package's, and the tests'; not another package's.
    assert uses("from ledger import _tracing_sdk", inside) == []
    assert uses("from ledger import _tracing_sdk") == []
    assert uses("from ledger import _tracing_sdk", REPO / "reporter" / "probe.py") == ["ledger._tracing_sdk"]
    assert uses("import ledger._tracing_sdk", REPO / "bench" / "probe.py") == ["ledger._tracing_sdk"]
    # Public names, dunders, a module's own privates, and other projects' underscores pass.
    assert uses("from ledger.sql import SHIPPED\nimport ledger\nledger.__version__\n_x = 1\n_x") == []
    assert uses("import os\nos._exit(0)\nfrom typing import _SpecialForm") == []


def test_no_module_takes_another_modules_private_name() -> None:
    found = sorted(
        f"{module}:{line}: {name}" for module, line, name in tree_uses() if (module, name) not in ALLOWED
    )
    assert found == [], "make the name public (in its module's `__all__`) or keep it in its module"


def test_the_allowed_uses_are_still_there() -> None:
    # An entry no longer needed is removed: the list only shrinks.
    present = {(module, name) for module, _, name in tree_uses()}
    assert sorted(ALLOWED - present) == []
