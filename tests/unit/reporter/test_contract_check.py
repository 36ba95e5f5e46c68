"""The contract check: `contract_problem` holds the contract file to its shipped schema (the tests
hold the two together on every case) plus the one rule a schema cannot say, distinct node ids."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from reporter.pipeline import contract_problem
from reporter.runner_protocol import contract_schema

VALIDATOR = jsonschema.Draft202012Validator(contract_schema())

GOOD: list[Any] = [
    {"staticPipeline": {"substeps": []}},
    {"staticPipeline": {"substeps": [{"type": "code"}, {"type": "code"}]}},  # code-0, code-1
    {
        "staticPipeline": {
            "substeps": [
                {"type": "tool", "id": "load", "toolId": "loader"},
                {"type": "dataset", "id": "enrich", "tableNamespace": "leads", "field": "rows"},
            ]
        },
        "other": 1,
    },
]

BAD: list[tuple[Any, str]] = [
    ([], "must be a JSON object holding staticPipeline.substeps, not a list"),
    ("x", "must be a JSON object holding staticPipeline.substeps, not a string"),
    (None, "must be a JSON object holding staticPipeline.substeps, not null"),
    ({}, "has no staticPipeline"),
    ({"staticPipeline": []}, "staticPipeline must be an object, not a list"),
    ({"staticPipeline": {"steps": []}}, "staticPipeline has no substeps (the list of steps); it holds steps"),
    ({"staticPipeline": {"substeps": {}}}, "staticPipeline.substeps must be a list, not an object"),
    ({"staticPipeline": {"substeps": [1]}}, "staticPipeline.substeps[0] must be an object, not a number"),
    ({"staticPipeline": {"substeps": [{"id": "a"}]}}, "staticPipeline.substeps[0] has no type"),
    ({"staticPipeline": {"substeps": [{"type": 3}]}}, "staticPipeline.substeps[0] type must be a string"),
    (
        {"staticPipeline": {"substeps": [{"type": "code"}, {"type": "tool", "toolId": None}]}},
        "staticPipeline.substeps[1] toolId must be a string, not null",
    ),
    ({"staticPipeline": {"substeps": [{"type": "code", "id": " "}]}}, "substeps[0] id must not be blank"),
    ({"staticPipeline": {"substeps": [{"type": "code", "id": 7}]}}, "substeps[0] id must be a string"),
    ({"staticPipeline": {"substeps": [{"type": "x", "field": []}]}}, "substeps[0] field must be a string"),
    (
        {"staticPipeline": {"substeps": [{"type": "x", "tableNamespace": 1}]}},
        "tableNamespace must be a string",
    ),
]

# Only distinct node ids are beyond the schema.
DUPLICATES: list[tuple[Any, str]] = [
    (
        {"staticPipeline": {"substeps": [{"type": "code", "id": "a"}, {"type": "tool", "id": "a"}]}},
        "staticPipeline.substeps[0] and substeps[1] have the same node id 'a'",
    ),
    (
        # An explicit id equal to another step's generated one.
        {"staticPipeline": {"substeps": [{"type": "code"}, {"type": "tool", "id": "code-0"}]}},
        "have the same node id 'code-0'",
    ),
]


@pytest.mark.parametrize("contract", GOOD)
def test_a_contract_the_schema_takes_has_no_problem(contract: Any) -> None:
    assert VALIDATOR.is_valid(contract)
    assert contract_problem(contract) is None


@pytest.mark.parametrize(("contract", "said"), BAD)
def test_a_contract_the_schema_refuses_is_refused_naming_the_place(contract: Any, said: str) -> None:
    assert not VALIDATOR.is_valid(contract)
    problem = contract_problem(contract)
    assert problem is not None and said in problem and "\n" not in problem


@pytest.mark.parametrize(("contract", "said"), DUPLICATES)
def test_two_steps_with_one_node_id_are_refused(contract: Any, said: str) -> None:
    assert VALIDATOR.is_valid(contract)
    problem = contract_problem(contract)
    assert problem is not None and said in problem
