"""Sorting surviving mutants: the ones that only reword an error message, and the ones listed as
equivalent (no input tells them apart from the original), so a run reports only what needs a test.

Message-only is decided by data flow, from the code: a changed value is message text when it flows
only into the message of an exception (into the builtin exception's text, or an attribute of it
that no code of the project reads) or into the arguments of a logging call, directly or through
local variables that go nowhere else. Names never decide: `problem = junk_reason(event)` followed
by `if problem is not None:` is behaviour, and so is an exception argument the class keeps in an
attribute the service reads (`StaleAttempt(run_id, attempt, current)`: `current` reaches the 409
body).

Pure functions over source text, so they are unit-tested without mutmut installed.
"""

from __future__ import annotations

import ast
import builtins
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

EQUIVALENT_FILE = Path(__file__).with_name("equivalent.toml")
ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ledger", "reporter")

_LOG_METHODS = frozenset({"debug", "info", "warning", "error", "exception", "critical", "log"})
_BUILTIN_EXCEPTIONS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)


@dataclass(frozen=True)
class Equivalent:
    """A mutant no input tells apart, known by its module, function and the lines it changes (not by
    mutmut's number, which shifts whenever the function is edited)."""

    module: str
    function: str
    before: str
    after: str
    reason: str
    # How many mutants the entry stands for: the same change on identical lines of one function
    # is one entry only when it says so, so no entry silently covers a line it does not name.
    matches: int = 1


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


def misfits(
    equivalents: Sequence[Equivalent], matched: Mapping[int, int], modules: Iterable[str]
) -> list[str]:
    """What is wrong with the entries of `modules` after a run of those modules whole: an entry that
    matches no survivor (the code changed, or a test now kills it), or more survivors than it says.
    `matched` counts the survivors each entry matched, by the entry's index."""
    wanted = set(modules)
    problems = []
    for index, entry in enumerate(equivalents):
        if entry.module not in wanted:
            continue
        found = matched.get(index, 0)
        if found != entry.matches:
            problems.append(
                f"{entry.module} {entry.function}: {entry.before!r} -> {entry.after!r} matches {found}"
                f" survivor(s), not {entry.matches}"
            )
    return problems


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


@dataclass(frozen=True)
class ExceptionClass:
    """How an exception class's constructor uses its arguments: `params` in positional order (all
    of them when `varargs`), and which of them only make up its message."""

    params: tuple[str, ...]
    message: frozenset[str]
    varargs: bool = False


_ALL_MESSAGE = ExceptionClass((), frozenset(), varargs=True)  # a builtin exception: its args are its text


@dataclass(frozen=True)
class Messages:
    """Where message text goes in the code under test: its exception classes (by name) and the
    names bound to a logger (`_log = logging.getLogger(...)`)."""

    exceptions: Mapping[str, ExceptionClass] = field(default_factory=dict)
    loggers: frozenset[str] = frozenset({"logging"})

    def exception(self, name: str) -> ExceptionClass | None:
        if name in self.exceptions:
            return self.exceptions[name]
        return _ALL_MESSAGE if name in _BUILTIN_EXCEPTIONS else None


def project_messages(root: Path = ROOT) -> Messages:
    """`messages_of` the project's packages."""
    files = sorted(path for package in PACKAGES for path in (root / package).rglob("*.py"))
    return messages_of(path.read_text("utf-8") for path in files)


def messages_of(sources: Iterable[str]) -> Messages:
    """The exception classes and loggers the sources define, each exception's constructor read for
    which arguments reach only its message: passed on to the base class's message, or kept in an
    attribute no source reads (or one holding exactly the builtin exception's text)."""
    trees = [ast.parse(source) for source in sources]
    classes: dict[str, ast.ClassDef] = {}
    functions: dict[str, ast.FunctionDef] = {}
    read: set[str] = set()
    loggers = {"logging"}
    for tree in trees:
        functions.update((s.name, s) for s in tree.body if isinstance(s, ast.FunctionDef))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = node
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                read.add(node.attr)
            elif isinstance(node, ast.Call) and _called(node.func) == "getattr" and len(node.args) >= 2:
                name = node.args[1]
                if isinstance(name, ast.Constant) and isinstance(name.value, str):
                    read.add(name.value)
        loggers.update(
            target.id
            for statement in tree.body
            if isinstance(statement, ast.Assign)
            and isinstance(statement.value, ast.Call)
            and _called(statement.value.func) == "getLogger"
            for target in statement.targets
            if isinstance(target, ast.Name)
        )
    known: dict[str, ExceptionClass | None] = {}

    def resolve(name: str, seen: frozenset[str] = frozenset()) -> ExceptionClass | None:
        if name in _BUILTIN_EXCEPTIONS:
            return _ALL_MESSAGE
        if name not in classes or name in seen:
            return None
        if name not in known:
            known[name] = _exception_class(classes[name], read, lambda base: resolve(base, seen | {name}))
        return known[name]

    exceptions = {name: info for name in classes if (info := resolve(name)) is not None}
    for name, function in functions.items():
        if name not in exceptions and (factory := _exception_factory(function, exceptions)) is not None:
            exceptions[name] = factory
    return Messages(exceptions, frozenset(loggers))


def _exception_factory(
    function: ast.FunctionDef, exceptions: Mapping[str, ExceptionClass]
) -> ExceptionClass | None:
    """A function that only builds an exception (`def bad_request(message): return
    BadStreamRequest(message)`) passes its arguments on as the exception's: message text where they
    reach only the exception's message arguments."""
    body = [
        s
        for s in function.body
        if not (
            isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)
        )
    ]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.Call):
        return None
    call = body[0].value
    built = _called(call.func)
    info = exceptions.get(built) or (_ALL_MESSAGE if built in _BUILTIN_EXCEPTIONS else None)
    if info is None or function.args.vararg is not None or function.args.kwarg is not None:
        return None
    to_call: dict[int, bool] = {
        id(arg): _argument_is_message(info, i, None) for i, arg in enumerate(call.args)
    }
    to_call.update(
        {id(k.value): k.arg is not None and _argument_is_message(info, None, k.arg) for k in call.keywords}
    )
    params = tuple(a.arg for a in [*function.args.posonlyargs, *function.args.args])
    names = {*params, *(a.arg for a in function.args.kwonlyargs)}
    message = frozenset(
        name
        for name in names
        if all(_use_is_message(use, chain, to_call, set(), set()) for use, chain in _loads(function, name))
    )
    return ExceptionClass(params, message)


def _exception_class(
    node: ast.ClassDef, read: set[str], resolve: Callable[[str], ExceptionClass | None]
) -> ExceptionClass | None:
    bases = [base for b in node.bases if (base := resolve(_called(b))) is not None]
    if not bases:
        return None
    init = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
    if init is None:
        return bases[0]
    base = bases[0]
    params = tuple(a.arg for a in [*init.args.posonlyargs, *init.args.args][1:])
    names = {*params, *(a.arg for a in init.args.kwonlyargs)}
    if init.args.vararg is not None or init.args.kwarg is not None:
        return ExceptionClass(params, frozenset(), varargs=True)
    # What goes to the base's message: the arguments of `super().__init__(...)` at its message params.
    to_base: dict[int, bool] = {}  # id of an argument expression -> whether the base takes it as text
    whole: set[str] = set()  # params passed on as they are, as the builtin exception's text
    for call in ast.walk(init):
        if isinstance(call, ast.Call) and _is_super_init(call):
            for index, arg in enumerate(call.args):
                text = _argument_is_message(base, index, None)
                to_base[id(arg)] = text
                if text and isinstance(arg, ast.Name) and base is _ALL_MESSAGE:
                    whole.add(arg.id)
            for keyword in call.keywords:
                to_base[id(keyword.value)] = keyword.arg is not None and _argument_is_message(
                    base, None, keyword.arg
                )
    message = set()
    for name in names:
        if all(_use_is_message(use, chain, to_base, read, whole) for use, chain in _loads(init, name)):
            message.add(name)
    return ExceptionClass(params, frozenset(message))


def _is_super_init(call: ast.Call) -> bool:
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "__init__"
        and isinstance(func.value, ast.Call)
        and _called(func.value.func) == "super"
    )


def _use_is_message(
    use: ast.Name, chain: tuple[ast.AST, ...], to_base: dict[int, bool], read: set[str], whole: set[str]
) -> bool:
    for node in reversed((*chain, use)):
        if id(node) in to_base:
            return to_base[id(node)]
        if isinstance(node, ast.Assign):
            # `self.attr = param`: message text when no code reads the attribute, or when it holds
            # exactly the builtin exception's text (what `str(exc)` says).
            targets = node.targets
            return node.value is use and all(
                isinstance(t, ast.Attribute) and (t.attr not in read or use.id in whole) for t in targets
            )
        if isinstance(node, ast.stmt):
            return False
    return False


def _argument_is_message(info: ExceptionClass, index: int | None, keyword: str | None) -> bool:
    if info is _ALL_MESSAGE:
        return keyword is None
    if keyword is not None:
        return keyword in info.message
    assert index is not None
    if index >= len(info.params):
        return False
    return info.params[index] in info.message


def _loads(tree: ast.AST, name: str) -> Iterator[tuple[ast.Name, tuple[ast.AST, ...]]]:
    """Each read of `name` in `tree`, with the nodes above it."""

    def walk(node: ast.AST, chain: tuple[ast.AST, ...]) -> Iterator[tuple[ast.Name, tuple[ast.AST, ...]]]:
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            yield node, chain
        for child in ast.iter_child_nodes(node):
            yield from walk(child, (*chain, node))

    yield from walk(tree, ())


def _called(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def is_message_only(original: str, mutant: str, messages: Messages) -> bool:
    """True when every value the mutant changes flows only into message text: an argument an
    exception class only makes its message of, an argument of a logging call, or a local variable
    read only in such places (see the module docstring)."""
    try:
        old = ast.parse(_dedent(original))
        new = ast.parse(_dedent(mutant))
    except SyntaxError:
        return False
    differences = list(_differences(old, new, ()))
    flow = _Flow(old, messages)
    return bool(differences) and all(flow.is_message(a, ancestors) for a, _, ancestors in differences)


def _dedent(source: str) -> str:
    lines = source.splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines)


def _differences(
    a: object, b: object, ancestors: tuple[ast.AST, ...]
) -> Iterator[tuple[object, object, tuple[ast.AST, ...]]]:
    """The outermost nodes where two trees differ, each with the nodes above it."""
    if isinstance(a, ast.AST) and isinstance(b, ast.AST):
        if type(a) is not type(b):
            yield a, b, ancestors
            return
        below = (*ancestors, a)
        for name in a._fields:
            x, y = getattr(a, name, None), getattr(b, name, None)
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


@dataclass
class _Flow:
    """Where values go in one function (the original's tree)."""

    tree: ast.Module
    messages: Messages
    _deciding: set[str] = field(default_factory=set)

    def is_message(self, node: object, ancestors: tuple[ast.AST, ...]) -> bool:
        # A logging call whose argument list changed (an argument dropped) still only logs.
        if isinstance(node, ast.Call) and self._is_logging(node):
            return True
        below: object = node
        for parent in reversed(ancestors):
            if isinstance(parent, ast.Call) and below is not parent.func:
                if self._is_logging(parent):
                    return True
                info = self.messages.exception(_called(parent.func))
                if info is not None:
                    return self._is_message_argument(parent, info, below, node)
            elif isinstance(parent, ast.Assign | ast.AnnAssign | ast.AugAssign):
                return below is parent.value and self._variable_is_message(parent)
            if isinstance(parent, ast.stmt):
                return False
            below = parent
        return False

    def _is_message_argument(self, call: ast.Call, info: ExceptionClass, below: object, node: object) -> bool:
        if below in call.args:
            index = call.args.index(below)  # type: ignore[arg-type]
            starred = any(isinstance(arg, ast.Starred) for arg in call.args[: index + 1])
            return not starred and _argument_is_message(info, index, None)
        keyword = next((k for k in call.keywords if k is below), None)
        # The keyword's name itself changed: another parameter, or none (a TypeError).
        return keyword is not None and keyword is not node and _argument_is_message(info, None, keyword.arg)

    def _variable_is_message(self, statement: ast.Assign | ast.AnnAssign | ast.AugAssign) -> bool:
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        if len(targets) != 1 or not isinstance(targets[0], ast.Name):
            return False
        name = targets[0].id
        if name in self._deciding:
            return True  # a loop through assignments adds no use of its own
        self._deciding.add(name)
        try:
            uses = list(_loads(self.tree, name))
            return all(self.is_message(use, chain) for use, chain in uses)
        finally:
            self._deciding.discard(name)

    def _is_logging(self, call: ast.Call) -> bool:
        func = call.func
        return (
            isinstance(func, ast.Attribute)
            and func.attr in _LOG_METHODS
            and isinstance(func.value, ast.Name)
            and func.value.id in self.messages.loggers
        )
