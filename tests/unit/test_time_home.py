"""Times convert to and from counts since the epoch in one place, `ledger.clock`.

A second conversion drifts: its own epoch constant, float seconds where the home does integer
arithmetic (and loses the last millisecond now and then), a cast that rounds where the home floors.
So every module of the package reaches the home, and this scan of the package's syntax fails when
a conversion is written anywhere else.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOME = "ledger/clock.py"
# Alembic's history is frozen, never edited; its SQL is what it was when it shipped.
FROZEN = ("ledger/migrations/",)
# Modules other hands are reworking; each is to call `ledger.clock` instead, and its entry goes
# when it does.
ALLOWED = {
    "ledger/cli/client.py",  # being moved: now -> clock.to_ms(datetime.now(UTC)), clock.to_ms, clock.from_ms
    "ledger/cli/render.py",  # being moved: a wire time shown -> clock.from_ms
    "ledger/cli/demo/scenario.py",  # being moved: -> clock.from_s
    "ledger/service/logs.py",  # being moved: a log record's `created` -> clock.from_s
    "ledger/service/ui/data.py",  # being moved: the pool page's times -> clock.ms_sql
    "ledger/pool/rules.py",  # being moved: the claim order's key -> clock.to_us
}

# SQL that turns a timestamptz into a number or back.
_SQL_CONVERSION = re.compile(r"extract\s*\(\s*epoch\b|\bto_timestamp\s*\(", re.IGNORECASE)
_FROM_NUMBER = frozenset({"fromtimestamp", "utcfromtimestamp"})
_WALL_CLOCK = frozenset({"time", "time_ns"})


def _called_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            return func.attr
        if isinstance(func, ast.Name):
            return func.id
    return None


def _names_epoch(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id.lstrip("_") == "EPOCH") or (
        isinstance(node, ast.Attribute) and node.attr.lstrip("_") == "EPOCH"
    )


def conversions(source: str) -> list[str]:
    """`line: what` for each conversion between a time and an epoch count written in `source`."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _SQL_CONVERSION.search(node.value):
                found.append(f"{line}: SQL epoch conversion")
        elif isinstance(node, ast.Call):
            name = _called_name(node)
            if name == "timestamp" and not node.args and not node.keywords:
                found.append(f"{line}: .timestamp()")
            elif name in _FROM_NUMBER:
                found.append(f"{line}: {name}()")
            elif name == "datetime" and [a.value for a in node.args[:1] if isinstance(a, ast.Constant)] == [
                1970
            ]:
                found.append(f"{line}: an epoch of its own")
        elif isinstance(node, ast.BinOp):
            if _names_epoch(node.left) or _names_epoch(node.right):
                found.append(f"{line}: arithmetic on the epoch")
            elif isinstance(node.op, ast.Mult | ast.Div | ast.FloorDiv) and (
                _called_name(node.left) in _WALL_CLOCK or _called_name(node.right) in _WALL_CLOCK
            ):
                found.append(f"{line}: the wall clock scaled")
    return found


def test_the_scan_finds_each_way_of_converting() -> None:
    # The two copies this rule replaced, and the other spellings of the same conversion.
    assert conversions('_MS = "(extract(epoch FROM {col}) * 1000)::bigint"') == ["1: SQL epoch conversion"]
    assert conversions('q = f"SELECT to_timestamp({x} / 1000.0)"') == ["1: SQL epoch conversion"]
    assert conversions("_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)") == ["1: an epoch of its own"]
    assert conversions("at = datetime(year, 1, 1)") == []
    assert conversions("c = (at - _EPOCH) // _MICROSECOND") == ["1: arithmetic on the epoch"]
    assert conversions("t = clock.EPOCH + ms * MS") == ["1: arithmetic on the epoch"]
    assert conversions("s = at.timestamp()") == ["1: .timestamp()"]
    assert conversions("d = datetime.fromtimestamp(ms / 1000, UTC)") == ["1: fromtimestamp()"]
    assert conversions("ms = int(time.time() * 1000)") == ["1: the wall clock scaled"]
    assert conversions("ns = time_ns() // 1_000_000") == ["1: the wall clock scaled"]
    # Durations and the home's own functions are not conversions.
    durations = "wait_s = timeout_ms / 1000\nx = to_ms(at)\ny = ms_sql('o.age')\nnow = time.time()"
    assert conversions(durations) == []


def test_times_convert_only_in_the_clock() -> None:
    found = {}
    for path in sorted((REPO / "ledger").rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative == HOME or relative.startswith(FROZEN) or relative in ALLOWED:
            continue
        here = conversions(path.read_text(encoding="utf-8"))
        if here:
            found[relative] = here
    assert found == {}, f"convert with `ledger.clock` (to_ms, from_ms, ms_sql, to_s, to_us, …): {found}"


def test_the_allowed_modules_still_convert() -> None:
    # An entry whose module no longer converts (or is gone) is stale: the list only shrinks.
    stale = [
        path
        for path in sorted(ALLOWED)
        if not (REPO / path).is_file() or not conversions((REPO / path).read_text(encoding="utf-8"))
    ]
    assert stale == []
