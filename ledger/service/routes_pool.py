"""Warm pool endpoints: `/v1/pools/{pool}/...`, thin calls into `WarmPool`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from ledger import validate
from ledger.service.models import AddEntries, Claim, ReadyEntry, VersionIds
from ledger.service.security import require_token
from ledger.service.state import Services, services

router = APIRouter(prefix="/v1/pools/{pool}", tags=["warm pool"], dependencies=[Depends(require_token)])

Svc = Annotated[Services, Depends(services)]
Version = Annotated[str, Query(description="the code version")]


@router.post("/entries", summary="Add or refresh entries")
async def add_entries(pool: str, body: AddEntries, svc: Svc) -> dict[str, int]:
    added = await svc.pool.add(pool, body.version, body.ids, body.ttl_ms, body.ready, body.ready_at)
    return {"added": added}


@router.get("/entries", summary="List the live entries of a version")
async def list_entries(pool: str, version: Version, svc: Svc) -> dict[str, list[dict[str, Any]]]:
    return {"entries": await svc.pool.list(pool, version)}


@router.delete("/entries", summary="Clear the pool (every version)")
async def clear_entries(pool: str, svc: Svc) -> dict[str, int]:
    return {"deleted": await svc.pool.clear(pool)}


@router.post("/claim", summary="Claim the newest available entry for a run (idempotent per run)")
async def claim(pool: str, body: Claim, svc: Svc) -> dict[str, Any]:
    # The claim maps the run: its id must be one the run paths can address.
    run_id = validate.run_id("run_id", body.run_id)
    return await svc.pool.claim(pool, body.version, run_id, body.min_ready_age_ms)


@router.get("/counts", summary="Available and warming entries of a version")
async def counts(
    pool: str,
    version: Version,
    svc: Svc,
    min_ready_age_ms: Annotated[float | None, Query()] = None,
) -> dict[str, int]:
    return await svc.pool.count(pool, version, min_ready_age_ms)


@router.post("/promote", summary="Mark entries ready now")
async def promote(pool: str, body: VersionIds, svc: Svc) -> dict[str, int]:
    return {"promoted": await svc.pool.promote(pool, body.version, body.ids)}


@router.post("/ready", summary="Mark one entry ready (keeping an earlier ready_at)")
async def ready(pool: str, body: ReadyEntry, svc: Svc) -> dict[str, bool]:
    return {"ready": await svc.pool.ready(pool, body.version, body.id)}


@router.post("/delete", summary="Delete entries of a version")
async def delete(pool: str, body: VersionIds, svc: Svc) -> dict[str, int]:
    return {"deleted": await svc.pool.delete(pool, body.version, body.ids)}
