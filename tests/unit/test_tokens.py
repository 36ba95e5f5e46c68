"""Scoped tokens (ledger.tokens): signing and verifying, expiry, tampering, key ids and rotation,
the mint request's checks, what each scope may do; and the keyring's configuration (ledger.auth)."""

from __future__ import annotations

import base64
import hmac
import json
import stat
from pathlib import Path

import pytest

from ledger import auth, tokens
from ledger.config import ConfigError
from ledger.tokens import (
    ADMIN,
    ADMIN_ONLY,
    OPEN_RUN,
    READ_ANY,
    READ_RUN,
    UPLOAD_RUN,
    WRITE_RUN,
    Grant,
    Scope,
    TokenError,
    TokenExpired,
)
from ledger.validate import InvalidInput

NOW = 1_700_000_000.0
OLD = tokens.parse_keyring("k1:old-secret-0123456789abcdef")
NEW = tokens.parse_keyring("k2:new-secret-0123456789abcdef")
ROTATED = tokens.parse_keyring("k2:new-secret-0123456789abcdef,k1:old-secret-0123456789abcdef")


def run_token(keyring: tokens.Keyring = OLD, *, ttl_s: int = 60, run: str = "run-a", attempt: int = 2) -> str:
    token, _ = tokens.mint(keyring, Scope.RUN, now_s=NOW, ttl_s=ttl_s, run_id=run, max_attempt=attempt)
    return token


def claims_of(token: str) -> dict[str, object]:
    payload = token.split(".")[1]
    decoded: dict[str, object] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return decoded


def with_claims(token: str, **changes: object) -> str:
    """The token with its payload changed and the old signature kept (a forgery)."""
    version, _, signature = token.split(".")
    claims = {**claims_of(token), **changes}
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{version}.{payload}.{signature}"


# -- sign and verify ----------------------------------------------------------------------------


def test_a_minted_run_token_verifies_to_the_grant_it_was_minted_with() -> None:
    token, minted = tokens.mint(OLD, Scope.RUN, now_s=NOW, ttl_s=60, run_id="run-a", max_attempt=2)
    assert tokens.looks_minted(token)
    assert tokens.verify(OLD, token, now_s=NOW) == minted
    assert minted == Grant(
        scope=Scope.RUN, run_id="run-a", max_attempt=2, expires_at_s=int(NOW) + 60, kid="k1"
    )
    assert claims_of(token) == {
        "exp": int(NOW) + 60,
        "kid": "k1",
        "max_attempt": 2,
        "run": "run-a",
        "scope": "run",
    }


def test_a_read_token_carries_no_run() -> None:
    token, minted = tokens.mint(OLD, Scope.READ, now_s=NOW, ttl_s=60)
    assert tokens.verify(OLD, token, now_s=NOW) == Grant(
        scope=Scope.READ, run_id=None, max_attempt=None, expires_at_s=int(NOW) + 60, kid="k1"
    )
    assert minted.run_id is None and minted.max_attempt is None


def test_admin_tokens_are_never_minted_and_run_tokens_need_their_run() -> None:
    with pytest.raises(ValueError):
        tokens.mint(OLD, Scope.ADMIN, now_s=NOW)
    with pytest.raises(ValueError):
        tokens.mint(OLD, Scope.RUN, now_s=NOW, run_id="run-a")
    with pytest.raises(ValueError):
        tokens.mint(OLD, Scope.READ, now_s=NOW, run_id="run-a", max_attempt=1)


def test_a_run_id_with_any_characters_survives_the_round_trip() -> None:
    run = 'ünïcode run · with spaces and "quotes" and a:colon'
    token = run_token(run=run)
    assert tokens.verify(OLD, token, now_s=NOW).run_id == run
    assert token.isascii() and " " not in token


def test_the_signature_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(tokens.hmac, "compare_digest", spy)
    token = run_token()
    tokens.verify(OLD, token, now_s=NOW)
    signature = base64.urlsafe_b64decode(token.split(".")[2] + "=")
    assert any(signature in pair for pair in compared)


# -- expiry -------------------------------------------------------------------------------------


def test_a_token_is_valid_up_to_the_second_before_exp_and_expired_from_exp_on() -> None:
    token = run_token(ttl_s=60)
    assert tokens.verify(OLD, token, now_s=NOW + 59.999).run_id == "run-a"
    with pytest.raises(TokenExpired, match="expired"):
        tokens.verify(OLD, token, now_s=NOW + 60)
    with pytest.raises(TokenExpired):
        tokens.verify(OLD, token, now_s=NOW + 10**6)


def test_expiry_is_checked_only_after_the_signature() -> None:
    # A forged, long-expired token is "invalid", never "expired": nothing unsigned is believed.
    forged = with_claims(run_token(), exp=1)
    with pytest.raises(TokenError) as err:
        tokens.verify(OLD, forged, now_s=NOW)
    assert not isinstance(err.value, TokenExpired)


# -- tampering ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {"run": "run-b"},
        {"max_attempt": 2_147_483_647},
        {"exp": int(NOW) + 10**8},
        {"scope": "read"},
        {"scope": "admin"},
    ],
)
def test_a_changed_claim_breaks_the_signature(changes: dict[str, object]) -> None:
    with pytest.raises(TokenError, match="signature"):
        tokens.verify(OLD, with_claims(run_token(), **changes), now_s=NOW)


def test_a_changed_signature_or_a_token_signed_with_another_secret_is_refused() -> None:
    token = run_token()
    version, payload, signature = token.split(".")
    flipped = ("A" if signature[0] != "A" else "B") + signature[1:]
    with pytest.raises(TokenError):
        tokens.verify(OLD, f"{version}.{payload}.{flipped}", now_s=NOW)
    same_kid_other_secret = tokens.parse_keyring("k1:another-secret-0123456789")
    with pytest.raises(TokenError, match="signature"):
        tokens.verify(same_kid_other_secret, token, now_s=NOW)


@pytest.mark.parametrize(
    "junk",
    [
        "",
        "v1",
        "v1..",
        "v1.e30.",
        "v2.e30.AAAA",
        "v1.!!!.AAAA",
        "v1.bm90IGpzb24.AAAA",
        "a.b.c.d",
        "v1.W10.AAAA",
    ],
)
def test_malformed_tokens_are_refused_as_invalid(junk: str) -> None:
    with pytest.raises(TokenError) as err:
        tokens.verify(OLD, junk, now_s=NOW)
    assert not isinstance(err.value, TokenExpired)


# -- key ids and rotation -----------------------------------------------------------------------


def test_a_token_of_an_unknown_kid_is_refused_naming_the_kid() -> None:
    with pytest.raises(TokenError, match="'k1'"):
        tokens.verify(NEW, run_token(OLD), now_s=NOW)


def test_rotation_the_new_key_signs_and_the_old_one_verifies_while_it_is_listed() -> None:
    old_token = run_token(OLD)
    assert tokens.verify(ROTATED, old_token, now_s=NOW).kid == "k1"
    new_token = run_token(ROTATED)
    assert claims_of(new_token)["kid"] == "k2"
    assert tokens.verify(ROTATED, new_token, now_s=NOW).kid == "k2"
    assert tokens.verify(NEW, new_token, now_s=NOW).run_id == "run-a"
    # Dropping the old key revokes what it signed.
    with pytest.raises(TokenError, match="unknown key id"):
        tokens.verify(NEW, old_token, now_s=NOW)
    # A replica still on the old ring does not know the new key yet.
    with pytest.raises(TokenError):
        tokens.verify(OLD, new_token, now_s=NOW)


def test_a_kid_cannot_be_swapped_to_pick_another_key() -> None:
    with pytest.raises(TokenError, match="signature"):
        tokens.verify(ROTATED, with_claims(run_token(OLD), kid="k2"), now_s=NOW)


# -- keyring configuration ----------------------------------------------------------------------


def test_parse_keyring_forms() -> None:
    assert ROTATED.kids == ("k2", "k1")
    assert ROTATED.signing == ("k2", b"new-secret-0123456789abcdef")
    bare = tokens.parse_keyring("  a-bare-secret-of-some-length  ")
    assert bare.kids == (tokens.derived_kid("a-bare-secret-of-some-length"),)
    assert tokens.parse_keyring(tokens.generate_key()).signing[0].startswith("k")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no key"),
        (" , ", "no key"),
        ("k1:short", "shorter than 16"),
        ("bad kid!:0123456789abcdef01", "key id"),
        (":0123456789abcdef01", "key id"),
        ("k1:0123456789abcdef01,k1:fedcba9876543210fe", "twice"),
        ("bare-secret-0123456789,k2:0123456789abcdef01", "kid:secret"),
    ],
)
def test_parse_keyring_refuses_what_would_be_weak_or_ambiguous(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        tokens.parse_keyring(text)


def test_the_secret_variable_wins_and_a_bad_one_is_a_config_error_naming_it(tmp_path: Path) -> None:
    keys = auth.token_keys(tmp_path, {"LEDGER_TOKEN_SECRET": "k9:0123456789abcdef01"})
    assert keys.keyring.kids == ("k9",)
    assert not (tmp_path / "token-secret").exists()
    with pytest.raises(ConfigError, match="LEDGER_TOKEN_SECRET"):
        auth.token_keys(tmp_path, {"LEDGER_TOKEN_SECRET": "k9:short"})


def test_without_the_variable_a_private_secret_file_is_generated_once(tmp_path: Path) -> None:
    first = auth.token_keys(tmp_path / "data", {})
    assert first.created
    path = tmp_path / "data" / "token-secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = auth.token_keys(tmp_path / "data", {})
    assert not again.created
    assert again.keyring == first.keyring
    # A token minted by one process verifies in another reading the same file.
    token = run_token(first.keyring)
    assert tokens.verify(again.keyring, token, now_s=NOW).run_id == "run-a"


# -- the mint request ---------------------------------------------------------------------------


def test_check_request_normalises_a_good_request() -> None:
    assert tokens.check_request("run", "run-a", 3, 60) == (Scope.RUN, "run-a", 3, 60)
    assert tokens.check_request("read", None, None, tokens.MAX_TTL_S) == (
        Scope.READ,
        None,
        None,
        tokens.MAX_TTL_S,
    )


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("admin", None, None, 60), "scope"),
        (("write", None, None, 60), "scope"),
        (("read", "run-a", None, 60), "run_id"),
        (("read", None, 1, 60), "max_attempt"),
        (("run", None, 1, 60), "run_id"),
        (("run", "run-a", None, 60), "max_attempt"),
        (("run", "a/b", 1, 60), "run_id"),
        (("run", "", 1, 60), "run_id"),
        (("run", "run-a", -1, 60), "max_attempt"),
        (("run", "run-a", 2**31, 60), "max_attempt"),
        (("run", "run-a", True, 60), "max_attempt"),
        (("read", None, None, 0), "ttl_s"),
        (("read", None, None, tokens.MAX_TTL_S + 1), "ttl_s"),
    ],
)
def test_check_request_names_the_bad_field(args: tuple[str, object, object, object], field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        tokens.check_request(*args)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("24h", 86400), ("7d", 604800)]
)
def test_ttl_seconds(text: str, seconds: int) -> None:
    assert tokens.ttl_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "1.5h", "-1h", "24 hours", "1w"])
def test_ttl_seconds_refuses_other_forms(text: str) -> None:
    with pytest.raises(ValueError):
        tokens.ttl_seconds(text)


# -- what each scope may do ---------------------------------------------------------------------

READ = Grant(scope=Scope.READ, expires_at_s=1, kid="k")
RUN_A = Grant(scope=Scope.RUN, run_id="run-a", max_attempt=2, expires_at_s=1, kid="k")


@pytest.mark.parametrize("need", [ADMIN_ONLY, READ_ANY, READ_RUN, WRITE_RUN, OPEN_RUN, UPLOAD_RUN])
def test_admin_may_everything(need: tokens.Need) -> None:
    assert tokens.refusal(ADMIN, need, run_id="anything", attempt=10**9) is None


def test_read_may_only_read() -> None:
    assert tokens.refusal(READ, READ_ANY) is None
    assert tokens.refusal(READ, READ_RUN, run_id="any-run") is None
    for need in (ADMIN_ONLY, WRITE_RUN, OPEN_RUN, UPLOAD_RUN):
        reason = tokens.refusal(READ, need, run_id="run-a", attempt=1)
        assert reason is not None and "read token" in reason


def test_run_may_only_its_own_run() -> None:
    for need in (READ_RUN, WRITE_RUN, OPEN_RUN):
        assert tokens.refusal(RUN_A, need, run_id="run-a") is None
        reason = tokens.refusal(RUN_A, need, run_id="run-b")
        assert reason is not None and "'run-a'" in reason and "'run-b'" in reason
    for need in (ADMIN_ONLY, READ_ANY):
        reason = tokens.refusal(RUN_A, need, run_id="run-a")
        assert reason is not None and "run token" in reason


def test_run_uploads_only_up_to_its_attempt_and_must_name_it() -> None:
    assert tokens.refusal(RUN_A, UPLOAD_RUN, run_id="run-a", attempt=1) is None
    assert tokens.refusal(RUN_A, UPLOAD_RUN, run_id="run-a", attempt=2) is None
    assert tokens.refusal(RUN_A, UPLOAD_RUN, run_id="run-a", attempt=2.0) is None
    for attempt in (3, 2.5, None, "2", True):
        assert tokens.refusal(RUN_A, UPLOAD_RUN, run_id="run-a", attempt=attempt) is not None
    assert tokens.refusal(RUN_A, UPLOAD_RUN, run_id="run-b", attempt=1) is not None


# -- hostile payloads: every one a TokenError, never anything else --------------------------------


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def signed_payload(payload: bytes, keyring: tokens.Keyring = OLD) -> str:
    """A token of `payload` signed with the keyring's key, whatever the payload holds."""
    _, secret = keyring.signing
    head = f"v1.{_b64(payload)}"
    signature = hmac.new(secret, head.encode(), "sha256").digest()
    return f"{head}.{_b64(signature)}"


def good_claims(**changes: object) -> bytes:
    claims = {"exp": int(NOW) + 60, "kid": "k1", "max_attempt": 2, "run": "run-a", "scope": "run", **changes}
    return json.dumps(claims).encode()


@pytest.mark.parametrize(
    "payload",
    [
        b'{"kid":"\\ud800","exp":1}',  # a lone surrogate key id
        b'{"kid":"k1\\n","exp":1}',  # a key id that `$` would let through
        b'{"kid":"k\xed\xa0\x80","exp":1}',  # an encoded surrogate: not UTF-8
        b"\xff\xfe{\x00}\x00",
        '{"kid": "k1"}'.encode("utf-16"),
        b'\xef\xbb\xbf{"kid": "k1"}',
        b'{"kid":' + b"[" * 2000 + b"]" * 2000 + b"}",
        b'{"kid":"k1","x":' + b'{"a":' * 2000 + b"1" + b"}" * 2000 + b"}",
        b'{"kid":"k1","exp":NaN}',
        b"[1, 2]",
        b"null",
        b"",
    ],
)
def test_a_malformed_payload_is_a_token_error_signed_or_not(payload: bytes) -> None:
    for token in (f"v1.{_b64(payload)}.AAAA", signed_payload(payload)):
        with pytest.raises(TokenError):
            tokens.verify(OLD, token, now_s=NOW)


@pytest.mark.parametrize(
    "changes",
    [
        {"exp": 10**30},
        {"exp": tokens.MAX_EXP_S + 1},
        {"exp": -1},
        {"exp": 1e400},
        {"exp": "soon"},
        {"exp": True},
        {"max_attempt": 2**31},
        {"max_attempt": -1},
        {"run": ["run-a"]},
        {"run": "a/b"},
        {"run": "\ud800"},
        {"run": ""},
        {"scope": "admin", "run": None, "max_attempt": None},
        {"scope": {"a": [1]}},
        {"kid": 7},
    ],
)
def test_claims_of_the_wrong_type_or_out_of_range_are_refused_though_signed(
    changes: dict[str, object],
) -> None:
    payload = json.dumps({**json.loads(good_claims()), **changes}).encode()
    with pytest.raises(TokenError):
        tokens.verify(OLD, signed_payload(payload), now_s=NOW)


def test_the_last_valid_expiry_is_accepted() -> None:
    grant = tokens.verify(OLD, signed_payload(good_claims(exp=tokens.MAX_EXP_S)), now_s=NOW)
    assert grant.expires_at_s == tokens.MAX_EXP_S


def test_a_payload_past_the_size_bound_is_refused_before_decoding() -> None:
    payload = "A" * tokens.MAX_PAYLOAD_CHARS
    with pytest.raises(TokenError, match="malformed"):
        tokens.verify(OLD, f"v1.{payload}A.AAAA", now_s=NOW)
    # The longest run id, in four-byte characters, still fits: the bound is above every real token.
    run = "🙂" * 512
    token, _ = tokens.mint(OLD, Scope.RUN, now_s=NOW, ttl_s=60, run_id=run, max_attempt=2)
    assert len(token.split(".")[1]) < tokens.MAX_PAYLOAD_CHARS
    assert tokens.verify(OLD, token, now_s=NOW).run_id == run
