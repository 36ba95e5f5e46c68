"""The dependency direction between the packages: `reporter` is a client of the ledger.

`reporter` may import only the ledger's shared core; the core imports nothing else of the ledger
when it loads (what it needs of the rest, it imports inside the function that needs it). The one
way from the reporter to the ledger's stores is the lazy re-export of `DirectTransport`, whose
implementation lives on the side that knows both packages (`ledger.reporting`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import reporter

# What both sides share: the rules, the errors, the client, the tracing facade, the one home of
# time conversion (the standard library only) and the package's root, through which
# `from ledger import validate` goes.
CORE = frozenset(
    {"ledger", "ledger.validate", "ledger.errors", "ledger.client", "ledger.tracing", "ledger.clock"}
)
# The one import of the ledger beyond its core the reporter may hold: (module, imported from, name).
LAZY_REEXPORT = ("reporter/__init__.py", "ledger.reporting.direct", "DirectTransport")

REPO = Path(__file__).resolve().parents[2]


def imports(path: Path, *, top_level_only: bool = False) -> Iterator[tuple[str, tuple[str, ...], ast.AST]]:
    """(module, names, node) of every import in `path`; with `top_level_only`, only those run
    when the module loads (not inside a function, nor under `if TYPE_CHECKING:`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    nodes: list[ast.AST]
    if top_level_only:
        nodes = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        nodes += [n for n in tree.body if isinstance(n, ast.Try) for n in n.body]
    else:
        nodes = list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, (), node
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative imports are not used here"
            names = tuple(alias.name for alias in node.names)
            yield node.module or "", names, node


def ledger_module(module: str, names: tuple[str, ...]) -> list[str]:
    """The ledger modules an import statement reaches (`from ledger import x` reaches `ledger.x`
    when `x` is a module, else `ledger` itself)."""
    if module != "ledger" and not module.startswith("ledger."):
        return []
    if module == "ledger" and names:
        return [f"ledger.{name}" if (REPO / "ledger" / f"{name}.py").exists() else "ledger" for name in names]
    return [module]


def in_core(module: str) -> bool:
    """Whether `module` is one of the core's, or a module of a core package (`ledger.client._sse`)."""
    return module in CORE or any(module.startswith(f"{core}.") for core in CORE - {"ledger"})


def core_files(module: str) -> list[Path]:
    """The source files of a core module: the module's, or every one of a package."""
    path = REPO / module.replace(".", "/")
    return sorted(path.glob("*.py")) if path.is_dir() else [path.with_suffix(".py")]


def test_the_reporter_imports_only_the_ledger_s_core_and_one_lazy_re_export() -> None:
    beyond: list[tuple[str, str, str]] = []
    for path in sorted((REPO / "reporter").rglob("*.py")):
        for module, names, _ in imports(path):
            for reached in ledger_module(module, names):
                if not in_core(reached):
                    for name in names or ("",):
                        beyond.append((path.relative_to(REPO).as_posix(), reached, name))
    # The re-export is imported twice in its module: for the type checker, and on first use.
    assert set(beyond) == {LAZY_REEXPORT}, sorted(set(beyond))
    assert reporter.DirectTransport.__module__ == "ledger.reporting.direct"


def test_the_core_loads_nothing_else_of_the_ledger() -> None:
    for module in sorted(CORE - {"ledger"}):
        for path in core_files(module):
            for imported, names, node in imports(path, top_level_only=True):
                for reached in ledger_module(imported, names):
                    where = f"{path.relative_to(REPO)} line {getattr(node, 'lineno', '?')}"
                    assert in_core(reached), f"{where} imports {reached}"


def test_the_ledger_s_own_modules_import_the_reporter_only_where_both_meet() -> None:
    # `ledger report`, the demo and the direct transport know both packages; nothing else does.
    allowed = ("ledger/cli/report", "ledger/cli/demo/", "ledger/reporting/")
    users = set()
    for path in sorted((REPO / "ledger").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        for module, _, _ in imports(path):
            if module == "reporter" or module.startswith("reporter."):
                users.add(rel)
    assert users and all(rel.startswith(allowed) for rel in users), sorted(users)


# The driver's errors are translated once, where the stores meet the database
# (`ledger.db.driver_errors`); above that, code catches the library's errors. These modules may
# still name (or catch) the driver's error classes, each for its own reason; an entry that names
# none is stale, and fails.
DRIVER_ERROR_MODULES = {
    "ledger/db.py": "the translation itself, and the pool's checks of a connection",
    "ledger/migrate.py": "unwraps SQLAlchemy's wrapper for the translation",
    "ledger/runlog/conversion.py": "retries its own lock timeout while dropping the old table",
    "ledger/runlog/partitions.py": "retries its own lock timeout and cancels its own detach past its wait",
    "ledger/testing.py": "administers test servers and databases, beneath any store",
}
DRIVER_ERROR_HOMES = ("psycopg.errors", "sqlalchemy.exc", "psycopg_pool")
DRIVER_MODULES = ("psycopg", "psycopg_pool", "sqlalchemy")


def _names_a_driver_error(dotted: str) -> bool:
    if dotted.startswith(DRIVER_ERROR_HOMES):
        return True
    head, _, name = dotted.partition(".")
    return head == "psycopg" and "." not in name and (name.endswith(("Error", "Warning")) or name == "errors")


def _is_driver(dotted: str) -> bool:
    return dotted.split(".", 1)[0] in DRIVER_MODULES


class _Bindings:
    """What the names of one module stand for, as far as the driver goes: `import psycopg as pg`
    binds `pg` to `psycopg`, `from psycopg import errors as e` binds `e` to `psycopg.errors`,
    `Lost = psycopg.OperationalError` binds `Lost`, `FAULTS = (psycopg.OperationalError, X)`
    binds `FAULTS` to both; `from ledger.db import FAULTS` binds what `exported` says that module's
    `FAULTS` stands for."""

    def __init__(self, exported: dict[str, dict[str, tuple[str, ...]]]) -> None:
        self.exported = exported
        self.names: dict[str, tuple[str, ...]] = {}

    def resolve(self, node: ast.AST) -> tuple[str, ...]:
        """The dotted driver names an expression stands for (none: nothing of the driver's)."""
        if isinstance(node, ast.Name):
            return self.names.get(node.id, ())
        if isinstance(node, ast.Attribute):
            return tuple(f"{base}.{node.attr}" for base in self.resolve(node.value))
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return tuple(dotted for element in node.elts for dotted in self.resolve(element))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # `A | B` in isinstance
            return self.resolve(node.left) + self.resolve(node.right)
        if isinstance(node, ast.Starred):
            return self.resolve(node.value)
        return ()

    def bind(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_driver(alias.name):
                    # `import a.b` binds `a`; `import a.b as c` binds `c` to `a.b`.
                    local = alias.asname or alias.name.split(".", 1)[0]
                    self.names[local] = (alias.name if alias.asname else local,)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                local = alias.asname or alias.name
                if _is_driver(node.module):
                    self.names[local] = (f"{node.module}.{alias.name}",)
                elif alias.name in self.exported.get(node.module, {}):
                    self.names[local] = self.exported[node.module][alias.name]
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            resolved = self.resolve(node.value)
            for target in targets:
                if isinstance(target, ast.Name) and resolved:
                    self.names[target.id] = resolved


def _bindings(tree: ast.Module, exported: dict[str, dict[str, tuple[str, ...]]]) -> _Bindings:
    # In source order over the whole module (a function's local import or alias counts too).
    bindings = _Bindings(exported)
    for node in sorted(
        (
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Import | ast.ImportFrom | ast.Assign | ast.AnnAssign)
        ),
        key=lambda n: (n.lineno, n.col_offset),
    ):
        bindings.bind(node)
    return bindings


def driver_error_exports(source: str) -> dict[str, tuple[str, ...]]:
    """The module-level names of `source` that stand for driver errors (`X = psycopg.OperationalError`,
    a tuple holding one, an imported driver error): what another module gets by importing them."""
    tree = ast.parse(source)
    bindings = _bindings(tree, {})
    return {
        name: errors
        for name, resolved in bindings.names.items()
        if (errors := tuple(dotted for dotted in resolved if _names_a_driver_error(dotted)))
    }


def driver_error_uses(
    source: str, exported: dict[str, dict[str, tuple[str, ...]]] | None = None
) -> list[str]:
    """The driver's error classes (or their modules) `source` imports, names or catches, through
    any alias: its own (`import psycopg as pg`, `Lost = psycopg.OperationalError`, a tuple of
    them) and, with `exported` (module -> `driver_error_exports`), one imported from another
    module of the ledger."""
    tree = ast.parse(source)
    bindings = _bindings(tree, exported or {})
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith(DRIVER_ERROR_HOMES)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if _names_a_driver_error(f"{node.module}.{alias.name}"):
                    found.append(f"{node.module}.{alias.name}")
                else:
                    found += list((exported or {}).get(node.module, {}).get(alias.name, ()))
        elif isinstance(node, ast.ExceptHandler) and node.type is not None:
            found += [dotted for dotted in bindings.resolve(node.type) if _names_a_driver_error(dotted)]
        elif isinstance(node, ast.Attribute | ast.Name) and isinstance(node.ctx, ast.Load):
            found += [dotted for dotted in bindings.resolve(node) if _names_a_driver_error(dotted)]
    return list(dict.fromkeys(found))


def _module_name(rel: str) -> str:
    return rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _sources() -> dict[str, str]:
    return {
        path.relative_to(REPO).as_posix(): path.read_text(encoding="utf-8")
        for package in ("ledger", "reporter")
        for path in sorted((REPO / package).rglob("*.py"))
        if not path.relative_to(REPO).as_posix().startswith("ledger/migrations/versions/")
    }


def test_only_the_stores_boundary_names_or_catches_the_driver_s_errors() -> None:
    sources = _sources()
    exported = {_module_name(rel): driver_error_exports(source) for rel, source in sources.items()}
    users = {}
    for rel, source in sources.items():
        uses = driver_error_uses(source, exported)
        if uses:
            users[rel] = sorted(set(uses))
    beyond = {rel: uses for rel, uses in users.items() if rel not in DRIVER_ERROR_MODULES}
    assert beyond == {}
    stale = sorted(set(DRIVER_ERROR_MODULES) - set(users))
    assert stale == [], "allowed to name the driver's errors, but names none: remove the entry"


def test_a_driver_error_named_above_the_stores_is_caught() -> None:
    assert driver_error_uses(
        "import psycopg\ntry:\n    pass\nexcept psycopg.OperationalError:\n    pass\n"
    ) == ["psycopg.OperationalError"]
    assert driver_error_uses("import sqlalchemy.exc\n") == ["sqlalchemy.exc"]
    assert driver_error_uses("from psycopg import errors\n") == ["psycopg.errors"]
    assert driver_error_uses("from psycopg.errors import LockNotAvailable\n") == [
        "psycopg.errors.LockNotAvailable"
    ]
    assert driver_error_uses("from sqlalchemy.exc import DBAPIError\n") == ["sqlalchemy.exc.DBAPIError"]
    # The driver's connections and SQL composition are not its errors.
    assert driver_error_uses("import psycopg\nfrom psycopg import sql\nc: psycopg.AsyncConnection\n") == []


CATCH = "try:\n    pass\nexcept {}:\n    pass\n"


def test_a_driver_error_caught_through_an_alias_is_caught() -> None:
    # A module alias, a class alias, an alias of an alias, a tuple of them.
    assert "psycopg.OperationalError" in driver_error_uses(
        "import psycopg as pg\n" + CATCH.format("pg.OperationalError")
    )
    assert "psycopg.OperationalError" in driver_error_uses(
        "from psycopg import OperationalError as Lost\n" + CATCH.format("Lost")
    )
    assert "psycopg.errors.LockNotAvailable" in driver_error_uses(
        "from psycopg import errors as e\n" + CATCH.format("e.LockNotAvailable")
    )
    aliased = "import psycopg\nLost = psycopg.OperationalError\nFAULTS = (Lost, ValueError)\n"
    assert "psycopg.OperationalError" in driver_error_uses(aliased + CATCH.format("FAULTS"))
    assert "psycopg.OperationalError" in driver_error_uses(aliased + CATCH.format("(KeyError, *FAULTS)"))
    # Imported from another module of the ledger, which holds the driver's class under its own name.
    exported = {"ledger.db": driver_error_exports(aliased)}
    assert exported["ledger.db"]["FAULTS"] == ("psycopg.OperationalError",)
    catcher = "from ledger.db import FAULTS as F\n" + CATCH.format("F")
    assert "psycopg.OperationalError" in driver_error_uses(catcher, exported)
    # The ledger's own errors under the same spelling are no use of the driver's.
    assert (
        driver_error_uses("from ledger.db import FAULTS\n" + CATCH.format("FAULTS"), {"ledger.db": {}}) == []
    )
    assert driver_error_uses("import pg_like as pg\n" + CATCH.format("pg.OperationalError")) == []
