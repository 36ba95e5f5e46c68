"""Remembered token verifications (`ledger.service.verified_tokens`): a remembered token is still
refused once it expires, a token that did not verify is never remembered, and memory is bounded."""

from __future__ import annotations

import pytest

from ledger import tokens
from ledger.service.verified_tokens import VerifiedTokens

KEYRING = tokens.parse_keyring(tokens.generate_key())
NOW = 1_800_000_000.0


def run_token(ttl_s: int = 60, run_id: str = "run-1", keyring: tokens.Keyring = KEYRING) -> tuple[str, int]:
    token, grant = tokens.mint(
        keyring, tokens.Scope.RUN, now_s=NOW, ttl_s=ttl_s, run_id=run_id, max_attempt=2
    )
    assert grant.expires_at_s is not None
    return token, grant.expires_at_s


def test_a_remembered_token_is_refused_once_it_expires() -> None:
    verified = VerifiedTokens(KEYRING, hold_s=3600)
    token, expires_at_s = run_token(ttl_s=60)
    grant = verified.verify(token, now_s=NOW)
    assert (grant.scope, grant.run_id, grant.max_attempt) == (tokens.Scope.RUN, "run-1", 2)
    assert len(verified) == 1
    # Remembered, and still given while unexpired...
    assert verified.verify(token, now_s=expires_at_s - 0.001) == grant
    # ...but refused from its expiry on, as a first use would be, although held far longer.
    for now_s in (expires_at_s, expires_at_s + 1):
        with pytest.raises(tokens.TokenExpired):
            verified.verify(token, now_s=now_s)
    assert len(verified) == 0


def test_only_tokens_that_verified_are_remembered() -> None:
    verified = VerifiedTokens(KEYRING)
    forged, _ = run_token(keyring=tokens.parse_keyring(tokens.generate_key()))
    expired, _ = run_token(ttl_s=1)
    for token, refusal in (
        (forged, tokens.TokenError),
        (expired, tokens.TokenExpired),
        ("v1.x.y", tokens.TokenError),
    ):
        for _ in range(2):
            with pytest.raises(refusal):
                verified.verify(token, now_s=NOW + 5)
    assert len(verified) == 0


def test_a_remembered_token_is_verified_again_after_the_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = tokens.verify

    def counting(keyring: tokens.Keyring, token: str, *, now_s: float) -> tokens.Grant:
        calls.append(token)
        return real(keyring, token, now_s=now_s)

    monkeypatch.setattr(tokens, "verify", counting)
    verified = VerifiedTokens(KEYRING, hold_s=10)
    token, _ = run_token(ttl_s=3600)
    for now_s in (NOW, NOW + 5, NOW + 9.9):
        verified.verify(token, now_s=now_s)
    assert len(calls) == 1
    verified.verify(token, now_s=NOW + 10)
    assert len(calls) == 2


def test_memory_is_bounded_oldest_first() -> None:
    verified = VerifiedTokens(KEYRING, max_entries=3)
    minted = [run_token(run_id=f"run-{n}")[0] for n in range(5)]
    for token in minted:
        verified.verify(token, now_s=NOW)
    assert len(verified) == 3
    # The newest are held; the oldest went (verifying it again still works).
    assert verified.verify(minted[0], now_s=NOW).run_id == "run-0"
    assert len(verified) == 3
