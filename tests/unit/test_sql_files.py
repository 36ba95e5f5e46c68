"""`ledger.sql`: the files ship with the package, a shipped file cannot change unnoticed, statements
split where a file says they end, and the pool's default windows are read from their SQL."""

from __future__ import annotations

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


def test_windows_the_select_does_not_name_in_order_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    text = sql.read("pool_windows.sql").replace("480000::bigint AS max_ttl_ms,\n", "")
    monkeypatch.setattr(sql, "read", lambda _name: text)
    with pytest.raises(ValueError, match="cannot read the windows"):
        sql.pool_windows()
