"""The HTTP service's own knobs, read from the environment once at start.

Database and data-dir settings stay in `ledger.config`; tokens in `ledger.auth`. A bad value is a
`ConfigError` naming the variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from ledger import validate
from ledger.config import ConfigError
from ledger.runlog import retention
from ledger.runlog.store import DEFAULT_MAX_EVENTS_PER_RUN
from ledger.runlog.watchdog import DEFAULT_INTERVAL_S, DEFAULT_STALL_AFTER_S

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "ServiceSettings",
    "load_service_settings",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
_MAX_BODY_VAR = "LEDGER_MAX_BODY_BYTES"
_KEEPALIVE_VAR = "LEDGER_SSE_KEEPALIVE_S"
_PUBLIC_DOCS_VAR = "LEDGER_PUBLIC_DOCS"
_POOL_SIZE_VAR = "LEDGER_DB_POOL_SIZE"
_POOL_TIMEOUT_VAR = "LEDGER_DB_POOL_TIMEOUT_S"
_LOCK_TIMEOUT_VAR = "LEDGER_DB_LOCK_TIMEOUT_S"
_STATEMENT_TIMEOUT_VAR = "LEDGER_DB_STATEMENT_TIMEOUT_S"
_TRANSACTION_POOLING_VAR = "LEDGER_DB_TRANSACTION_POOLING"
_MAX_HEADER_BYTES_VAR = "LEDGER_MAX_HEADER_BYTES"
_MAX_HEADERS_VAR = "LEDGER_MAX_HEADERS"
_KEEPALIVE_TIMEOUT_VAR = "LEDGER_KEEPALIVE_TIMEOUT_S"
_REQUEST_TIMEOUT_VAR = "LEDGER_REQUEST_TIMEOUT_S"
_MAX_CONNECTIONS_VAR = "LEDGER_MAX_CONNECTIONS"
_SHUTDOWN_GRACE_VAR = "LEDGER_SHUTDOWN_GRACE_S"
_MAX_EVENTS_VAR = "LEDGER_MAX_EVENTS_PER_RUN"
_MAX_ATTEMPT_STEP_VAR = "LEDGER_MAX_ATTEMPT_STEP"
_WATCHDOG_VAR = "LEDGER_WATCHDOG"
_WATCHDOG_STALL_VAR = "LEDGER_WATCHDOG_STALL_S"
_WATCHDOG_INTERVAL_VAR = "LEDGER_WATCHDOG_INTERVAL_S"
_STREAM_LONG_POLL_VAR = "LEDGER_STREAM_LONG_POLL_S"
_STREAM_SSE_MAX_VAR = "LEDGER_STREAM_SSE_MAX_S"
_RUN_RETENTION_VAR = retention.RETENTION_VAR


@dataclass(frozen=True, kw_only=True)
class ServiceSettings:
    """What the service needs beyond the database URL and the tokens."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    # Request bodies above this are refused with 413 before they are parsed.
    max_body_bytes: int = validate.MAX_BODY_BYTES
    # An idle SSE stream sends a comment this often, so proxies do not cut it.
    sse_keepalive_s: float = 15.0
    # Every endpoint but the probes needs a token, the schema included; opt in to serve
    # /openapi.json and /docs openly (the contract holds no data) with LEDGER_PUBLIC_DOCS=1.
    public_docs: bool = False
    # Connections for requests; waiting (long-poll, SSE) holds none of them.
    db_pool_size: int = 10
    # How long a request waits for a pooled connection before it is answered 503 (Retry-After) on a
    # busy pool. While Postgres is known to be down, a request fails within half a second instead.
    db_pool_timeout_s: float = 5.0
    # How long one statement may wait for a row lock, and run at all, before it is cancelled and
    # the request answered 503: a run whose row someone holds slows only requests for that run.
    db_lock_timeout_s: float = 2.0
    db_statement_timeout_s: float = 5.0
    # The database URL leads to a transaction-mode pooler (PgBouncer): no server-side prepared
    # statements, and the timeouts above set per transaction (see `ledger.db`).
    db_transaction_pooling: bool = False
    # What one connection may cost (see `ledger.service.http_limits`): the header block's bytes
    # and fields (431 beyond), idle seconds before it is closed, seconds from a request's first
    # byte to its last (408 beyond), and open connections at once.
    max_header_bytes: int = 32 * 1024
    max_headers: int = 100
    keepalive_timeout_s: float = 5.0
    request_timeout_s: float = 30.0
    max_connections: int = 4000
    # How long in-flight requests get to finish after SIGTERM before they are cancelled.
    shutdown_grace_s: float = 10.0
    # Run the stalled-run watchdog in this process: a run with no event (nor checkpoint heartbeat)
    # for `watchdog_stall_s` is failed; a pass every `watchdog_interval_s`.
    watchdog: bool = True
    watchdog_stall_s: float = DEFAULT_STALL_AFTER_S
    watchdog_interval_s: float = DEFAULT_INTERVAL_S
    # The watchdog's loop deletes finished runs older than this, with all they own; None keeps them.
    run_retention: timedelta | None = retention.DEFAULT_RETENTION
    # Retention per run: the oldest events beyond this are trimmed (never the terminal event);
    # 0 = unlimited.
    max_events_per_run: int = DEFAULT_MAX_EVENTS_PER_RUN
    # A status upload may claim a producer attempt at most this far above the run's current one.
    max_attempt_step: int = 10
    # Durable Streams: how long a long-poll waits before 204, and how long one SSE answer lasts
    # before the client reconnects from its last offset (so CDNs can collapse readers).
    stream_long_poll_s: float = 20.0
    stream_sse_max_s: float = 60.0


def _number(env: Mapping[str, str], var: str, default: float, *, minimum: float) -> float:
    raw = env.get(var, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{var} must be a number (got {raw!r})") from None
    if not value >= minimum:
        raise ConfigError(f"{var} must be at least {minimum:g} (got {raw!r})")
    return value


def _flag(env: Mapping[str, str], var: str, default: bool) -> bool:
    raw = env.get(var, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{var} must be true or false (got {raw!r})")


def load_service_settings(
    environ: Mapping[str, str] | None = None, *, host: str | None = None, port: int | None = None
) -> ServiceSettings:
    """Settings from the environment; `host`/`port` (command-line options) win over the defaults."""
    env = os.environ if environ is None else environ
    defaults = ServiceSettings()
    return ServiceSettings(
        host=host or DEFAULT_HOST,
        port=DEFAULT_PORT if port is None else port,
        max_body_bytes=int(_number(env, _MAX_BODY_VAR, defaults.max_body_bytes, minimum=1)),
        sse_keepalive_s=_number(env, _KEEPALIVE_VAR, defaults.sse_keepalive_s, minimum=0.01),
        public_docs=_flag(env, _PUBLIC_DOCS_VAR, defaults.public_docs),
        db_pool_size=int(_number(env, _POOL_SIZE_VAR, defaults.db_pool_size, minimum=2)),
        db_pool_timeout_s=_number(env, _POOL_TIMEOUT_VAR, defaults.db_pool_timeout_s, minimum=0.1),
        db_lock_timeout_s=_number(env, _LOCK_TIMEOUT_VAR, defaults.db_lock_timeout_s, minimum=0.001),
        db_statement_timeout_s=_number(
            env, _STATEMENT_TIMEOUT_VAR, defaults.db_statement_timeout_s, minimum=0.001
        ),
        db_transaction_pooling=_flag(env, _TRANSACTION_POOLING_VAR, defaults.db_transaction_pooling),
        max_header_bytes=int(_number(env, _MAX_HEADER_BYTES_VAR, defaults.max_header_bytes, minimum=1024)),
        max_headers=int(_number(env, _MAX_HEADERS_VAR, defaults.max_headers, minimum=8)),
        keepalive_timeout_s=_number(env, _KEEPALIVE_TIMEOUT_VAR, defaults.keepalive_timeout_s, minimum=0.1),
        request_timeout_s=_number(env, _REQUEST_TIMEOUT_VAR, defaults.request_timeout_s, minimum=0.1),
        max_connections=int(_number(env, _MAX_CONNECTIONS_VAR, defaults.max_connections, minimum=1)),
        shutdown_grace_s=_number(env, _SHUTDOWN_GRACE_VAR, defaults.shutdown_grace_s, minimum=0),
        max_events_per_run=int(_number(env, _MAX_EVENTS_VAR, defaults.max_events_per_run, minimum=0)),
        max_attempt_step=int(_number(env, _MAX_ATTEMPT_STEP_VAR, defaults.max_attempt_step, minimum=1)),
        watchdog=_flag(env, _WATCHDOG_VAR, defaults.watchdog),
        watchdog_stall_s=_number(env, _WATCHDOG_STALL_VAR, defaults.watchdog_stall_s, minimum=0.1),
        watchdog_interval_s=_number(env, _WATCHDOG_INTERVAL_VAR, defaults.watchdog_interval_s, minimum=0.01),
        run_retention=retention.parse_retention(env.get(_RUN_RETENTION_VAR)),
        stream_long_poll_s=_number(env, _STREAM_LONG_POLL_VAR, defaults.stream_long_poll_s, minimum=0.01),
        stream_sse_max_s=_number(env, _STREAM_SSE_MAX_VAR, defaults.stream_sse_max_s, minimum=0.01),
    )
