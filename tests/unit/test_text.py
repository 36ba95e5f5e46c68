"""An error's text on one line, written once (`ledger.text.one_line`) and used by every face."""

from __future__ import annotations

import ast
from pathlib import Path

from ledger.text import one_line

REPO = Path(__file__).resolve().parents[2]
HOME = "ledger/text.py"
# The command line's own copies, to call `one_line` when its rework lands; the list only shrinks.
ALLOWED = {}


def test_one_line_joins_every_run_of_whitespace() -> None:
    assert one_line(ValueError("connection refused\nHINT:  is the server running?\n")) == (
        "connection refused HINT: is the server running?"
    )
    assert one_line("  a\t\tb \r\n c  ") == "a b c"
    assert one_line("one") == "one"
    # Nothing to say: empty, so the caller can show the error's type instead.
    assert one_line(ValueError()) == ""
    assert one_line(" \n\t") == ""


def joined_splits(source: str) -> list[int]:
    """Lines of `source` that write `" ".join(<text>.split())`, the rule `one_line` holds."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "join"
            and isinstance(node.func.value, ast.Constant)
            and node.func.value.value == " "
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Call)
            and isinstance(node.args[0].func, ast.Attribute)
            and node.args[0].func.attr == "split"
            and not node.args[0].args
        ):
            lines.append(node.lineno)
    return lines


def test_the_scan_finds_a_copy() -> None:
    assert joined_splits('said = " ".join(str(exc).split())') == [1]
    assert joined_splits("x = f\"{' '.join(err.split())}\"") == [1]
    assert joined_splits('words = " ".join(text.split(","))\nparts = "".join(text.split())') == []


def test_one_line_has_one_home_in_the_package() -> None:
    found = {}
    for path in sorted((REPO / "ledger").rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative != HOME and relative not in ALLOWED and (lines := joined_splits(path.read_text("utf-8"))):
            found[relative] = lines
    assert found == {}, f"use `ledger.text.one_line`: {found}"


def test_the_allowed_modules_still_hold_a_copy() -> None:
    stale = [
        path
        for path in sorted(ALLOWED)
        if not (REPO / path).is_file() or not joined_splits((REPO / path).read_text("utf-8"))
    ]
    assert stale == []
