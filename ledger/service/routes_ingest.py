"""Ingestion endpoints: the reporter's status upload, sheet row outcomes, node
observations. The upload body is passed whole to `ledger.ingest.store`, which owns its validation."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends

from ledger import shapes
from ledger.ingest.observations import list_observations, record_observations
from ledger.ingest.sheets import record_sheet_rows, sheet_outcomes
from ledger.ingest.store import apply_status_upload
from ledger.service.errors import error_responses
from ledger.service.models import STATUS_UPLOAD_SCHEMA, Observations, RunId, SheetRows
from ledger.service.security import require_token
from ledger.service.state import Services, services

router = APIRouter(
    prefix="/v1/runs/{run_id}",
    tags=["ingestion"],
    dependencies=[Depends(require_token)],
    responses=error_responses(401, 403, 422, 503),
)

Svc = Annotated[Services, Depends(services)]
# Writes with a body can also be unreadable (400) or too large (413).
WITH_BODY = error_responses(400, 413)

UPLOAD_DESCRIPTION = (
    "`{run_id, upload_seq, status, live_node_progress, live_logs, live_log_total_count, "
    "producer_attempt, dataset_lifecycle_events, activity_observations, terminal_log_replay, "
    "last_checkpoint_at}`. Delivering an upload twice changes nothing the second time. "
    "The answer carries the attempt's `producer_attempt`, `last_upload_seq` and `live_log_count`."
)


@router.post(
    "/status",
    summary="Apply a reporter status upload (idempotent; 409 `stale_attempt` or `terminal`)",
    responses=error_responses(400, 409, 413),
)
async def status_upload(
    run_id: RunId,
    upload: Annotated[
        dict[str, Any], Body(description=UPLOAD_DESCRIPTION, json_schema_extra=STATUS_UPLOAD_SCHEMA)
    ],
    svc: Svc,
) -> shapes.UploadResult:
    applied = await apply_status_upload(
        svc.db,
        run_id,
        upload,
        max_events_per_run=svc.settings.max_events_per_run,
        max_attempt_step=svc.settings.max_attempt_step,
    )
    svc.metrics.uploads.labels("duplicate" if applied["duplicate"] else "applied").inc()
    svc.metrics.events_appended.inc(sum(applied["events_appended"].values()))
    return applied


@router.post(
    "/sheets",
    summary="Record sheet row outcomes (upsert by table namespace and row key)",
    responses=WITH_BODY,
)
async def record_sheets(run_id: RunId, body: SheetRows, svc: Svc) -> shapes.Recorded:
    rows = [row.model_dump() for row in body.rows]
    return {"recorded": await record_sheet_rows(svc.db, run_id, rows)}


@router.get(
    "/sheets", summary="Per table namespace: completed, failed and total rows", responses=error_responses(404)
)
async def get_sheets(run_id: RunId, svc: Svc) -> shapes.SheetOutcomes:
    return {"outcomes": await sheet_outcomes(svc.db, run_id)}


@router.post(
    "/observations",
    summary="Record durable node observations (newest per invocation wins)",
    responses=WITH_BODY,
)
async def post_observations(run_id: RunId, body: Observations, svc: Svc) -> shapes.Recorded:
    return {"recorded": await record_observations(svc.db, run_id, body.observations)}


@router.get("/observations", summary="The run's node observations", responses=error_responses(404))
async def get_observations(run_id: RunId, svc: Svc) -> shapes.ObservationList:
    return {"observations": await list_observations(svc.db, run_id)}
