"""docs/runner-protocol.md says what the runner protocol's schema says, no more and no less."""

from __future__ import annotations

import re
from pathlib import Path

from ledger import validate
from ledger.cli import report as report_cli
from reporter import runner_protocol
from tests.oracle.from_schema import SCHEMA, line_kinds, resolve

PAGE = Path(__file__).resolve().parents[3] / "docs" / "runner-protocol.md"
KIND = re.compile(r"`((?:map|docflow\.node|tool\.call|dataset|activity)\.[a-z.]+)`")


def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def fields(kind_schema: dict) -> set[str]:
    """Every field name of a line kind (an execution event's own fields included)."""
    names = set(kind_schema["properties"])
    event = kind_schema["properties"].get("event")
    if event is not None and "properties" in event:
        names |= set(event["properties"])
    return names


def test_the_reference_part_is_generated_from_the_schema_and_up_to_date() -> None:
    text = page()
    assert runner_protocol.REFERENCE_BEGIN in text
    assert text == runner_protocol.with_reference(text), (
        "docs/runner-protocol.md is out of date: python -m reporter.runner_protocol docs/runner-protocol.md"
    )


def test_every_kind_and_field_of_the_schema_is_on_the_page() -> None:
    text = page()
    for kind, schema in line_kinds().items():
        assert f"`{kind}`" in text, kind
        for name in fields(schema):
            assert f"`{name}`" in text, f"{kind}.{name}"


def test_every_kind_the_page_names_is_one_of_the_schemas() -> None:
    named = set(KIND.findall(page()))
    assert named, "the page names no event kind"
    assert named <= set(line_kinds()), named - set(line_kinds())


def test_the_statuses_and_exit_codes_are_the_protocols() -> None:
    text = page()
    statuses = resolve(line_kinds()["result"]["properties"]["status"])["enum"]
    table = re.findall(r"^\| `([a-z]+)` \| .* \| (\d) \|$", text, re.M)
    assert [status for status, _ in table] == statuses
    assert {int(code) for _, code in table} == {report_cli.EXIT_OK}
    assert f"| {report_cli.EXIT_NO_RESULT} |" in text
    for code, what in (
        (report_cli.EXIT_STALE, "newer attempt"),
        (report_cli.EXIT_TERMINAL, "already ended"),
        (report_cli.EXIT_UPLOAD_FAILED, "final upload failed"),
    ):
        words = r"\s+".join(what.split())
        assert re.search(rf"\b{code}\s+when\s[^.]*{words}", text), (code, what)


def test_the_bounds_on_the_page_are_the_ledgers() -> None:
    text = page()
    assert f"cut above {validate.MAX_LOG_LINE_BYTES} bytes" in text
    assert validate.TRUNCATION_MARKER.replace("{cut}", "N") in text
    assert f"at most {validate.MAX_VALUE_DEPTH - 1} levels" in text
    assert SCHEMA["x-bodyLimitBytes"] == 1024 * 1024 and "1 MiB" in text
