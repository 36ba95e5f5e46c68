"""Tokens at their edges: the mint request at its bounds, and a correctly signed token whose claims
are malformed (only a bug, or a key shared with another issuer, signs one).

Each test names the rule it checks; with test_tokens.py they are what the mutation run
(`python -m tests.mutation ledger/tokens.py`) measures.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest

from ledger import tokens
from ledger.tokens import Grant, Scope, TokenError
from ledger.validate import INT32_MAX

NOW = 1_700_000_000
KID, SECRET = "k1", "old-secret-0123456789abcdef"
KEYRING = tokens.parse_keyring(f"{KID}:{SECRET}")


def signed(**claims: object) -> str:
    """A token carrying exactly `claims`, signed with the keyring's key as the ledger signs."""
    claims.setdefault("kid", KID)
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    head = f"{tokens.VERSION}.{payload}"
    mac = hmac.new(SECRET.encode(), head.encode(), hashlib.sha256).digest()
    return f"{head}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def test_the_mint_request_bounds_are_inclusive() -> None:
    """`max_attempt` runs from 0 (a run's first attempt) to the int4 maximum; `ttl_s` from 1 second."""
    assert tokens.check_request("run", "run-a", 0, 1) == (Scope.RUN, "run-a", 0, 1)
    assert tokens.check_request("run", "run-a", INT32_MAX, 60)[2] == INT32_MAX


def test_a_signed_token_with_well_formed_claims_verifies() -> None:
    """The claims a minted token carries, signed by a key of the ring, give the grant they name."""
    exp = NOW + 60
    assert tokens.verify(
        KEYRING, signed(scope="read", exp=exp, run=None, max_attempt=None), now_s=NOW
    ) == Grant(scope=Scope.READ, run_id=None, max_attempt=None, expires_at_s=exp, kid=KID)
    assert tokens.verify(KEYRING, signed(scope="run", exp=exp, run="r", max_attempt=0), now_s=NOW) == Grant(
        scope=Scope.RUN, run_id="r", max_attempt=0, expires_at_s=exp, kid=KID
    )


@pytest.mark.parametrize(
    "claims",
    [
        {"scope": "read", "exp": "later"},
        {"scope": "read", "exp": True},
        {"scope": "admin", "exp": NOW + 60},
        {"scope": "write", "exp": NOW + 60},
        {"scope": "run", "exp": NOW + 60, "run": 7, "max_attempt": 1},
        {"scope": "run", "exp": NOW + 60, "run": "r", "max_attempt": "1"},
        {"scope": "run", "exp": NOW + 60, "run": "r", "max_attempt": True},
        {"scope": "run", "exp": NOW + 60, "max_attempt": 1},
        {"scope": "read", "exp": NOW + 60, "run": "r"},
        {"scope": "read", "exp": NOW + 60, "max_attempt": 1},
    ],
)
def test_a_signed_token_with_malformed_claims_is_refused(claims: dict[str, object]) -> None:
    """A good signature vouches for the issuer, not for the claims: a non-integer expiry, a scope that
    is not minted, a run token without a string run or an integer attempt, or a read token that names
    a run or an attempt is `TokenError`, never a grant."""
    with pytest.raises(TokenError, match="malformed token"):
        tokens.verify(KEYRING, signed(**claims), now_s=NOW)


def test_every_minted_token_verifies() -> None:
    """Minting and verifying round-trip for any run id and attempt (the base64 parts lose their
    padding and get it back, whatever their length)."""
    for i in range(50):
        token, grant = tokens.mint(KEYRING, Scope.RUN, now_s=NOW, ttl_s=60, run_id=f"run-{i}", max_attempt=i)
        assert tokens.verify(KEYRING, token, now_s=NOW) == grant


def test_a_secret_may_contain_colons() -> None:
    """In `kid:secret` the key id ends at the first colon: the secret keeps any colon after it."""
    [(kid, secret)] = tokens.parse_keyring("k1:abc:def-0123456789abcdef").keys
    assert (kid, secret) == ("k1", b"abc:def-0123456789abcdef")


def test_a_secret_of_exactly_the_minimum_length_is_accepted() -> None:
    """A secret of `MIN_SECRET_LENGTH` characters is long enough; one less is refused."""
    exact = "s" * tokens.MIN_SECRET_LENGTH
    assert tokens.parse_keyring(f"k1:{exact}").keys == (("k1", exact.encode()),)
    with pytest.raises(ValueError, match="shorter than"):
        tokens.parse_keyring(f"k1:{exact[1:]}")


def test_a_token_signed_at_epoch_zero_is_expired_not_malformed() -> None:
    """`exp` runs from 0: a token whose time is long past is refused as expired, which tells the
    caller to mint a new one, not that the token is junk."""
    with pytest.raises(tokens.TokenExpired):
        tokens.verify(KEYRING, signed(scope="read", exp=0, run=None, max_attempt=None), now_s=NOW)
    with pytest.raises(TokenError, match="malformed"):
        tokens.verify(KEYRING, signed(scope="read", exp=-1, run=None, max_attempt=None), now_s=NOW)


def test_a_run_token_may_carry_the_highest_max_attempt() -> None:
    token = signed(scope="run", exp=NOW + 60, run="r", max_attempt=INT32_MAX)
    assert tokens.verify(KEYRING, token, now_s=NOW).max_attempt == INT32_MAX


def test_a_token_of_another_format_version_is_malformed_even_when_signed() -> None:
    payload = base64.urlsafe_b64encode(json.dumps({"kid": KID, "scope": "read", "exp": NOW + 60}).encode())
    head = f"v0.{payload.rstrip(b'=').decode()}"
    mac = hmac.new(SECRET.encode(), head.encode(), hashlib.sha256).digest()
    token = f"{head}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"
    with pytest.raises(TokenError, match="malformed"):
        tokens.verify(KEYRING, token, now_s=NOW)


@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_the_payload_is_bounded_at_its_limit_in_characters(extra: int) -> None:
    """The payload part may take `MAX_PAYLOAD_CHARS` characters: 3,072 bytes of JSON exactly."""
    claims: dict[str, object] = {"kid": KID, "scope": "read", "exp": NOW + 60, "pad": ""}
    room = tokens.MAX_PAYLOAD_CHARS * 3 // 4 - len(json.dumps(claims).encode()) + extra
    token = signed(**{**claims, "pad": "x" * room})
    assert len(token.split(".")[1]) - tokens.MAX_PAYLOAD_CHARS == (-1 if extra < 0 else 2 if extra else 0)
    if extra <= 0:
        assert tokens.verify(KEYRING, token, now_s=NOW).scope is Scope.READ
    else:
        with pytest.raises(TokenError, match="malformed"):
            tokens.verify(KEYRING, token, now_s=NOW)


# -- what a refusal says -----------------------------------------------------------------------------


def test_a_refusal_ends_by_naming_the_tokens_that_may() -> None:
    assert (
        tokens.READ_RUN.wanted("r1")
        == "this request needs a read token, a run token for run 'r1', or an admin token"
    )
    assert (
        tokens.READ_RUN.wanted()
        == "this request needs a read token, a run token for that run, or an admin token"
    )
    assert tokens.READ_ANY.wanted("r1") == "this request needs a read token or an admin token"
    assert tokens.WRITE_RUN.wanted("r1") == "this request needs a run token for run 'r1' or an admin token"
    assert tokens.UPLOAD_RUN.wanted(7) == "this request needs a run token for that run or an admin token"
    assert tokens.ADMIN_ONLY.wanted("r1") == "this request needs an admin token"


def test_a_refused_grant_is_told_which_token_the_run_needs() -> None:
    read = Grant(scope=Scope.READ, expires_at_s=NOW, kid=KID)
    assert tokens.refusal(read, tokens.WRITE_RUN, run_id="r1") == (
        "a read token may only read; this request needs a run token for run 'r1' or an admin token"
    )
    run = Grant(scope=Scope.RUN, run_id="r2", max_attempt=1, expires_at_s=NOW, kid=KID)
    assert tokens.refusal(run, tokens.WRITE_RUN, run_id="r1") == (
        "a run token for run 'r2' (attempts up to 1) may not touch run 'r1'; "
        "this request needs a run token for run 'r1' or an admin token"
    )
    assert tokens.refusal(run, tokens.UPLOAD_RUN, run_id="r2", attempt=2) == (
        "a run token for run 'r2' (attempts up to 1) may not upload as producer attempt 2 "
        "(a run token minted with a higher max_attempt may)"
    )
