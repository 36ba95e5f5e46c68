"""API tokens: where the service gets the ones it accepts and where clients find the one they send.

The service accepts the comma-separated `LEDGER_API_TOKENS`. With none configured it generates one
token at first start and keeps it in `<data_dir>/api-token` (mode 0600), so a later start and the
CLI on the same machine find the same token. Clients (`client_token`) take `LEDGER_TOKEN`, else the
first of `LEDGER_API_TOKENS`, else that file. Comparison is constant-time (`hmac.compare_digest`).

Those are the admin tokens. The key that signs scoped tokens (`ledger.tokens`) comes from
`LEDGER_TOKEN_SECRET` (`kid:secret[,kid:secret...]`; the first signs, all verify), else from
`<data_dir>/token-secret`, generated like the API token. Replicas verify each other's tokens only
when they share the secret, so a deployment of several replicas sets the variable.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ledger import tokens
from ledger.config import ConfigError, Settings, load_settings

__all__ = [
    "API_TOKENS_VAR",
    "CLIENT_TOKEN_VAR",
    "TOKEN_SECRET_VAR",
    "client_token",
    "configured_tokens",
    "ensure_token_file",
    "read_token_file",
    "token_file",
    "token_keys",
    "token_matches",
]

API_TOKENS_VAR = "LEDGER_API_TOKENS"
CLIENT_TOKEN_VAR = "LEDGER_TOKEN"
_TOKEN_FILE_NAME = "api-token"
TOKEN_SECRET_VAR = "LEDGER_TOKEN_SECRET"
_SECRET_FILE_NAME = "token-secret"
_TOKEN_BYTES = 32


def token_file(data_dir: Path) -> Path:
    """Where the generated token lives for this data directory."""
    return data_dir / _TOKEN_FILE_NAME


def configured_tokens(environ: Mapping[str, str] | None = None) -> list[str]:
    """The tokens in `LEDGER_API_TOKENS` (blanks dropped), in order; empty when none are set."""
    env = os.environ if environ is None else environ
    return [t.strip() for t in env.get(API_TOKENS_VAR, "").split(",") if t.strip()]


@dataclass(frozen=True)
class _TokenFile:
    token: str
    path: Path
    created: bool


def read_token_file(path: Path) -> str | None:
    """The token stored at `path`, or None when there is no (non-empty) file."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return token or None


def ensure_token_file(data_dir: Path) -> _TokenFile:
    """The stored token, generating and storing one (mode 0600) when there is none yet."""
    return _ensure_secret_file(token_file(data_dir), lambda: secrets.token_urlsafe(_TOKEN_BYTES), "API token")


def _ensure_secret_file(path: Path, generate: Callable[[], str], what: str) -> _TokenFile:
    """The value stored at `path`, generating and storing one (mode 0600) when there is none yet.

    Creation is exclusive (`O_EXCL`), so two services starting at once on one data dir agree on the
    value: the loser reads the winner's file. A file readable by others is tightened to 0600.
    """
    existing = read_token_file(path)
    if existing is not None:
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)
        return _TokenFile(existing, path, created=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    value = generate()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raced = read_token_file(path)
        if raced is None:
            raise ConfigError(f"the {what} file {path} exists but is empty") from None
        return _TokenFile(raced, path, created=False)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(value + "\n")
    return _TokenFile(value, path, created=True)


def _secret_file(data_dir: Path) -> Path:
    """Where the generated token-signing key lives for this data directory."""
    return data_dir / _SECRET_FILE_NAME


@dataclass(frozen=True)
class _TokenKeys:
    keyring: tokens.Keyring
    source: str  # the variable or the file it came from, for messages
    created: bool = False


def token_keys(data_dir: Path, environ: Mapping[str, str] | None = None) -> _TokenKeys:
    """The keyring that signs and verifies scoped tokens: `LEDGER_TOKEN_SECRET`, else the secret
    file in `data_dir` (generated as `kid:secret` when missing). `ConfigError` naming the source
    when it is unusable."""
    env = os.environ if environ is None else environ
    configured = env.get(TOKEN_SECRET_VAR, "").strip()
    if configured:
        return _TokenKeys(_keyring(configured, TOKEN_SECRET_VAR), TOKEN_SECRET_VAR)
    stored = _ensure_secret_file(
        _secret_file(data_dir),
        tokens.generate_key,
        "token secret",
    )
    return _TokenKeys(_keyring(stored.token, str(stored.path)), str(stored.path), stored.created)


def _keyring(text: str, source: str) -> tokens.Keyring:
    try:
        return tokens.parse_keyring(text)
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def client_token(settings: Settings | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The token a client command sends: `LEDGER_TOKEN`, else the first of `LEDGER_API_TOKENS`,
    else the token file in the data dir. Raises `ConfigError` (one line) when there is none."""
    env = os.environ if environ is None else environ
    settings = settings or load_settings(dict(env))
    explicit = env.get(CLIENT_TOKEN_VAR, "").strip()
    if explicit:
        return explicit
    configured = configured_tokens(env)
    if configured:
        return configured[0]
    stored = read_token_file(token_file(settings.data_dir))
    if stored is not None:
        return stored
    raise ConfigError(
        f"no API token: set {CLIENT_TOKEN_VAR} or {API_TOKENS_VAR}, or start `ledger serve` once "
        f"so it stores one in {token_file(settings.data_dir)}"
    )


def token_matches(presented: str, accepted: Iterable[str]) -> bool:
    """Whether `presented` is one of `accepted`, comparing every candidate in constant time."""
    given = presented.encode("utf-8")
    found = False
    for candidate in accepted:
        # No early exit: the time taken does not tell which (or whether a) token matched.
        found |= hmac.compare_digest(given, candidate.encode("utf-8"))
    return found
