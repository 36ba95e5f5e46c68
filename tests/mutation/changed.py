"""The mutation check of what a change touched: mutate only the functions of the rule modules that
changed since a baseline, and fail while one of their mutants survives as behaviour.

    python -m tests.mutation.changed                    # since the committed baseline
    python -m tests.mutation.changed --since main       # since git's merge base with main
    python -m tests.mutation.changed --list             # only say which functions changed
    python -m tests.mutation.changed --write-baseline   # record the functions as they are now
    python -m tests.mutation.changed --write-baseline --at REV  # ... as they are at REV

A function is known by its module and its qualified name (`split_upload`, `Uploader._refused`) and
compared by a hash of its syntax tree (so comments and formatting are not changes). The baseline,
`tests/mutation/baseline.json`, holds those hashes for every module in `[tool.mutmut] only_mutate`
as the last landed main had them: once a change lands with this check green, writing the baseline
again moves the line. With git history, `--since REF` compares with the merge base of HEAD and REF
instead. A function that is new, or of a module new to the list, counts as changed; one that went
away has nothing left to mutate.

Each changed function's mutants run with `mutmut run <their names>` (mutmut runs only the unit tests
that reach the function), and are then sorted like a full run's (`python -m tests.mutation`):
killed, message-only, listed equivalent, or a survivor, which fails the check.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.mutation.__main__ import ROOT, collect, configured_modules, dotted, report
from tests.mutation.classify import load_equivalents, project_messages

BASELINE = Path(__file__).with_name("baseline.json")
# mutmut's name for a method: x, then the class and the method, each after this separator.
_CLASS_SEPARATOR = "ǁ"


def function_hashes(source: str) -> dict[str, str]:
    """Each function mutmut mutates (a module's functions, its classes' methods) by its qualified
    name, with a hash of its syntax tree."""
    tree = ast.parse(source)
    hashes: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            hashes[node.name] = _hash(node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    hashes[f"{node.name}.{item.name}"] = _hash(item)
    return hashes


def _hash(node: ast.AST) -> str:
    return hashlib.sha256(ast.dump(node, include_attributes=False).encode()).hexdigest()[:16]


def changed_functions(
    before: dict[str, dict[str, str]], after: dict[str, dict[str, str]]
) -> dict[str, list[str]]:
    """Per module, the functions of `after` that are new or differ from `before`."""
    changed: dict[str, list[str]] = {}
    for module, functions in after.items():
        old = before.get(module, {})
        names = sorted(name for name, digest in functions.items() if old.get(name) != digest)
        if names:
            changed[module] = names
    return changed


def mutant_pattern(module: str, function: str) -> str:
    """The mutmut names of a function's mutants, as a pattern `mutmut run` takes."""
    cls, _, name = function.rpartition(".")
    mangled = f"x{_CLASS_SEPARATOR}{cls}{_CLASS_SEPARATOR}{name}" if cls else f"x_{name}"
    return f"{dotted(module)}.{mangled}__mutmut_*"


def hashes_of(read: Callable[[str], str | None], modules: list[str]) -> dict[str, dict[str, str]]:
    hashes = {}
    for module in modules:
        source = read(module)
        if source is not None:
            hashes[module] = function_hashes(source)
    return hashes


def _short(of: str) -> str:
    """A commit's name cut to 12 hex digits; anything else ('the working tree') whole."""
    return of[:12] if all(c in "0123456789abcdef" for c in of) else of


def _working_tree(module: str) -> str | None:
    path = ROOT / module
    return path.read_text("utf-8") if path.exists() else None


def _at_revision(revision: str) -> Callable[[str], str | None]:
    def read(module: str) -> str | None:
        shown = subprocess.run(
            ["git", "show", f"{revision}:{module}"], cwd=ROOT, capture_output=True, text=True
        )
        return shown.stdout if shown.returncode == 0 else None

    return read


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def _names(changed: dict[str, list[str]]) -> Iterator[str]:
    for module, functions in changed.items():
        for function in functions:
            yield f"{module}: {function}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.mutation.changed", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--since", metavar="REF", help="compare with git's merge base of HEAD and REF")
    parser.add_argument("--list", action="store_true", help="list the changed functions, run nothing")
    parser.add_argument("--write-baseline", action="store_true", help=f"write {BASELINE.name} and stop")
    parser.add_argument("--at", metavar="REV", help="with --write-baseline: the functions at REV")
    parser.add_argument("--fresh", action="store_true", help="drop mutants/ first (CI: no stale verdicts)")
    parser.add_argument("--max-children", type=int, default=2, help="mutants tested at once (default 2)")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    modules = configured_modules()
    if args.write_baseline:
        read = _at_revision(args.at) if args.at else _working_tree
        at = _git("rev-parse", args.at) if args.at else "the working tree"
        baseline = {"of": at, "functions": hashes_of(read, modules)}
        BASELINE.write_text(json.dumps(baseline, indent=1, sort_keys=True) + "\n", "utf-8")
        print(f"{BASELINE.relative_to(ROOT)}: the functions of {len(modules)} modules as of {at}")
        return
    if args.since:
        base = _git("merge-base", "HEAD", args.since)
        before = hashes_of(_at_revision(base), modules)
        print(f"changed since {base[:12]} (merge base of HEAD and {args.since})")
    else:
        baseline = json.loads(BASELINE.read_text("utf-8"))
        before = baseline["functions"]
        of = _short(str(baseline["of"]))
        print(f"changed since {BASELINE.relative_to(ROOT)} (the functions as of {of})")
    changed = changed_functions(before, hashes_of(_working_tree, modules))
    for line in _names(changed):
        print(f"  {line}")
    if not changed:
        print("no function of the rule modules changed")
        return
    if args.list:
        return
    if args.fresh:
        # mutmut keeps its map of which test reaches which function in mutants/: tests changed
        # since it was made would be missed.
        shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    env = dict(os.environ)
    # mutmut's own runs of the unit tests are not the suite's run: a test that skips itself in
    # mutmut's copy of the sources (tests/unit/test_names.py) must not fail there as a CI skip.
    env.pop("CI", None)
    env["TMPDIR"] = tempfile.mkdtemp(prefix="mutation-changed-")
    patterns = [
        mutant_pattern(module, function) for module, functions in changed.items() for function in functions
    ]
    log = ROOT / "mutants" / "changed.log"
    log.parent.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "mutmut", "run", f"--max-children={args.max_children}", *patterns]
    with log.open("w") as out:
        code = subprocess.run(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if code != 0:
        if "nothing matches" in log.read_text("utf-8", errors="replace"):
            print("the changed functions have nothing to mutate")
            return
        sys.exit(f"mutmut failed (exit {code}); see {log}")
    equivalents, messages = load_equivalents(), project_messages()
    results = []
    for module, functions in changed.items():
        wanted = frozenset(functions)
        results.append(
            collect(module, equivalents, messages, only=lambda name, w=wanted: qualified(name) in w)
        )
    report(results, verbose_message_only=False)
    sys.exit(1 if any(r.survivors for r in results) else 0)


def qualified(mutant: str) -> str:
    """`Uploader._refused` from `reporter.uploader.xǁUploaderǁ_refused__mutmut_3`."""
    mangled = mutant.rpartition("__mutmut_")[0].rpartition(".")[2]
    if mangled.startswith("x" + _CLASS_SEPARATOR):
        _, cls, name = mangled.split(_CLASS_SEPARATOR)
        return f"{cls}.{name}"
    return mangled.removeprefix("x_")


if __name__ == "__main__":
    main()
