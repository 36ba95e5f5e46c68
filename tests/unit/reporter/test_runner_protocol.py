"""The runner protocol's schema is the contract the reporter's parser is held to.

Lines drawn from the schema (every kind, bounds at their edges) are folded as their kind; lines the
schema refuses (one rule broken) are junk: counted and skipped whole. The schema's bounds are the
ones `ledger.validate` and the service apply, and it ships with the package.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path
from types import CodeType
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import validate
from ledger.cli.app import cli
from ledger.runlog.events import TERMINAL_STATUSES
from ledger.service.settings import ServiceSettings
from reporter import SimulatedRun, lines, runner_protocol
from reporter.folding import EventFolder
from reporter.lifecycle import StepState
from reporter.pipeline import StaticPipeline
from reporter.state import ProgressState
from tests.oracle.from_schema import SCHEMA, broken_lines, line_kinds, resolve, valid, valid_lines

ROOT = Path(__file__).resolve().parents[3]
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
CONTRACT = {
    "staticPipeline": {
        "substeps": [
            {"type": "code", "id": "load"},
            {"type": "dataset", "id": "enrich", "tableNamespace": "leads"},
            {"type": "tool", "id": "notify", "toolId": "slack.post"},
        ]
    }
}
# Keywords of JSON Schema that draft-7 tools understand, and the protocol's own annotations.
DRAFT7_KEYWORDS = {
    "$schema", "$id", "$ref", "title", "description", "type", "const", "enum", "oneOf", "anyOf",
    "properties", "required", "additionalProperties", "items", "minimum", "maximum", "minLength",
    "pattern",
}  # fmt: skip
ANNOTATIONS = {"x-maxBytes", "x-maxDepth", "x-cutMarker", "x-bodyLimitBytes", "x-terminal"}
PROBE = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


def keywords(node: Any, parent: str = "") -> Iterator[str]:
    """Every schema keyword used (the names under `properties` and `$defs` are not keywords)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if parent not in ("properties", "$defs"):
                yield key
            yield from keywords(value, key)
    elif isinstance(node, list):
        for item in node:
            yield from keywords(item, parent)


def make_folder() -> EventFolder:
    return EventFolder(ProgressState(now_ms=lambda: 1_000), StaticPipeline(CONTRACT))


def state_of(folder: EventFolder) -> tuple[Any, ...]:
    state = folder.state
    return (
        {node_id: node.to_wire() for node_id, node in state.nodes.items()},
        list(state.logs),
        state.log_total_count,
        state.pending_one_shot_count,
        folder.step_states(),
    )


# -- the schema itself -----------------------------------------------------------------------------


def test_the_schemas_are_versioned_and_use_only_what_draft_7_tools_read() -> None:
    for schema in (runner_protocol.runner_schema(), runner_protocol.contract_schema()):
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.Draft7Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["$id"].endswith("/v1")
        assert set(keywords(schema)) - {"$defs"} <= DRAFT7_KEYWORDS | ANNOTATIONS
    assert runner_protocol.runner_protocol_id().endswith("/runner-protocol/v1")


def test_the_bounds_are_the_ledgers() -> None:
    defs = SCHEMA["$defs"]
    assert defs["count"]["maximum"] == defs["countOrNull"]["maximum"] == validate.INT64_MAX
    assert defs["epochMsOrNull"]["maximum"] == validate.MAX_EPOCH_MS
    line = defs["log"]["properties"]["line"]
    assert line["x-maxBytes"] == validate.MAX_LOG_LINE_BYTES
    assert line["x-cutMarker"] == validate.TRUNCATION_MARKER
    assert SCHEMA["x-bodyLimitBytes"] == validate.MAX_BODY_BYTES == ServiceSettings().max_body_bytes
    # A stored value is wrapped one level deeper in the request than the value itself.
    depths = {defs[name]["x-maxDepth"] for name in ("storedValue", "datasetLifecycle")}
    depths.add(defs["activityObserved"]["properties"]["observation"]["x-maxDepth"])
    assert depths == {validate.MAX_VALUE_DEPTH - 1}


def test_the_result_statuses_are_the_ledgers_terminal_ones_and_suspended() -> None:
    status = SCHEMA["$defs"]["result"]["properties"]["status"]
    assert status["x-terminal"] == list(TERMINAL_STATUSES)
    assert status["enum"] == [*TERMINAL_STATUSES, "suspended"]


def test_the_parser_knows_exactly_the_schemas_kinds() -> None:
    kinds = set(line_kinds())
    assert (set(lines.LINE_CHECKS) - {"execution_event"}) | lines.EXECUTION_EVENT_KINDS == kinds
    assert set(lines.EXECUTION_EVENT_CHECKS) == lines.EXECUTION_EVENT_KINDS
    folder = make_folder()
    folded = set(folder._execution_handlers)  # the kinds the fold acts on
    assert folded == lines.EXECUTION_EVENT_KINDS


def _collections_of_kinds(code: CodeType) -> Iterator[tuple[int, list[str]]]:
    """Each constant collection in `code` (and the code within it) naming two or more execution
    event kinds: a literal tuple, list, set or dict of them compiles to one. Read from the compiled
    code, not from an `ast.parse` (which trips CPython 3.11 under mutmut's tracing)."""
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _collections_of_kinds(const)
        elif isinstance(const, tuple | frozenset):
            named = sorted(
                item for item in const if isinstance(item, str) and item in lines.EXECUTION_EVENT_KINDS
            )
            if len(named) >= 2:
                yield code.co_firstlineno, named


def _compiled(path: Path) -> CodeType:
    return compile(path.read_text("utf-8"), str(path), "exec", dont_inherit=True)


def test_the_execution_event_kinds_are_registered_once() -> None:
    """One registry of the execution event kinds, `reporter.lines`': the parser's checks and the
    fold's handlers are built from its names, and no other module of the reporter lists kinds of
    its own (a second list drifts: a kind checked but never folded, or folded without its check).
    The ledger's event log has types of its own, some of the same name: they are not these."""
    registry = ROOT / "reporter" / "lines.py"
    assert list(_collections_of_kinds(_compiled(registry)))  # the probe sees the registry's lists
    found = [
        f"{path.relative_to(ROOT)}:{line}: {named}"
        for path in sorted((ROOT / "reporter").rglob("*.py"))
        if path != registry
        for line, named in _collections_of_kinds(_compiled(path))
    ]
    assert found == []


def test_ledger_report_schema_prints_the_shipped_schema() -> None:
    outcome = CliRunner().invoke(cli, ["report", "--schema"])
    assert outcome.exit_code == 0, outcome.output
    assert outcome.output == runner_protocol.runner_schema_text()
    assert json.loads(outcome.output) == SCHEMA


def test_the_schemas_ship_as_package_data() -> None:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = list((ROOT / "reporter" / "schemas").glob("*.json"))
    assert {p.name for p in shipped} == {
        runner_protocol.RUNNER_PROTOCOL_FILE,
        runner_protocol.CONTRACT_FILE,
    }
    for path in shipped:
        relative = path.relative_to(ROOT / "reporter").as_posix()
        assert any(fnmatch(relative, pattern) for pattern in patterns["reporter"]), relative


# -- the parser against the schema -----------------------------------------------------------------


# Names the test contract knows, so that a line that names a step reaches it.
NAMES = {"mapNodeId": st.just("enrich"), "toolId": st.just("slack.post")}


@PROBE
@given(line=valid_lines(NAMES))
def test_a_line_the_schema_accepts_is_folded_as_its_kind(line: dict[str, Any]) -> None:
    VALIDATOR.validate(line)
    folder = make_folder()
    before = state_of(folder)
    kind = line["type"] if line["type"] != "execution_event" else line["event"]["type"]
    if kind == "tool.call.settled":  # a settlement settles a started call
        started = {"type": "tool.call.started", "toolId": "slack.post"}
        folder.on_runner_event({"type": "execution_event", "event": started})
    folder.on_runner_event(line)
    assert folder.sanitizer.counts["runner line"] == 0
    state, event = folder.state, line.get("event", {})
    if kind == "log":
        assert state.log_total_count == (1 if line["line"].strip() else 0)
    elif kind in ("row_update", "result"):
        assert state_of(folder) == before
    elif kind.startswith("map."):
        if event.get("mapNodeId") == "enrich":
            assert state.nodes["enrich"].to_wire() != before[0].get("enrich")
    elif kind.startswith("docflow."):
        assert event["nodeId"] in state.nodes
    elif kind.startswith("tool.call.") and event["toolId"] == "slack.post":
        if kind == "tool.call.started":
            expected = StepState.STARTED
        else:  # any settlement but a failure completes the step
            expected = StepState.FAILED if event.get("outcome") == "failed" else StepState.COMPLETED
        assert folder.step_states()["notify"] is expected
    elif kind in ("activity.observed", "dataset.lifecycle"):
        # Stored, or (too deep for the ledger) dropped and counted: either way read as its kind.
        dropped = sum(folder.sanitizer.counts.values())
        assert state.pending_one_shot_count + dropped == 1


@PROBE
@given(broken=broken_lines(exclude=("result",)))
def test_a_line_the_schema_refuses_is_junk_counted_and_skipped(broken: tuple[str, dict[str, Any]]) -> None:
    what, line = broken
    assert not VALIDATOR.is_valid(line), what
    folder = make_folder()
    before = state_of(folder)
    folder.on_runner_event(line)
    assert folder.sanitizer.counts["runner line"] == 1, what
    assert state_of(folder) == before, what


@pytest.mark.parametrize(
    "line", [None, 5, "log", [], {}, {"type": 5}, {"type": "mystery"}, {"type": ["log"]}]
)
def test_a_line_that_is_no_object_of_a_known_kind_is_junk(line: Any) -> None:
    assert not VALIDATOR.is_valid(line)
    folder = make_folder()
    folder.on_runner_event(line)
    assert folder.sanitizer.counts["runner line"] == 1


@pytest.mark.parametrize(
    ("count", "accepted"),
    [
        (0, True),
        (validate.INT64_MAX - 1, True),
        (validate.INT64_MAX, True),
        (validate.INT64_MAX + 1, False),
        (-1, False),
        (3.0, True),  # JavaScript's integers arrive as floats
        (3.5, False),
        (True, False),
        ("3", False),
    ],
)
def test_a_count_at_its_bounds(count: object, accepted: bool) -> None:
    line = {
        "type": "execution_event",
        "event": {"type": "map.progress", "mapNodeId": "enrich", "completedRows": count},
    }
    assert VALIDATOR.is_valid(line) is accepted
    assert (lines.junk_reason(line) is None) is accepted


@pytest.mark.parametrize(
    ("at", "accepted"),
    [(0, True), (validate.MAX_EPOCH_MS, True), (validate.MAX_EPOCH_MS + 1, False), (-1, False), (None, True)],
)
def test_a_time_at_its_bounds(at: object, accepted: bool) -> None:
    line = {"type": "execution_event", "event": {"type": "docflow.node.hit", "nodeId": "n", "at": at}}
    assert VALIDATOR.is_valid(line) is accepted
    assert (lines.junk_reason(line) is None) is accepted


@PROBE
@given(contract=valid(runner_protocol.contract_schema(), root=runner_protocol.contract_schema()))
def test_every_step_of_a_contract_file_the_schema_accepts_is_a_step(contract: dict[str, Any]) -> None:
    schema = runner_protocol.contract_schema()
    jsonschema.Draft202012Validator(schema).validate(contract)
    substeps = contract.get("staticPipeline", {}).get("substeps", [])
    assert len(StaticPipeline(contract).nodes) == len(substeps)
    assert resolve(schema["properties"]["staticPipeline"], schema)["required"] == ["substeps"]


def test_the_simulated_run_speaks_the_protocol() -> None:
    """The demo's and the tests' runner: every line it writes is one the schema accepts."""
    run = SimulatedRun(rows=300, fail_every=7, page_size=100, fail_run=True)
    for line in run.events():
        VALIDATOR.validate(line)
        assert lines.junk_reason(line) is None
