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

# What both sides share: the rules, the errors, the client, the tracing facade (and the package's
# root, through which `from ledger import validate` goes).
CORE = frozenset({"ledger", "ledger.validate", "ledger.errors", "ledger.client", "ledger.tracing"})
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
    allowed = ("ledger/cli/report.py", "ledger/cli/demo/", "ledger/reporting/")
    users = set()
    for path in sorted((REPO / "ledger").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        for module, _, _ in imports(path):
            if module == "reporter" or module.startswith("reporter."):
                users.add(rel)
    assert users and all(rel.startswith(allowed) for rel in users), sorted(users)


# The driver's errors are translated once, where the stores meet the database
# (`ledger.db.driver_errors`); above that, code catches the library's errors. These modules may
# still name the driver's error classes, each for its own reason:
DRIVER_ERROR_MODULES = {
    "ledger/db.py": "the translation itself, and the pool's checks of a connection",
    "ledger/embedded.py": "starts and probes its own server",
    "ledger/migrate.py": "unwraps SQLAlchemy's wrapper for the translation",
    "ledger/runlog/conversion.py": "retries its own lock timeout while dropping the old table",
    "ledger/runlog/partitions.py": "retries its own lock timeout and cancels its own detach past its wait",
    "ledger/testing.py": "administers test servers and databases, beneath any store",
}
DRIVER_ERROR_HOMES = ("psycopg.errors", "sqlalchemy.exc", "psycopg_pool")


def _names_a_driver_error(dotted: str) -> bool:
    if dotted.startswith(DRIVER_ERROR_HOMES):
        return True
    head, _, name = dotted.partition(".")
    return head == "psycopg" and "." not in name and (name.endswith(("Error", "Warning")) or name == "errors")


def driver_error_uses(source: str) -> list[str]:
    """The driver's error classes (or their modules) `source` imports or names."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith(DRIVER_ERROR_HOMES)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [
                f"{node.module}.{alias.name}"
                for alias in node.names
                if _names_a_driver_error(f"{node.module}.{alias.name}")
            ]
        elif isinstance(node, ast.Attribute):
            dotted = ast.unparse(node)
            if _names_a_driver_error(dotted):
                found.append(dotted)
    return found


def test_only_the_stores_boundary_names_the_driver_s_errors() -> None:
    users = {}
    for package in ("ledger", "reporter"):
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith("ledger/migrations/versions/") or rel in DRIVER_ERROR_MODULES:
                continue
            uses = driver_error_uses(path.read_text(encoding="utf-8"))
            if uses:
                users[rel] = sorted(set(uses))
    assert users == {}


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
