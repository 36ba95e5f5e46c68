"""Idempotency-Key answers on Postgres: what the service stores so a retried write happens once.

A request that carries `Idempotency-Key` is identified by its `IdempotencyScope`: the fingerprint
of the bearer token (SHA-256; the token itself is never stored) and a digest of its method, path
and key. So a key is scoped per token and per path: the same key sent by another token, or to
another path, is another request.

Design note. The service runs such a request inside one shared transaction (see
`ledger.db.Database.shared_transaction`):

1. `lock_scope` takes a transaction advisory lock on the scope. A concurrent request with the same
   scope waits here until the first one commits or rolls back, then finds its answer.
2. `find_answer` reads a stored answer younger than the key lifetime (24 hours).
3. Without one, the request runs; its writes join the same transaction. `store_answer` records the
   answer (2xx and 4xx only) and the commit makes the writes and the answer durable together: a
   crash in between loses both, never just the answer, so a retry can not write twice.

An advisory lock rather than a placeholder row: nothing half-done is ever committed, so there is
no "in flight" state to expire after a crash, and the row's columns are all NOT NULL. A hash
collision of two scopes only makes one request wait for the other.

Expired answers are removed by `sweep_expired` (the watchdog's loop), in batches, `SKIP LOCKED`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from psycopg.types.json import Jsonb

from ledger.db import Conn
from ledger.validate import repair_text

__all__ = [
    "KEY_LIFETIME",
    "IdempotencyScope",
    "StoredAnswer",
    "find_answer",
    "fingerprint_body",
    "fingerprint_token",
    "lock_scope",
    "store_answer",
    "sweep_expired",
]

KEY_LIFETIME: Final = timedelta(hours=24)

_LOCK_SCOPE_SQL: Final = "SELECT pg_advisory_xact_lock(hashtextextended(%(lock_key)s, 0))"

_FIND_ANSWER_SQL: Final = """
SELECT request_fingerprint, status_code, content_type, response_body, response_headers
FROM ledger.idempotency_keys
WHERE token_fingerprint = %(token_fingerprint)s AND scope_digest = %(scope_digest)s
  AND created_at > now() - %(lifetime)s
"""

# An expired row may still be there (the sweep has not reached it): it is replaced.
_STORE_ANSWER_SQL: Final = """
INSERT INTO ledger.idempotency_keys
    (token_fingerprint, scope_digest, method, path, idempotency_key, request_fingerprint,
     status_code, content_type, response_body, response_headers, created_at)
VALUES (%(token_fingerprint)s, %(scope_digest)s, %(method)s, %(path)s, %(idempotency_key)s,
        %(request_fingerprint)s, %(status_code)s, %(content_type)s, %(response_body)s,
        %(response_headers)s, now())
ON CONFLICT (token_fingerprint, scope_digest) DO UPDATE SET
    method = EXCLUDED.method, path = EXCLUDED.path, idempotency_key = EXCLUDED.idempotency_key,
    request_fingerprint = EXCLUDED.request_fingerprint, status_code = EXCLUDED.status_code,
    content_type = EXCLUDED.content_type, response_body = EXCLUDED.response_body,
    response_headers = EXCLUDED.response_headers, created_at = EXCLUDED.created_at
"""

_SWEEP_EXPIRED_SQL: Final = """
DELETE FROM ledger.idempotency_keys
WHERE (token_fingerprint, scope_digest) IN (
    SELECT token_fingerprint, scope_digest FROM ledger.idempotency_keys
    WHERE created_at <= %(cutoff)s
    ORDER BY created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
"""


def fingerprint_token(token: str) -> str:
    """The SHA-256 hex digest of a bearer token: what identifies the token in stored keys."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def fingerprint_body(body: bytes, headers: Sequence[tuple[str, str]] = (), *, as_json: bool = True) -> str:
    """The request's fingerprint: of its body's canonical JSON (key order and spacing do not count)
    when `as_json` and it is JSON, else of its bytes and its content type; and of `headers`, the
    request headers that change what it writes (`(name, value)`, names in lower case), in any
    order. A JSON body's content type is implied by its being read as JSON, so a plain API request
    is fingerprinted by its body alone."""
    canonical: bytes | None = None
    if as_json:
        try:
            canonical = json.dumps(
                json.loads(body), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True
            ).encode("ascii")
        except (ValueError, RecursionError, TypeError):
            canonical = None
    digest = hashlib.sha256(body if canonical is None else canonical)
    for name, value in sorted(headers):
        if name == "content-type" and canonical is not None:
            continue
        # Header bytes hold neither a NUL nor a newline: the separators cannot be forged.
        digest.update(b"\x00" + name.encode("latin-1") + b"\n" + value.encode("latin-1"))
    return f"{'bytes' if canonical is None else 'json'}:{digest.hexdigest()}"


@dataclass(frozen=True, kw_only=True)
class IdempotencyScope:
    """Which stored answer a request may get: its token, method, path and key."""

    token_fingerprint: str
    method: str
    path: str
    key: bytes

    @property
    def digest(self) -> str:
        raw = json.dumps([self.method, self.path], ensure_ascii=True).encode("ascii") + b"\n" + self.key
        return hashlib.sha256(raw).hexdigest()

    def params(self) -> dict[str, Any]:
        return {"token_fingerprint": self.token_fingerprint, "scope_digest": self.digest}


@dataclass(frozen=True, kw_only=True)
class StoredAnswer:
    """An answer given earlier, and the fingerprint of the request it answered."""

    request_fingerprint: str
    status_code: int
    content_type: str
    body: bytes
    # The answer's protocol headers, given again with it (`(name, value)`).
    headers: tuple[tuple[str, str], ...] = ()


async def lock_scope(conn: Conn, scope: IdempotencyScope) -> None:
    """Wait until no other transaction works on this scope, then hold it until this one ends."""
    lock_key = f"ledger.idempotency:{scope.token_fingerprint}:{scope.digest}"
    await conn.execute(_LOCK_SCOPE_SQL, {"lock_key": lock_key})


async def find_answer(
    conn: Conn, scope: IdempotencyScope, *, lifetime: timedelta = KEY_LIFETIME
) -> StoredAnswer | None:
    """The answer stored for the scope within `lifetime`, or None."""
    cur = await conn.execute(_FIND_ANSWER_SQL, {**scope.params(), "lifetime": lifetime})
    row = await cur.fetchone()
    if row is None:
        return None
    return StoredAnswer(
        request_fingerprint=row["request_fingerprint"],
        status_code=int(row["status_code"]),
        content_type=row["content_type"],
        body=bytes(row["response_body"]),
        headers=tuple((str(name), str(value)) for name, value in row["response_headers"]),
    )


async def store_answer(conn: Conn, scope: IdempotencyScope, answer: StoredAnswer) -> None:
    """Store the answer for the scope (replacing an expired one); commits with the transaction."""
    await conn.execute(
        _STORE_ANSWER_SQL,
        {
            **scope.params(),
            # Kept for people reading the table; a path or key may hold anything a client sent.
            "method": scope.method,
            "path": repair_text(scope.path),
            "idempotency_key": repair_text(scope.key.decode("utf-8", "replace")),
            "request_fingerprint": answer.request_fingerprint,
            "status_code": answer.status_code,
            "content_type": repair_text(answer.content_type),
            "response_body": answer.body,
            "response_headers": Jsonb([list(pair) for pair in answer.headers]),
        },
    )


async def sweep_expired(conn: Conn, now: datetime, *, limit: int, lifetime: timedelta = KEY_LIFETIME) -> int:
    """Delete up to `limit` answers older than `lifetime`, skipping rows others hold; how many."""
    cur = await conn.execute(_SWEEP_EXPIRED_SQL, {"cutoff": now - lifetime, "limit": limit})
    return max(cur.rowcount, 0)
