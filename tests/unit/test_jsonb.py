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


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": 100000000000000000000000, "b": -18446744073709551617, "c": 18446744073709551615}',
        b'[9223372036854775807, -9223372036854775808, 1.5e300, "\\u00e9"]',
        b'{"line": "\\ud800 lone surrogate", "n": 1}',
    ],
)
def test_loads_reads_what_the_standard_decoder_reads_every_integer_exact(raw: bytes) -> None:
    # orjson alone reads an integer beyond 64 bits as a float (10**23 as 1e+23).
    decoded = jsonb.loads(raw)
    assert decoded == json.loads(raw)
    assert repr(decoded) == repr(json.loads(raw))


def test_loads_refuses_what_the_standard_decoder_refuses() -> None:
    with pytest.raises(json.JSONDecodeError):
        jsonb.loads(b'{"a": ')
    with pytest.raises(ValueError):
        jsonb.loads(b"\xff\xfe\xff")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "utf-8-sig"])
def test_loads_reads_utf8_only_never_a_guessed_encoding(encoding: str) -> None:
    # The standard decoder guesses UTF-16 and UTF-32 from NUL bytes; JSON between systems is UTF-8.
    with pytest.raises(ValueError):
        jsonb.loads('{"n": 10000000000000000000000}'.encode(encoding))
