"""Minting scoped tokens: `POST /v1/tokens` (admin only, see `ledger.service.security.ACCESS`).

The answer is a self-contained token signed with the service's first key (`LEDGER_TOKEN_SECRET`):
any replica holding the same keyring verifies it without a database read.
"""

from __future__ import annotations

import time
from typing import Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from ledger import tokens
from ledger.service.errors import error_responses
from ledger.service.models import INT4, RUN_ID, IntegralInt
from ledger.service.security import keyring_of, require_token

__all__ = [
    "MintToken",
    "MintedToken",
    "router",
]

router = APIRouter(
    prefix="/v1/tokens",
    tags=["tokens"],
    dependencies=[Depends(require_token)],
    responses=error_responses(401, 403, 422, 503),
)


class MintToken(BaseModel):
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        # A read token names no run; a run token names its run and the highest attempt it may use.
        json_schema_extra={
            "oneOf": [
                {
                    "properties": {
                        "scope": {"const": "read"},
                        "run_id": {"type": "null"},
                        "max_attempt": {"type": "null"},
                    },
                },
                {
                    "properties": {"scope": {"const": "run"}, "run_id": RUN_ID, "max_attempt": INT4},
                    "required": ["run_id", "max_attempt"],
                },
            ]
        },
    )

    scope: Literal["read", "run"] = Field(description="read: every GET; run: one run's own endpoints")
    run_id: str | None = Field(None, description="the run a run token is for (run tokens only)")
    max_attempt: IntegralInt | None = Field(
        None, description="the highest producer attempt a run token may upload as (run tokens only)"
    )
    ttl_s: IntegralInt = Field(
        tokens.DEFAULT_TTL_S,
        description="lifetime in seconds",
        json_schema_extra={"minimum": 1, "maximum": tokens.MAX_TTL_S},
    )


class MintedToken(BaseModel):
    token: str
    scope: str
    run_id: str | None
    max_attempt: int | None
    expires_at: int = Field(description="epoch ms; the token is refused (401) from then on")
    kid: str = Field(description="the key id that signed it (rotation: see the README)")


@router.post(
    "",
    summary="Mint a read or run token (admin only)",
    responses=error_responses(400, 403, 413, notes={403: "Only an admin token may mint."}),
)
async def mint_token(body: MintToken, request: Request, response: Response) -> MintedToken:
    scope, run_id, max_attempt, ttl_s = tokens.check_request(
        body.scope, body.run_id, body.max_attempt, body.ttl_s
    )
    token, grant = tokens.mint(
        keyring_of(request), scope, now_s=time.time(), ttl_s=ttl_s, run_id=run_id, max_attempt=max_attempt
    )
    assert grant.expires_at_s is not None and grant.kid is not None
    # The answer is a credential: no cache keeps it, nor the Idempotency-Key store.
    response.headers["Cache-Control"] = "no-store"
    return MintedToken(
        token=token,
        scope=grant.scope.value,
        run_id=grant.run_id,
        max_attempt=grant.max_attempt,
        expires_at=grant.expires_at_s * 1000,
        kid=grant.kid,
    )
