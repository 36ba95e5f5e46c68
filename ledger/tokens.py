"""Scoped, expiring tokens: what they say, how they are signed and checked, and what each may do.

Pure: no I/O, no clock of its own (the caller passes `now`), nothing from the rest of `ledger`
beyond `ledger.validate`, so every rule here is tested exhaustively without a service.

Design note.

- **Three scopes.** `admin` (the service's configured API tokens; they are never minted), `read`
  (every read, nothing that writes) and `run` (one run id and a highest producer attempt: the
  worker's own run, nothing else). `Grant` is what a verified credential may do; `refusal` decides
  a request against a route's `Need` and says why it is refused, naming the scope.
- **Self-contained.** A minted token is `v1.<payload>.<signature>`: the payload is compact JSON
  `{"exp", "kid", "max_attempt", "run", "scope"}` in unpadded base64url, the signature
  HMAC-SHA256 over `v1.<payload>` with the key named by `kid`, compared in constant time. Any
  replica holding the key verifies it without a database read.
- **Rotation by key id.** A `Keyring` holds `kid:secret` pairs: the first signs, every one
  verifies. Put a new key first and keep the old one listed until the tokens it signed have expired
  (their TTL at most); dropping a key revokes everything it signed, at once, on every replica
  that reloads the ring. There is no deny list: tokens are short-lived and bound to one run, and a
  list every replica must read on every request is the database read this design avoids.
- **Expiry** is `exp` in epoch seconds: valid while `now < exp`.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from typing import Final, Literal

from ledger import validate
from ledger.errors import TokenError, TokenExpired

VERSION: Final = "v1"
# A minted token's TTL: long enough for a long run, short enough that rotation is the revocation.
DEFAULT_TTL_S: Final = 24 * 3600
MAX_TTL_S: Final = 30 * 24 * 3600
MIN_SECRET_LENGTH: Final = 16
# The longest payload a minted token can have (a run id of 512 four-byte characters and the other
# claims, in base64url), with room to spare; a longer one is not ours and is never decoded.
MAX_PAYLOAD_CHARS: Final = 4096
# `exp` is epoch seconds a `datetime` can hold (year 9999): one past it is not a time.
MAX_EXP_S: Final = validate.MAX_EPOCH_MS // 1000
_KID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_B64URL = re.compile(r"[A-Za-z0-9_-]*")


class Scope(enum.StrEnum):
    ADMIN = "admin"
    READ = "read"
    RUN = "run"


_MINTABLE: Final = (Scope.READ, Scope.RUN)


@dataclass(frozen=True, kw_only=True)
class Grant:
    """What a verified credential may do. `run_id`/`max_attempt` are set for (and only for) `run`."""

    scope: Scope
    run_id: str | None = None
    max_attempt: int | None = None
    expires_at_s: int | None = None
    kid: str | None = None

    def describe(self) -> str:
        """The scope in words, for error messages."""
        if self.scope is Scope.RUN:
            return f"run token for run {self.run_id!r} (attempts up to {self.max_attempt})"
        return f"{self.scope.value} token"


ADMIN: Final = Grant(scope=Scope.ADMIN)


# -- keys -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Keyring:
    """`(kid, secret)` pairs: the first signs, all verify."""

    keys: tuple[tuple[str, bytes], ...]

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError("a keyring needs at least one key")

    @property
    def signing(self) -> tuple[str, bytes]:
        return self.keys[0]

    def secret(self, kid: str) -> bytes | None:
        for known, secret in self.keys:
            if hmac.compare_digest(known.encode(), kid.encode()):
                return secret
        return None

    @property
    def kids(self) -> tuple[str, ...]:
        return tuple(kid for kid, _ in self.keys)


def derived_kid(secret: str) -> str:
    """The key id of a secret given without one: a short digest, so a new secret gets a new id."""
    return "h" + hashlib.sha256(secret.encode()).hexdigest()[:8]


def generate_key() -> str:
    """A fresh `kid:secret` entry (32 random bytes), as stored when no secret is configured."""
    return f"k{secrets.token_hex(4)}:{secrets.token_urlsafe(32)}"


def parse_keyring(text: str) -> Keyring:
    """A keyring from `kid:secret[,kid:secret...]` (or one bare secret, whose kid is derived).

    Raises `ValueError` with a one-line reason (blank, a short secret, a bad or repeated kid).
    """
    entries = [part.strip() for part in text.split(",") if part.strip()]
    if not entries:
        raise ValueError("holds no key (expected kid:secret[,kid:secret...])")
    keys: list[tuple[str, bytes]] = []
    for entry in entries:
        kid, sep, secret = entry.partition(":")
        if not sep:
            if len(entries) > 1:
                raise ValueError("with several keys, each must be kid:secret")
            kid, secret = derived_kid(entry), entry
        kid, secret = kid.strip(), secret.strip()
        if not _KID.match(kid):
            raise ValueError(f"key id {kid!r} must be 1 to 64 of A-Z a-z 0-9 _ . -")
        if len(secret) < MIN_SECRET_LENGTH:
            raise ValueError(f"the secret of key {kid!r} is shorter than {MIN_SECRET_LENGTH} characters")
        if kid in (k for k, _ in keys):
            raise ValueError(f"key id {kid!r} is listed twice")
        keys.append((kid, secret.encode()))
    return Keyring(tuple(keys))


# -- minting and verifying ------------------------------------------------------------------------


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not _B64URL.fullmatch(text):
        raise TokenError("malformed token")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise TokenError("malformed token") from None


def _signature(secret: bytes, signed: str) -> bytes:
    return hmac.new(secret, signed.encode("ascii"), hashlib.sha256).digest()


def check_request(
    scope: str, run_id: object, max_attempt: object, ttl_s: object
) -> tuple[Scope, str | None, int | None, int]:
    """The mint request, validated: `InvalidInput` naming the field, else the normalised values."""
    if scope not in [s.value for s in _MINTABLE]:
        raise validate.InvalidInput("scope", "must be read or run (admin tokens are configured, not minted)")
    kind = Scope(scope)
    ttl = validate.required_integer("ttl_s", ttl_s, minimum=1, maximum=MAX_TTL_S)
    if kind is Scope.READ:
        for name, value in (("run_id", run_id), ("max_attempt", max_attempt)):
            if value is not None:
                raise validate.InvalidInput(name, "only a run token names a run (scope run)")
        return kind, None, None, ttl
    if run_id is None:
        raise validate.InvalidInput("run_id", "a run token needs the run it is for")
    if max_attempt is None:
        raise validate.InvalidInput("max_attempt", "a run token needs the highest attempt it may use")
    run = validate.run_id("run_id", run_id)
    attempt = validate.required_integer("max_attempt", max_attempt, maximum=validate.INT32_MAX)
    return kind, run, attempt, ttl


def mint(
    keyring: Keyring,
    scope: Scope,
    *,
    now_s: float,
    ttl_s: int = DEFAULT_TTL_S,
    run_id: str | None = None,
    max_attempt: int | None = None,
) -> tuple[str, Grant]:
    """A signed token with the keyring's signing key, and the grant it carries.

    Arguments are assumed checked (`check_request`); a run token without its run is a bug here.
    """
    if scope not in _MINTABLE:
        raise ValueError(f"{scope.value} tokens are configured, not minted")
    if (scope is Scope.RUN) != (run_id is not None and max_attempt is not None):
        raise ValueError("a run token needs run_id and max_attempt, and only a run token has them")
    kid, secret = keyring.signing
    exp = int(now_s) + ttl_s
    claims = {"exp": exp, "kid": kid, "max_attempt": max_attempt, "run": run_id, "scope": scope.value}
    payload = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode())
    signed = f"{VERSION}.{payload}"
    token = f"{signed}.{_b64(_signature(secret, signed))}"
    return token, Grant(scope=scope, run_id=run_id, max_attempt=max_attempt, expires_at_s=exp, kid=kid)


def looks_minted(token: str) -> bool:
    return token.startswith(VERSION + ".")


def verify(keyring: Keyring, token: str, *, now_s: float) -> Grant:
    """The grant a minted token carries; `TokenError` unless it is well-formed, signed by a key of
    the ring and, last, unexpired (`TokenExpired`). The signature is checked before anything in
    the payload but its key id is trusted.

    Whatever a client sends is refused as a `TokenError`, never raised as anything else: the
    payload must be strict UTF-8 JSON of bounded size, one flat object, and every claim of its
    type and within its range."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != VERSION or len(parts[1]) > MAX_PAYLOAD_CHARS:
        raise TokenError("malformed token")
    claims = _claims(_unb64(parts[1]))
    kid = claims.get("kid")
    if not isinstance(kid, str) or not _KID.fullmatch(kid):
        raise TokenError("malformed token")
    secret = keyring.secret(kid)
    if secret is None:
        raise TokenError(f"token signed with an unknown key id {kid!r} (rotated out?)")
    if not hmac.compare_digest(_signature(secret, f"{parts[0]}.{parts[1]}"), _unb64(parts[2])):
        raise TokenError("token signature does not match")
    grant = _grant(claims, kid)
    assert grant.expires_at_s is not None
    if now_s >= grant.expires_at_s:
        raise TokenExpired(f"token expired at epoch second {grant.expires_at_s}")
    return grant


def _claims(payload: bytes) -> dict[str, object]:
    """The payload's claims: a flat JSON object of scalars in strict UTF-8, else `TokenError`.
    The payload is bounded (`MAX_PAYLOAD_CHARS`), so a deeply nested one costs a bounded parse
    that ends in `RecursionError`."""
    try:
        # NaN and Infinity parse to floats, which the scalar check below refuses as any float.
        claims = json.loads(payload.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise TokenError("malformed token") from None
    if not isinstance(claims, dict) or not all(
        value is None or isinstance(value, str | int) for value in claims.values()
    ):
        raise TokenError("malformed token")
    return claims


def _grant(claims: dict[str, object], kid: str) -> Grant:
    # Signed by us, so only a bug (or a key shared with another issuer) gets here with junk; it is
    # refused all the same, claim by claim, as a token that is not ours.
    scope, run, exp = claims.get("scope"), claims.get("run"), claims.get("exp")
    attempt = claims.get("max_attempt")
    if not validate.is_int(exp) or not 0 <= exp <= MAX_EXP_S or scope not in [s.value for s in _MINTABLE]:
        raise TokenError("malformed token")
    kind = Scope(str(scope))
    if kind is Scope.RUN:
        if not _is_run_id(run) or not validate.is_int(attempt) or not 0 <= attempt <= validate.INT32_MAX:
            raise TokenError("malformed token")
        assert isinstance(run, str)
        return Grant(scope=kind, run_id=run, max_attempt=attempt, expires_at_s=exp, kid=kid)
    if run is not None or attempt is not None:
        raise TokenError("malformed token")
    return Grant(scope=kind, expires_at_s=exp, kid=kid)


def _is_run_id(value: object) -> bool:
    try:
        validate.run_id("run", value)
    except validate.InvalidInput:
        return False
    return True


# -- what a grant may do --------------------------------------------------------------------------

_RunSource = Literal["path", "body"]


@dataclass(frozen=True)
class Need:
    """What a route asks of its caller (admin may always).

    `read`: a read token may (the route changes nothing). `run`: a run token may, for the run
    named in the path or in the body's `run_id`; None: no run token may. `attempt`: the body's
    `producer_attempt` is bounded by the run token's `max_attempt` (and must be given).
    """

    read: bool
    run: _RunSource | None = None
    attempt: bool = False

    def wanted(self, run_id: object = None) -> str:
        """Which tokens may make such a request, in words: the end of a refusal, so a caller
        refused learns which token to use instead of guessing (an admin token may always)."""
        run = f"a run token for run {run_id!r}" if isinstance(run_id, str) else "a run token for that run"
        if self.read and self.run is not None:
            return f"this request needs a read token, {run}, or an admin token"
        if self.read:
            return "this request needs a read token or an admin token"
        if self.run is not None:
            return f"this request needs {run} or an admin token"
        return "this request needs an admin token"


ADMIN_ONLY: Final = Need(read=False)
READ_ANY: Final = Need(read=True)
READ_RUN: Final = Need(read=True, run="path")
WRITE_RUN: Final = Need(read=False, run="path")
OPEN_RUN: Final = Need(read=False, run="body")
UPLOAD_RUN: Final = Need(read=False, run="path", attempt=True)


def refusal(grant: Grant, need: Need, *, run_id: object = None, attempt: object = None) -> str | None:
    """Why `grant` may not make a request needing `need` (on `run_id`, claiming producer `attempt`),
    or None when it may. The reason names the scope, and which token the request needs."""
    if grant.scope is Scope.ADMIN:
        return None
    if grant.scope is Scope.READ:
        return None if need.read else f"a read token may only read; {need.wanted(run_id)}"
    if need.run is None:
        return f"a {grant.describe()} may not use this endpoint (only its own run's); {need.wanted()}"
    if run_id != grant.run_id:
        return f"a {grant.describe()} may not touch run {run_id!r}; {need.wanted(run_id)}"
    if need.attempt:
        assert grant.max_attempt is not None
        if isinstance(attempt, float) and attempt.is_integer():
            attempt = int(attempt)  # as JavaScript sends it, and as the upload accepts it
        if not validate.is_int(attempt):
            return f"a {grant.describe()} must name its producer_attempt"
        if attempt > grant.max_attempt:
            return (
                f"a {grant.describe()} may not upload as producer attempt {attempt} "
                "(a run token minted with a higher max_attempt may)"
            )
    return None


def ttl_seconds(text: str) -> int:
    """`90`, `90s`, `30m`, `24h` or `7d` in seconds; `ValueError` otherwise."""
    match = re.fullmatch(r"\s*(\d{1,9})\s*([smhd]?)\s*", text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration like 90s, 30m, 24h or 7d")
    return int(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


__all__ = [
    "ADMIN",
    "ADMIN_ONLY",
    "DEFAULT_TTL_S",
    "MAX_EXP_S",
    "MAX_PAYLOAD_CHARS",
    "MAX_TTL_S",
    "MIN_SECRET_LENGTH",
    "OPEN_RUN",
    "READ_ANY",
    "READ_RUN",
    "UPLOAD_RUN",
    "VERSION",
    "WRITE_RUN",
    "Grant",
    "Keyring",
    "Need",
    "Scope",
    "TokenError",
    "TokenExpired",
    "check_request",
    "derived_kid",
    "generate_key",
    "looks_minted",
    "mint",
    "parse_keyring",
    "refusal",
    "ttl_seconds",
    "verify",
]
