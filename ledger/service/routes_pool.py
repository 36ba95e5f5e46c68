"""Warm pool endpoints: `/v1/pools/{pool}/...`, thin calls into `WarmPool`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from ledger import shapes, tracing, validate
from ledger.service.errors import error_responses
from ledger.service.models import AddEntries, Claim, Pool, ReadyEntry, Version, VersionIds
from ledger.service.security import require_token
from ledger.service.state import Services, services

__all__ = [
    "router",
]

router = APIRouter(
    prefix="/v1/pools/{pool}",
    tags=["warm pool"],
    dependencies=[Depends(require_token)],
    responses=error_responses(401, 403, 422, 503),
)

_Svc = Annotated[Services, Depends(services)]
# Writes with a body can also be unreadable (400) or too large (413).
_WITH_BODY = error_responses(400, 413)
# An instance is in one place at a time: a live entry of one pool, or serving one live run.
_SERVES = "`code` `instance_mapped`: an instance serves a live run (mapping unexpired, run not ended)"
_PLACES = error_responses(
    400,
    409,
    413,
    notes={
        409: f"{_SERVES}, or is a live entry of another pool (an instance id names one instance across "
        "all pools; its own pool may refresh it). The whole request is refused: nothing was written."
    },
)
_READIES = error_responses(400, 409, 413, notes={409: f"{_SERVES}. Nothing was written."})
_MinReadyAge = Annotated[
    float,
    Query(
        description="ms an entry must have been ready to count (clamped to the maximum TTL)",
        json_schema_extra={"minimum": 0},
    ),
]


@router.post(
    "/entries",
    summary="Add or refresh entries (409 `instance_mapped` if one serves a live run or waits in another "
    "pool)",
    responses=_PLACES,
)
async def add_entries(pool: Pool, body: AddEntries, svc: _Svc) -> shapes.Added:
    added = await svc.pool.add(pool, body.version, body.ids, body.ttl_ms, body.ready, body.ready_at)
    return {"added": added}


@router.get("/entries", summary="List the live entries of a version")
async def list_entries(pool: Pool, version: Version, svc: _Svc) -> shapes.PoolEntries:
    return {"entries": await svc.pool.list(pool, version)}


@router.delete("/entries", summary="Clear the pool (every version)")
async def clear_entries(pool: Pool, svc: _Svc) -> shapes.Deleted:
    return {"deleted": await svc.pool.clear(pool)}


@router.post(
    "/claim",
    summary="Claim the newest available entry for a run (idempotent per run; never an instance that "
    "serves another live run; 409 `terminal` for a run that has ended)",
    responses=error_responses(
        400,
        409,
        413,
        notes={
            409: "`code` `terminal`: the run has already ended (the answer holds its `terminal` state). "
            "Nothing was taken from the pool."
        },
    ),
)
async def claim(pool: Pool, body: Claim, svc: _Svc) -> shapes.ClaimResult:
    tracing.annotate(pool=pool, version=body.version, run_id=body.run_id)
    # The claim maps the run: its id must be one the run paths can address.
    run_id = validate.run_id("run_id", body.run_id)
    return await svc.pool.claim(pool, body.version, run_id, body.min_ready_age_ms)


@router.get("/counts", summary="Available and warming entries of a version")
async def counts(
    pool: Pool, version: Version, svc: _Svc, min_ready_age_ms: _MinReadyAge = 0
) -> shapes.PoolCountsBody:
    return await svc.pool.count(pool, version, min_ready_age_ms)


@router.post(
    "/promote",
    summary="Mark entries ready now (409 `instance_mapped` if one serves a live run)",
    responses=_READIES,
)
async def promote(pool: Pool, body: VersionIds, svc: _Svc) -> shapes.Promoted:
    return {"promoted": await svc.pool.promote(pool, body.version, body.ids)}


@router.post(
    "/ready",
    summary="Mark one entry ready, keeping an earlier ready_at (409 `instance_mapped` if it serves a live "
    "run)",
    responses=_READIES,
)
async def ready(pool: Pool, body: ReadyEntry, svc: _Svc) -> shapes.Readied:
    return {"ready": await svc.pool.ready(pool, body.version, body.id)}


@router.post("/delete", summary="Delete entries of a version", responses=_WITH_BODY)
async def delete(pool: Pool, body: VersionIds, svc: _Svc) -> shapes.Deleted:
    return {"deleted": await svc.pool.delete(pool, body.version, body.ids)}
