"""Run mutmut on the pure rules, one module at a time, and report what the unit tests let through.

    python -m tests.mutation                        # every module in [tool.mutmut] only_mutate
    python -m tests.mutation reporter/reconcile.py  # one module (a path or a dotted name)
    python -m tests.mutation --report               # only report the results of the last runs
    python -m tests.mutation --report --stubs       # equivalent.toml entries for the survivors

For each module: the raw score (killed ÷ mutants) and the project's score (killed ÷ (killed +
survived), message-only and listed-equivalent mutants left out), then each surviving mutant as a
diff. A mutant whose change reaches only an error's or a log line's text (by data flow) is counted
apart; one listed in tests/mutation/equivalent.toml is not shown again. Exits 1 while a survivor is
left, or while an entry of equivalent.toml matches no survivor of its module, or more than it says.
Needs the `mutation` extra (`pip install -e '.[mutation]'`) and runs from the repository root;
results stay in mutants/ (see docs/testing.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from difflib import unified_diff
from pathlib import Path

from tests.mutation.classify import (
    EQUIVALENT_FILE,
    Equivalent,
    Messages,
    changed_lines,
    find_equivalent,
    is_message_only,
    load_equivalents,
    misfits,
    project_messages,
)

ROOT = Path(__file__).resolve().parents[2]
# mutmut's verdicts (mutmut.stats.status_by_exit_code): these count as killed; "survived" is a
# survivor; anything else (no test reaches the function, not checked, skipped) is reported untested.
KILLED = {"killed", "timeout", "segfault", "caught by type check"}


@dataclass
class Survivor:
    name: str
    line: int
    diff: str
    function: str = ""
    before: str = ""
    after: str = ""
    equivalent: Equivalent | None = None


@dataclass
class ModuleResult:
    path: str
    killed: int = 0
    untested: int = 0
    survivors: list[Survivor] = field(default_factory=list)
    message_only: list[Survivor] = field(default_factory=list)
    equivalent: list[Survivor] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.killed + len(self.survivors) + len(self.message_only) + len(self.equivalent)

    @property
    def score(self) -> float:
        """The project's score: message-only and listed-equivalent survivors left out."""
        counted = self.killed + len(self.survivors)
        return 100.0 * self.killed / counted if counted else 100.0

    @property
    def raw_score(self) -> float:
        """Killed of all mutants: every survivor counts, message-only and equivalent too."""
        return 100.0 * self.killed / self.total if self.total else 100.0


def configured_modules() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    return list(config["tool"]["mutmut"]["only_mutate"])


def dotted(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def run_mutmut(path: str, max_children: int, tmpdir: Path) -> None:
    env = dict(os.environ)
    # mutmut's runs of the unit tests are not the suite's run: a test that skips itself in mutmut's
    # copy of the sources (tests/unit/test_names.py) must not fail there as a skip under CI.
    env.pop("CI", None)
    # pytest's temporary directories go under a directory of this run's own: its workers run at once,
    # so one shared --basetemp would be emptied by each under the others.
    tmpdir.mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(tmpdir)
    log = ROOT / "mutants" / f"{dotted(path)}.log"
    log.parent.mkdir(exist_ok=True)
    print(f"mutmut: {path} (log: {log.relative_to(ROOT)})", flush=True)
    command = [sys.executable, "-m", "mutmut", "run", f"--max-children={max_children}", f"{dotted(path)}.*"]
    with log.open("w") as out:
        code = subprocess.run(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if code != 0:
        sys.exit(f"mutmut failed on {path} (exit {code}); see {log}")


def collect(
    path: str, equivalents: list[Equivalent], messages: Messages, only: Callable[[str], bool] | None = None
) -> ModuleResult:
    """The verdicts of a module's mutants (those whose name `only` accepts), sorted."""
    # mutmut reads its configuration from the working directory on import.
    import libcst as cst
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.mutation.diff_apply import (
        read_functions_from_index,
        read_mutant_function,
        read_mutants_module,
        read_original_function,
    )
    from mutmut.stats import status_by_exit_code
    from mutmut.utils.format_utils import orig_function_and_class_names_from_key

    data = SourceFileMutationData(path=path)
    data.load()
    result = ModuleResult(path=path)
    source_lines = (ROOT / path).read_text("utf-8").splitlines()
    prefix = dotted(path) + "."
    for name, code in sorted(data.exit_code_by_key.items(), key=lambda kv: _natural(kv[0])):
        if not name.startswith(prefix) or code is None or (only is not None and not only(name)):
            continue
        status = status_by_exit_code[code]
        if status in KILLED and status != "timeout":
            result.killed += 1
            continue
        functions = read_functions_from_index(name, path)
        if functions is None:
            module = read_mutants_module(path)
            functions = (read_original_function(module, name), read_mutant_function(module, name))
        original, mutant = (cst.Module([f]).code.strip("\n") for f in functions)
        function, _ = orig_function_and_class_names_from_key(name)
        if status == "timeout":
            # A listed equivalent cannot be killed: its timeout is the machine's load, not a test.
            if (entry := find_equivalent(equivalents, path, function, original, mutant)) is None:
                result.killed += 1
                continue
            status = "survived"
        if status != "survived":
            result.untested += 1
        diff = "\n".join(list(unified_diff(original.splitlines(), mutant.splitlines(), lineterm="", n=1))[2:])
        before, after = changed_lines(original, mutant)
        survivor = Survivor(
            name, _line_of_change(source_lines, original, mutant), diff, function, before, after
        )
        if status != "survived":
            survivor.name += f" ({status})"
            result.survivors.append(survivor)
        elif (entry := find_equivalent(equivalents, path, function, original, mutant)) is not None:
            survivor.equivalent = entry
            result.equivalent.append(survivor)
        elif is_message_only(original, mutant, messages):
            result.message_only.append(survivor)
        else:
            result.survivors.append(survivor)
    return result


def _natural(name: str) -> tuple[str, int]:
    stem, _, number = name.rpartition("__mutmut_")
    return stem, int(number) if number.isdigit() else 0


def _line_of_change(source_lines: list[str], original: str, mutant: str) -> int:
    """The line in the source file of the first line the mutant changes (0 when not found)."""
    old, new = original.splitlines(), mutant.splitlines()
    first = next(
        (i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new))
    )
    if first >= len(old):
        return 0
    # Match the function's lines as a block, so a repeated line elsewhere is not taken for it.
    for start in range(len(source_lines) - len(old) + 1):
        if all(source_lines[start + k].strip() == old[k].strip() for k in (0, first)):
            return start + first + 1
    return 0


def report(results: list[ModuleResult], verbose_message_only: bool) -> None:
    print()
    columns = ("mutants", "killed", "survived", "message", "equiv.", "raw", "score")
    print(f"{'module':<26} " + " ".join(f"{c:>{max(len(c), 6)}}" for c in columns))
    for r in results:
        print(
            f"{r.path:<26} {r.total:>7} {r.killed:>6} {len(r.survivors):>8} {len(r.message_only):>7}"
            f" {len(r.equivalent):>6} {r.raw_score:>5.1f}% {r.score:>5.1f}%"
        )
    print("raw = killed / mutants: every survivor counts, message-only and listed equivalents too.")
    print("score = killed / (killed + survived): message-only and listed-equivalent survivors left out;")
    print('survivors no test reached ("no tests", "suspicious") count as survived in both.')
    for r in results:
        shown = r.survivors + (r.message_only if verbose_message_only else [])
        if not shown:
            continue
        print(f"\n== {r.path}: {len(r.survivors)} surviving, {len(r.message_only)} message-only")
        for s in shown:
            kind = " (message only)" if s in r.message_only else ""
            print(f"\n-- {s.name}{kind}  {r.path}:{s.line}\n{s.diff}")


def print_stubs(results: list[ModuleResult]) -> None:
    """An `[[equivalent]]` entry per survivor, to paste into equivalent.toml once a reason is known."""
    for r in results:
        for s in r.survivors:
            print(f"\n# {s.name}  {r.path}:{s.line}\n[[equivalent]]")
            print(f"module = {_toml(r.path)}\nfunction = {_toml(s.function)}")
            print(f'before = {_toml(s.before)}\nafter = {_toml(s.after)}\nreason = ""')


def _toml(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__.split("\n")[0])
    parser.add_argument("modules", nargs="*", help="paths or dotted names; default: all configured")
    parser.add_argument("--report", action="store_true", help="do not run mutmut, report the last results")
    parser.add_argument("--max-children", type=int, default=2, help="mutants tested at once (default 2)")
    parser.add_argument("--message-only", action="store_true", help="show message-only survivors too")
    parser.add_argument("--stubs", action="store_true", help="print equivalent.toml entries to fill in")
    parser.add_argument("--tmpdir", type=Path, default=None, help="TMPDIR for the runs (default: a new one)")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    configured = configured_modules()
    wanted = [m if m.endswith(".py") else m.replace(".", "/") + ".py" for m in args.modules] or configured
    unknown = sorted(set(wanted) - set(configured))
    if unknown:
        sys.exit(f"not in [tool.mutmut] only_mutate: {', '.join(unknown)}")
    if not args.report:
        tmpdir = args.tmpdir or Path(tempfile.mkdtemp(prefix="mutation-"))
        for path in wanted:
            run_mutmut(path, args.max_children, tmpdir)
    equivalents = load_equivalents()
    messages = project_messages()
    results = [collect(path, equivalents, messages) for path in wanted]
    if args.stubs:
        print_stubs(results)
    else:
        report(results, args.message_only)
    matched = Counter(equivalents.index(s.equivalent) for r in results for s in r.equivalent if s.equivalent)
    wrong = misfits(equivalents, matched, wanted)
    if wrong:
        print(f"\n== {EQUIVALENT_FILE.name}: {len(wrong)} entries that do not match what they name")
        for line in wrong:
            print(f"  {line}")
    sys.exit(1 if wrong or any(r.survivors for r in results) else 0)


if __name__ == "__main__":
    main()
