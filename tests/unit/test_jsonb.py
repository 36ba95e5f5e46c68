"""JSON text for jsonb parameters: orjson where it can, the standard encoder for what it refuses."""

from __future__ import annotations

import json

import pytest

from ledger import jsonb


@pytest.mark.parametrize(
    "value",
    [
        [["log", {"line": "a"}], ["status", {"status": "x", "logs": ["é", "日本"]}]],
        {"big": 2**70, "negative": -(2**65), "nested": [{"a": None, "b": 1.5, "c": True}]},
        {"keys": {1: "int keys become strings, as the standard encoder writes them"}},
        ("a", "tuple"),
    ],
)
def test_dumps_writes_what_the_standard_encoder_means(value: object) -> None:
    text = jsonb.dumps(value)
    assert isinstance(text, str)
    assert json.loads(text) == json.loads(json.dumps(value))


def test_dumps_refuses_nan_like_the_standard_encoder_when_orjson_cannot_say() -> None:
    # A big int makes orjson give up; the standard encoder then refuses NaN instead of writing null.
    with pytest.raises(ValueError):
        jsonb.dumps([2**70, float("nan")])
