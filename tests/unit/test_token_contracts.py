"""What tokens promise beyond one process: the key id derived from a bare secret is the same on
every replica and every version (a rolling upgrade verifies the tokens the old version minted),
and a refused caller reads which token it needs."""

from __future__ import annotations

import hashlib

import pytest

from ledger import tokens
from ledger.errors import InvalidInput, TokenError, TokenExpired


def test_the_key_id_of_a_bare_secret_is_fixed_across_replicas_and_versions() -> None:
    """`h` and the first 8 hex digits of the secret's SHA-256: a replica (or the next version) that
    derived it otherwise would refuse every token minted with the same secret."""
    assert (
        tokens.derived_kid("a-bare-secret-of-some-length")
        == "h" + (hashlib.sha256(b"a-bare-secret-of-some-length").hexdigest()[:8])
    )
    assert tokens.derived_kid("a-bare-secret-of-some-length") == "h05ae811f"


def test_a_read_token_refused_a_write_is_told_which_token_it_needs() -> None:
    """The refusal is what the 403 says to a person: the scope's limit, then the tokens that may."""
    read = tokens.Grant(scope=tokens.Scope.READ, expires_at_s=None, kid="k")
    write_any = tokens.Need(read=False)
    assert tokens.refusal(read, write_any) == (
        "a read token may only read; this request needs an admin token"
    )


def refused(call: object, *args: object, error: type[Exception] = ValueError, **kwargs: object) -> str:
    assert callable(call)
    with pytest.raises(error) as caught:
        call(*args, **kwargs)
    return str(caught.value)


def test_a_keyring_that_cannot_be_used_is_refused_saying_why() -> None:
    """What an operator reads when LEDGER_TOKEN_KEYS (or its file) is wrong."""
    secret = "s" * tokens.MIN_SECRET_LENGTH
    assert refused(tokens.parse_keyring, " , ") == "holds no key (expected kid:secret[,kid:secret...])"
    assert (
        refused(tokens.parse_keyring, f"a:{secret},{secret}") == "with several keys, each must be kid:secret"
    )
    assert (
        refused(tokens.parse_keyring, f"a b:{secret}") == "key id 'a b' must be 1 to 64 of A-Z a-z 0-9 _ . -"
    )
    assert refused(tokens.parse_keyring, "a:short") == (
        f"the secret of key 'a' is shorter than {tokens.MIN_SECRET_LENGTH} characters"
    )
    assert refused(tokens.parse_keyring, f"a:{secret},a:{secret}x") == "key id 'a' is listed twice"


def test_a_mint_request_is_refused_naming_the_field_and_the_rule() -> None:
    def check(*args: object) -> str:
        return refused(tokens.check_request, *args, error=InvalidInput)

    assert (
        check("admin", None, None, 60)
        == "scope: must be read or run (admin tokens are configured, not minted)"
    )
    assert check("read", "r1", None, 60) == "run_id: only a run token names a run (scope run)"
    assert check("read", None, 1, 60) == "max_attempt: only a run token names a run (scope run)"
    assert check("run", None, 1, 60) == "run_id: a run token needs the run it is for"
    assert check("run", "r1", None, 60) == "max_attempt: a run token needs the highest attempt it may use"
    assert tokens.check_request("run", "r1", 0, 60)[1:] == ("r1", 0, 60)


def test_a_token_that_does_not_verify_is_refused_saying_why() -> None:
    keyring = tokens.parse_keyring("k1:" + "s" * tokens.MIN_SECRET_LENGTH)
    other = tokens.parse_keyring("k2:" + "t" * tokens.MIN_SECRET_LENGTH)
    token, _ = tokens.mint(keyring, tokens.Scope.READ, now_s=1_000, ttl_s=60)
    assert refused(tokens.verify, other, token, error=TokenError, now_s=1_000) == (
        "token signed with an unknown key id 'k1' (rotated out?)"
    )
    forged = tokens.parse_keyring("k1:" + "u" * tokens.MIN_SECRET_LENGTH)
    assert (
        refused(tokens.verify, forged, token, error=TokenError, now_s=1_000)
        == "token signature does not match"
    )
    assert refused(tokens.verify, keyring, token, error=TokenExpired, now_s=2_000) == (
        "token expired at epoch second 1060"
    )
    assert refused(tokens.verify, keyring, "not.a.token", error=TokenError, now_s=1_000) == "malformed token"
    assert (
        refused(tokens.mint, keyring, tokens.Scope.ADMIN, now_s=1)
        == "admin tokens are configured, not minted"
    )
    assert refused(tokens.mint, keyring, tokens.Scope.RUN, now_s=1) == (
        "a run token needs run_id and max_attempt, and only a run token has them"
    )


def test_a_duration_is_seconds_minutes_hours_or_days() -> None:
    assert [tokens.ttl_seconds(t) for t in ("90", " 90s ", "30m", "24h", "7d")] == [
        90,
        90,
        1800,
        86400,
        604800,
    ]
    assert refused(tokens.ttl_seconds, "1w") == "'1w' is not a duration like 90s, 30m, 24h or 7d"
