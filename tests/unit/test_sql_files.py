"""`ledger.sql`: the files ship with the package, a shipped file cannot change unnoticed, statements
split where a file says they end, and the pool's default windows have one home, from which their
SQL is rendered."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from importlib import resources
from pathlib import Path

import pytest

from ledger import sql
from ledger.pool.rules import PoolSettings

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ledger" / "sql"


def test_every_file_is_in_a_release_and_every_release_file_exists() -> None:
    on_disk = {p.name for p in PACKAGE.glob("*.sql")}
    released = {name for files in sql.RELEASES.values() for name in files}
    assert on_disk == released
    assert max(sql.RELEASES) == sql.HEAD


def test_the_files_ship_as_package_data() -> None:
    """A plain (non-editable) install carries only what package-data names."""
    with (ROOT / "pyproject.toml").open("rb") as fh:
        patterns = tomllib.load(fh)["tool"]["setuptools"]["package-data"]["ledger"]
    for path in PACKAGE.glob("*.sql"):
        relative = path.relative_to(ROOT / "ledger").as_posix()
        assert any(fnmatch(relative, pattern) for pattern in patterns), relative
        # And the loader finds them as package resources, not by a path into the source tree.
        assert resources.files("ledger.sql").joinpath(path.name).is_file()


def test_every_file_is_the_one_its_release_shipped() -> None:
    for files in sql.RELEASES.values():
        for name in files:
            assert sql.statements(sql.read(name))


def test_a_changed_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sql.SHIPPED, "stalled_runs.sql", "0" * 64)
    with pytest.raises(ValueError, match=r"stalled_runs\.sql is not the file a migration shipped"):
        sql.read("stalled_runs.sql")


def test_load_runs_each_statement_of_a_release_in_order() -> None:
    run: list[str] = []
    sql.load(run.append, sql.HEAD)
    expected = [s for name in sql.RELEASES[sql.HEAD] for s in sql.statements(sql.read(name))]
    assert run == expected
    assert "ledger.pool_windows(" in run[0]


BODY = """-- A header; it ends with a semicolon;
CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1;
    RETURN 1;
END
$$;

CREATE TRIGGER t AFTER INSERT ON x
    FOR EACH ROW EXECUTE FUNCTION f();
-- trailing comment
"""


def test_statements_end_at_a_semicolon_outside_dollar_quotes() -> None:
    found = sql.statements(BODY)
    assert len(found) == 2
    assert found[0].startswith("-- A header") and found[0].endswith("END\n$$")
    assert found[1] == "\nCREATE TRIGGER t AFTER INSERT ON x\n    FOR EACH ROW EXECUTE FUNCTION f()"


@pytest.mark.parametrize(
    "text",
    [
        "CREATE VIEW v AS SELECT 1",  # no semicolon
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$\n SELECT 1;\n",  # body never closed
        "SELECT 1; SELECT 2",  # the last one does not end
    ],
)
def test_a_statement_that_does_not_end_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="does not end"):
        sql.statements(text)


def test_python_s_default_windows_are_the_sql_s() -> None:
    windows = sql.pool_windows()
    assert list(windows) == [
        "ready_max_age_ms",
        "default_ttl_ms",
        "max_ttl_ms",
        "mapping_ttl_ms",
        "min_ready_age_ms",
    ]
    defaults = PoolSettings()
    assert {name: getattr(defaults, name) for name in windows} == windows
    assert windows == {
        "ready_max_age_ms": 7 * 60_000,
        "default_ttl_ms": 8 * 60_000,
        "max_ttl_ms": 8 * 60_000,
        "mapping_ttl_ms": 60 * 60_000,
        "min_ready_age_ms": 0,
    }


def test_the_head_windows_file_is_rendered_from_the_one_home() -> None:
    name = next(name for name in sql.RELEASES[sql.HEAD] if name.startswith("pool_windows"))
    assert sql.read(name) == sql.render_pool_windows()


def test_a_window_changed_in_its_home_changes_the_rendered_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above has teeth: a number changed in `POOL_WINDOWS` alone no longer matches the
    shipped file, and the rendering carries every window under its name."""
    before = sql.render_pool_windows()
    monkeypatch.setattr(sql, "POOL_WINDOWS", {**sql.POOL_WINDOWS, "max_ttl_ms": 480_001})
    after = sql.render_pool_windows()
    assert after != before
    assert "480001::bigint AS max_ttl_ms" in after and "480000::bigint AS default_ttl_ms" in after
    assert sql.pool_windows()["max_ttl_ms"] == 480_001


# Where a window's number may be written: its home, and the frozen history (migrations, and SQL
# files of releases before the head, which never change).
_NUMBER = re.compile(r"(?<![\w.])\d[\d_]*(?![\w.])")


def _second_homes(root: Path, windows: dict[str, int]) -> list[str]:
    """`path:line` of every literal equal to a window under `root`'s `ledger`, `reporter` and
    `bench`, outside the home and the frozen history."""
    values = {value for value in windows.values() if value >= 1000}
    home = root / "ledger" / "sql" / "__init__.py"
    head_files = {root / "ledger" / "sql" / name for name in sql.RELEASES[sql.HEAD]}
    found: list[str] = []
    for top in ("ledger", "reporter", "bench"):
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in (".py", ".sql") or path == home or "migrations" in path.parts:
                continue
            if path.suffix == ".sql" and path not in head_files:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if any(int(token.replace("_", "")) in values for token in _NUMBER.findall(line)):
                    found.append(f"{path.relative_to(root).as_posix()}:{number}")
    return found


def test_the_windows_have_no_second_home() -> None:
    """Only the head release's rendered file restates the numbers (held to the home above)."""
    name = next(name for name in sql.RELEASES[sql.HEAD] if name.startswith("pool_windows"))
    assert [
        hit for hit in _second_homes(ROOT, sql.pool_windows()) if not hit.startswith(f"ledger/sql/{name}:")
    ] == []


def test_a_second_home_is_found(tmp_path: Path) -> None:
    (tmp_path / "ledger" / "sql").mkdir(parents=True)
    (tmp_path / "ledger" / "sql" / "__init__.py").write_text("HOME = 420_000\n")
    (tmp_path / "ledger" / "sql" / "pool_windows.sql").write_text("SELECT 420000::bigint\n")  # history
    (tmp_path / "ledger" / "migrations").mkdir()
    (tmp_path / "ledger" / "migrations" / "m.py").write_text("X = 3600000\n")
    (tmp_path / "reporter").mkdir()
    (tmp_path / "reporter" / "fine.py").write_text("N = 4200001  # 420000.5 neither\n")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "stray.py").write_text("TTL_MS = 3_600_000\n")
    assert _second_homes(tmp_path, sql.pool_windows()) == ["bench/stray.py:1"]
