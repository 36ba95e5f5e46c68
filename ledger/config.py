"""Where the ledger's Postgres and data live: the one place that reads the environment.

`LEDGER_DATABASE_URL` wins. Without it the embedded Postgres (see `ledger.embedded`) is used, its
data directory under `LEDGER_DATA_DIR` or the user's data dir. `LEDGER_LISTEN_URL` is where the
process's one LISTEN connection goes (default: the database URL): it needs a session of its own,
which a transaction-mode pooler cannot give. A bad URL is a `ConfigError` whose message names the
variable, so the CLI can print one line and exit non-zero.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import platformdirs

from ledger.errors import ConfigError as ConfigError  # where callers have always found it

__all__ = [
    "DATABASE_URL_VAR",
    "DATA_DIR_VAR",
    "Settings",
    "load_settings",
    "sqlalchemy_url",
    "validate_database_url",
]

DATABASE_URL_VAR = "LEDGER_DATABASE_URL"
DATA_DIR_VAR = "LEDGER_DATA_DIR"
_LISTEN_URL_VAR = "LEDGER_LISTEN_URL"

_ACCEPTED_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")


@dataclass(frozen=True)
class Settings:
    database_url: str | None
    data_dir: Path
    # None: LISTEN on the database URL.
    listen_url: str | None = None

    @property
    def embedded(self) -> bool:
        return self.database_url is None


def validate_database_url(url: str, *, source: str = DATABASE_URL_VAR) -> str:
    """Return the URL in the plain `postgresql://` form psycopg takes, or raise `ConfigError`."""
    url = url.strip()
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigError(f"{source} is not a valid URL: {exc}") from None
    if parts.scheme not in _ACCEPTED_SCHEMES:
        raise ConfigError(
            f"{source} must be a postgresql:// URL (got scheme {parts.scheme or 'none'!r} in {url!r})"
        )
    try:
        parts.port  # noqa: B018 - parsing the port validates it
    except ValueError:
        raise ConfigError(f"{source} has an invalid port: {url!r}") from None
    if not parts.netloc and "host=" not in parts.query:
        raise ConfigError(f"{source} names no host: {url!r}")
    return "postgresql://" + url.split("://", 1)[1]


def _default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("run-ledger", appauthor=False))


def load_settings(environ: dict[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    raw_url = env.get(DATABASE_URL_VAR, "").strip()
    url = validate_database_url(raw_url) if raw_url else None
    raw_dir = env.get(DATA_DIR_VAR, "").strip()
    data_dir = Path(raw_dir).expanduser() if raw_dir else _default_data_dir()
    raw_listen = env.get(_LISTEN_URL_VAR, "").strip()
    listen_url = validate_database_url(raw_listen, source=_LISTEN_URL_VAR) if raw_listen else None
    return Settings(database_url=url, data_dir=data_dir, listen_url=listen_url)


def sqlalchemy_url(url: str) -> str:
    """The same URL for SQLAlchemy, which needs the driver named (psycopg 3)."""
    return "postgresql+psycopg://" + url.split("://", 1)[1]
