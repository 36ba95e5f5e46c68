"""Minted tokens this process has verified lately, so a client's every request is not verified again.

A reporter sends the same run token on every upload; verifying it (base64, JSON, an HMAC) costs
more than the rest of authorization together. A token's grant cannot change: it is signed, and
this process's keyring is fixed for its life. So a token that verified is remembered, for at most
`hold_s`, and its grant is given again without the work, but its expiry is checked on every use:
a remembered token that has expired is forgotten and verified afresh, which refuses it exactly as
a first use would.

Only tokens that verified are remembered (a forged or broken one is never kept, so it cannot fill
the memory), at most `max_entries` of them; past that the oldest goes.
"""

from __future__ import annotations

from typing import Final

from ledger import tokens
from ledger.tokens import Grant, Keyring

__all__ = [
    "VerifiedTokens",
]

_DEFAULT_HOLD_S: Final = 60.0
_DEFAULT_MAX_ENTRIES: Final = 4096


class VerifiedTokens:
    """`verify(token, now_s)`: `tokens.verify` against `keyring`, remembering what verified."""

    def __init__(
        self,
        keyring: Keyring,
        *,
        hold_s: float = _DEFAULT_HOLD_S,
        max_entries: int = _DEFAULT_MAX_ENTRIES,
    ) -> None:
        self.keyring = keyring
        self.hold_s = hold_s
        self.max_entries = max_entries
        # token -> (its grant, until when it may be given without verifying); oldest first.
        self._held: dict[str, tuple[Grant, float]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def verify(self, token: str, *, now_s: float) -> Grant:
        """The token's grant; `tokens.TokenError` (`TokenExpired`) as `tokens.verify` raises it."""
        held = self._held.get(token)
        if held is not None:
            grant, until_s = held
            expires_at_s = grant.expires_at_s
            if now_s < until_s and expires_at_s is not None and now_s < expires_at_s:
                return grant
            del self._held[token]
        grant = tokens.verify(self.keyring, token, now_s=now_s)
        if len(self._held) >= self.max_entries:
            del self._held[next(iter(self._held))]
        self._held[token] = (grant, now_s + self.hold_s)
        return grant
