"""Sorting surviving mutants: the ones that only reword an error message, and the ones listed as
equivalent (no input tells them apart from the original), so a run reports only what needs a test.

Pure functions over source text, so they are unit-tested without mutmut installed.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

EQUIVALENT_FILE = Path(__file__).with_name("equivalent.toml")

# Names a message is assigned to before it is raised (`problem = "…"; raise InvalidInput(field, problem)`).
# (Not `message`: a node's progress message is data the ledger shows, not an error's text.)
_MESSAGE_NAMES = frozenset({"problem", "detail", "expected"})
_LOG_METHODS = frozenset({"debug", "info", "warning", "error", "exception", "critical"})
# A module's logger, public or private (`_log`: modules list what they export in `__all__`).
_LOGGERS = frozenset({"log", "logger", "_log", "_logger", "logging"})


@dataclass(frozen=True)
class Equivalent:
    """A mutant no input tells apart, known by its module, function and the lines it changes (not by
    mutmut's number, which shifts whenever the function is edited)."""

    module: str
    function: str
    before: str
    after: str
    reason: str


def changed_lines(original: str, mutant: str) -> tuple[str, str]:
    """The lines a mutant changes, stripped and joined: what an `Equivalent` entry records."""
    old = [line.strip() for line in original.splitlines()]
    new = [line.strip() for line in mutant.splitlines()]
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    return "\n".join(old[start : len(old) - end]), "\n".join(new[start : len(new) - end])


def load_equivalents(path: Path = EQUIVALENT_FILE) -> list[Equivalent]:
    data = tomllib.loads(path.read_text("utf-8")) if path.exists() else {}
    return [Equivalent(**entry) for entry in data.get("equivalent", [])]


def find_equivalent(
    equivalents: Sequence[Equivalent], module: str, function: str, original: str, mutant: str
) -> Equivalent | None:
    before, after = changed_lines(original, mutant)
    for entry in equivalents:
        if (entry.module, entry.function, entry.before.strip(), entry.after.strip()) == (
            module,
            function,
            before,
            after,
        ):
            return entry
    return None


def is_message_only(original: str, mutant: str) -> bool:
    """True when the mutant changes nothing but the text of an error or a log line: a string literal
    inside a `raise`, the value of a variable that only holds message text (`problem`, `detail`,
    `expected`, …), or any argument of an exception being built (`…Error(…)`) or of a logging call
    (`log.warning(…)`)."""
    try:
        old = ast.parse(_dedent(original))
        new = ast.parse(_dedent(mutant))
    except SyntaxError:
        return False
    differences = list(_differences(old, new, ()))
    return bool(differences) and all(_in_message(a, b, ancestors) for a, b, ancestors in differences)


def _dedent(source: str) -> str:
    lines = source.splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines)


def _is_str(node: object) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _differences(
    a: object, b: object, ancestors: tuple[ast.AST, ...]
) -> Iterator[tuple[object, object, tuple[ast.AST, ...]]]:
    """The outermost nodes where two trees differ, each with the nodes above it."""
    if isinstance(a, ast.AST) and isinstance(b, ast.AST):
        if type(a) is not type(b):
            yield a, b, ancestors
            return
        below = (*ancestors, a)
        for field in a._fields:
            x, y = getattr(a, field, None), getattr(b, field, None)
            if isinstance(x, list) and isinstance(y, list):
                if len(x) != len(y):
                    yield a, b, ancestors
                    return
                for p, q in zip(x, y, strict=True):
                    yield from _differences(p, q, below)
            elif isinstance(x, ast.AST) or isinstance(y, ast.AST):
                yield from _differences(x, y, below)
            elif x != y or type(x) is not type(y):
                yield a, b, ancestors
                return
    elif a != b or type(a) is not type(b):
        yield a, b, ancestors


def _in_message(a: object, b: object, ancestors: tuple[ast.AST, ...]) -> bool:
    strings = _is_str(a) and _is_str(b)
    for depth in range(len(ancestors) - 1, -1, -1):
        node = ancestors[depth]
        if isinstance(node, ast.Call) and (_names_an_exception(node.func) or _is_logging(node.func)):
            # An argument (not the callee) differs: only what the error or log line says changes.
            below = ancestors[depth + 1] if depth + 1 < len(ancestors) else a
            return below is not node.func
        if strings and isinstance(node, ast.Raise):
            return True
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            return any(isinstance(t, ast.Name) and t.id in _MESSAGE_NAMES for t in targets)
        if isinstance(node, ast.stmt):
            return False
    return False


def _is_logging(func: ast.expr) -> bool:
    return (
        isinstance(func, ast.Attribute)
        and func.attr in _LOG_METHODS
        and isinstance(func.value, ast.Name)
        and func.value.id in _LOGGERS
    )


def _names_an_exception(func: ast.expr) -> bool:
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name.endswith(("Error", "Exception", "Expired", "InvalidInput", "StaleAttempt"))
