"""Ingestion endpoints: the reporter's status upload, sheet row outcomes, node
observations.

The upload body is read as raw bytes and decoded here (`ledger.jsonb.loads`: orjson, every
integer exact), then passed whole to `ledger.ingest.store`, which owns its validation: a late
duplicate is answered before its body is validated, so no request model is built from it first.
The decoding keeps the answers the framework's own body reading gives (400 for malformed or
non-JSON bodies, 422 for a missing body or one that is not an object); the request body's schema
is documented by hand for the same reason."""

from __future__ import annotations

import email.message
import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.exceptions import RequestValidationError

from ledger import jsonb, shapes, tracing
from ledger.ingest.observations import list_observations, record_observations
from ledger.ingest.sheets import record_sheet_rows, sheet_outcomes
from ledger.ingest.store import apply_status_upload
from ledger.service.errors import error_responses
from ledger.service.models import STATUS_UPLOAD_SCHEMA, Observations, RunId, SheetRows
from ledger.service.security import require_token
from ledger.service.state import Services, services

__all__ = [
    "router",
]

router = APIRouter(
    prefix="/v1/runs/{run_id}",
    tags=["ingestion"],
    dependencies=[Depends(require_token)],
    responses=error_responses(401, 403, 422, 503),
)

_Svc = Annotated[Services, Depends(services)]
# Writes with a body can also be unreadable (400) or too large (413).
_WITH_BODY = error_responses(400, 413)

_UPLOAD_DESCRIPTION = (
    "`{run_id, upload_seq, status, live_node_progress, live_logs, live_log_total_count, "
    "producer_attempt, dataset_lifecycle_events, activity_observations, terminal_log_replay, "
    "last_checkpoint_at}`. `status` is `running` or a terminal status (`completed`, `failed`, "
    "`cancelled`), which ends the run (with `error` as its terminal error, when given) and settles "
    "every step it leaves open (running: the run's outcome; pending: `skipped`). Each node may say "
    "its `state` and `reason`; one that does not gets a state derived from its fields. "
    "Delivering an upload twice changes nothing the second time: a "
    "late duplicate (its attempt already applied its `upload_seq`) is answered `duplicate: true` "
    "without the rest of its body being validated (an uploader resends an upload unchanged). An "
    "upload to an ended run that would change anything (an event, a node's progress, the log count, "
    "its end) is 409 `terminal` and changes nothing; one that would not is absorbed, storing nothing, "
    "and its answer (a duplicate's too) carries the run's `terminal` state. "
    "The answer carries the attempt's `producer_attempt`, `last_upload_seq` and `live_log_count`."
)


# The schema the framework would generate for a `dict` body carrying STATUS_UPLOAD_SCHEMA.
_UPLOAD_REQUEST_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "additionalProperties": True,
                "type": "object",
                "title": "Upload",
                **STATUS_UPLOAD_SCHEMA,
            }
        }
    },
}


def _is_json(content_type: str | None) -> bool:
    # As the framework decides it (its app runs with strict_content_type off: no type is JSON).
    if not content_type:
        return True
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


def _body_error(kind: str, message: str, body: object, **extra: Any) -> RequestValidationError:
    return RequestValidationError([{"type": kind, "loc": ("body",), "msg": message, "input": body, **extra}])


async def _json_object_body(request: Request) -> dict[str, Any]:
    """The request's JSON object body, refused the way a `dict` body parameter would be."""
    raw = await request.body()
    if not raw:
        raise _body_error("missing", "Field required", None)
    if not _is_json(request.headers.get("content-type")):
        raise _body_error("dict_type", "Input should be a valid dictionary", raw)
    try:
        body = jsonb.loads(raw)
    except json.JSONDecodeError as exc:
        raise RequestValidationError(
            [
                {
                    "type": "json_invalid",
                    "loc": ("body", exc.pos),
                    "msg": "JSON decode error",
                    "input": {},
                    "ctx": {"error": exc.msg},
                }
            ]
        ) from None
    except ValueError:  # not decodable text at all
        raise HTTPException(400, "There was an error parsing the body") from None
    if not isinstance(body, dict):
        raise _body_error("dict_type", "Input should be a valid dictionary", body)
    return body


@router.post(
    "/status",
    summary="Apply a reporter status upload (idempotent; 409 `stale_attempt` or `terminal`)",
    description=_UPLOAD_DESCRIPTION,
    responses=error_responses(400, 409, 413),
    openapi_extra={"requestBody": _UPLOAD_REQUEST_BODY},
)
async def status_upload(run_id: RunId, request: Request, svc: _Svc) -> shapes.UploadResult:
    applied = await apply_status_upload(
        svc.db,
        run_id,
        await _json_object_body(request),
        max_events_per_run=svc.settings.max_events_per_run,
        max_attempt_step=svc.settings.max_attempt_step,
    )
    svc.metrics.uploads.labels("duplicate" if applied["duplicate"] else "applied").inc()
    appended = sum(applied["events_appended"].values())
    svc.metrics.events_appended.inc(appended)
    tracing.annotate(
        run_id=run_id,
        producer_attempt=applied["producer_attempt"],
        upload_seq=applied["last_upload_seq"],
        duplicate=applied["duplicate"],
        events_appended=appended,
    )
    return applied


@router.post(
    "/sheets",
    summary="Record sheet row outcomes (upsert by table namespace and row key)",
    responses=_WITH_BODY,
)
async def record_sheets(run_id: RunId, body: SheetRows, svc: _Svc) -> shapes.Recorded:
    rows = [row.model_dump() for row in body.rows]
    return {"recorded": await record_sheet_rows(svc.db, run_id, rows)}


@router.get(
    "/sheets", summary="Per table namespace: completed, failed and total rows", responses=error_responses(404)
)
async def get_sheets(run_id: RunId, svc: _Svc) -> shapes.SheetOutcomes:
    return {"outcomes": await sheet_outcomes(svc.db, run_id)}


@router.post(
    "/observations",
    summary="Record durable node observations (newest per invocation wins)",
    responses=_WITH_BODY,
)
async def post_observations(run_id: RunId, body: Observations, svc: _Svc) -> shapes.Recorded:
    return {"recorded": await record_observations(svc.db, run_id, body.observations)}


@router.get("/observations", summary="The run's node observations", responses=error_responses(404))
async def get_observations(run_id: RunId, svc: _Svc) -> shapes.ObservationList:
    return {"observations": await list_observations(svc.db, run_id)}
