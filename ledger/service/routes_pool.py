"""Warm pool endpoints: `/v1/pools/{pool}/...`, thin calls into `WarmPool`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from ledger import shapes, tracing, validate
from ledger.service.errors import error_responses
from ledger.service.models import AddEntries, Claim, Pool, ReadyEntry, Version, VersionIds
from ledger.service.security import require_token
from ledger.service.state import Services, services

router = APIRouter(
    prefix="/v1/pools/{pool}",
    tags=["warm pool"],
    dependencies=[Depends(require_token)],
    responses=error_responses(401, 403, 422, 503),
)

Svc = Annotated[Services, Depends(services)]
# Writes with a body can also be unreadable (400) or too large (413).
WITH_BODY = error_responses(400, 413)
MinReadyAge = Annotated[
    float,
    Query(
        description="ms an entry must have been ready to count (clamped to the maximum TTL)",
        json_schema_extra={"minimum": 0},
    ),
]


@router.post("/entries", summary="Add or refresh entries", responses=WITH_BODY)
async def add_entries(pool: Pool, body: AddEntries, svc: Svc) -> shapes.Added:
    added = await svc.pool.add(pool, body.version, body.ids, body.ttl_ms, body.ready, body.ready_at)
    return {"added": added}


@router.get("/entries", summary="List the live entries of a version")
async def list_entries(pool: Pool, version: Version, svc: Svc) -> shapes.PoolEntries:
    return {"entries": await svc.pool.list(pool, version)}


@router.delete("/entries", summary="Clear the pool (every version)")
async def clear_entries(pool: Pool, svc: Svc) -> shapes.Deleted:
    return {"deleted": await svc.pool.clear(pool)}


@router.post(
    "/claim", summary="Claim the newest available entry for a run (idempotent per run)", responses=WITH_BODY
)
async def claim(pool: Pool, body: Claim, svc: Svc) -> shapes.ClaimResult:
    tracing.annotate(pool=pool, version=body.version, run_id=body.run_id)
    # The claim maps the run: its id must be one the run paths can address.
    run_id = validate.run_id("run_id", body.run_id)
    return await svc.pool.claim(pool, body.version, run_id, body.min_ready_age_ms)


@router.get("/counts", summary="Available and warming entries of a version")
async def counts(pool: Pool, version: Version, svc: Svc, min_ready_age_ms: MinReadyAge = 0) -> shapes.Counts:
    return await svc.pool.count(pool, version, min_ready_age_ms)


@router.post("/promote", summary="Mark entries ready now", responses=WITH_BODY)
async def promote(pool: Pool, body: VersionIds, svc: Svc) -> shapes.Promoted:
    return {"promoted": await svc.pool.promote(pool, body.version, body.ids)}


@router.post("/ready", summary="Mark one entry ready (keeping an earlier ready_at)", responses=WITH_BODY)
async def ready(pool: Pool, body: ReadyEntry, svc: Svc) -> shapes.Readied:
    return {"ready": await svc.pool.ready(pool, body.version, body.id)}


@router.post("/delete", summary="Delete entries of a version", responses=WITH_BODY)
async def delete(pool: Pool, body: VersionIds, svc: Svc) -> shapes.Deleted:
    return {"deleted": await svc.pool.delete(pool, body.version, body.ids)}
