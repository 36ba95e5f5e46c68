"""Token resolution, the generated token file and constant-time matching (ledger.auth)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from ledger import auth
from ledger.config import ConfigError, Settings


def settings_for(tmp_path: Path) -> Settings:
    return Settings(database_url=None, data_dir=tmp_path / "data")


def test_configured_tokens_split_on_commas_and_drop_blanks() -> None:
    assert auth.configured_tokens({"LEDGER_API_TOKENS": " a, b ,,c "}) == ["a", "b", "c"]
    assert auth.configured_tokens({"LEDGER_API_TOKENS": " , "}) == []
    assert auth.configured_tokens({}) == []


def test_first_start_generates_a_private_token_file_and_later_starts_reuse_it(tmp_path: Path) -> None:
    first = auth.ensure_token_file(tmp_path / "data")
    assert first.created
    assert first.path == tmp_path / "data" / "api-token"
    assert stat.S_IMODE(first.path.stat().st_mode) == 0o600
    assert len(first.token) >= 32
    again = auth.ensure_token_file(tmp_path / "data")
    assert not again.created
    assert again.token == first.token


def test_a_token_file_readable_by_others_is_tightened(tmp_path: Path) -> None:
    path = tmp_path / "api-token"
    path.write_text("stored-token\n")
    path.chmod(0o644)
    found = auth.ensure_token_file(tmp_path)
    assert found.token == "stored-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_client_token_prefers_ledger_token_then_api_tokens_then_the_file(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    stored = auth.ensure_token_file(settings.data_dir).token
    env = {"LEDGER_TOKEN": "explicit", "LEDGER_API_TOKENS": "first,second"}
    assert auth.client_token(settings, env) == "explicit"
    assert auth.client_token(settings, {"LEDGER_API_TOKENS": "first,second"}) == "first"
    assert auth.client_token(settings, {"LEDGER_TOKEN": "  "}) == stored


def test_client_token_without_any_source_names_all_of_them(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        auth.client_token(settings_for(tmp_path), {})
    message = str(err.value)
    assert "LEDGER_TOKEN" in message
    assert "LEDGER_API_TOKENS" in message
    assert str(tmp_path / "data" / "api-token") in message


def test_token_matches_only_an_exact_accepted_token() -> None:
    accepted = ["alpha-token", "beta-token"]
    assert auth.token_matches("beta-token", accepted)
    assert auth.token_matches("alpha-token", accepted)
    for wrong in ("alpha-toke", "alpha-tokenx", "", "ALPHA-TOKEN", "béta"):
        assert not auth.token_matches(wrong, accepted)
    assert not auth.token_matches("alpha-token", [])
