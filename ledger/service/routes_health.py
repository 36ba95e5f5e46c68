"""Operations endpoints: liveness, readiness, Prometheus metrics."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response

from ledger import shapes, tracing, validate
from ledger.service.errors import error_responses
from ledger.service.metrics import CONTENT_TYPE
from ledger.service.security import require_token
from ledger.service.state import Services, services

__all__ = [
    "router",
]

router = APIRouter(tags=["operations"])

_READY_CHECK_TIMEOUT_S = 2.0


@router.get("/healthz", summary="Liveness: the process is up (no token needed)")
async def healthz() -> shapes.Health:
    return {"status": "ok"}


@router.get(
    "/v1/limits",
    summary="What the service takes: body size, JSON depth, live log tail (no token needed)",
    description="A client keeps its requests under these; a body over `max_body_bytes` is refused "
    "with 413 `too_large`, whose answer carries `max_body_bytes` too. They hold no data.",
)
async def limits(svc: Annotated[Services, Depends(services)]) -> shapes.Limits:
    return {
        "max_body_bytes": svc.settings.max_body_bytes,
        "max_json_depth": validate.MAX_JSON_DEPTH,
        "max_value_depth": validate.MAX_VALUE_DEPTH,
        "live_log_tail_lines": validate.LIVE_LOG_TAIL_LIMIT,
    }


async def _database_reachable(svc: Services) -> bool:
    async def probe() -> None:
        # A load balancer asks every few seconds: its statement is no trace's (its request is not
        # spanned either), unless upkeep is traced.
        with tracing.upkeep():
            async with svc.db.connection() as conn:
                await conn.execute("SELECT 1")

    try:
        await asyncio.wait_for(probe(), _READY_CHECK_TIMEOUT_S)
    except Exception:
        return False
    return True


@router.get(
    "/readyz",
    summary="Readiness: the database answers and the listener is connected (no token needed)",
    response_model=shapes.Readiness,
    responses={503: {"model": shapes.NotReady, "description": "not ready; the body says which part is down"}},
)
async def readyz(svc: Annotated[Services, Depends(services)]) -> JSONResponse:
    checks: dict[str, Any] = {
        "database": await _database_reachable(svc),
        "listener": bool(svc.listener.connected),
    }
    if svc.drain.draining:
        checks["draining"] = True
        return JSONResponse({"error": "shutting down", "code": "shutting_down", **checks}, status_code=503)
    down = [name for name, ok in checks.items() if not ok]
    if down:
        return JSONResponse(
            {"error": f"not ready: {', '.join(down)} down", "code": "not_ready", **checks}, status_code=503
        )
    return JSONResponse({"status": "ready", **checks})


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    dependencies=[Depends(require_token)],
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE: {"schema": {"type": "string"}}}, "description": "the text format"},
        **error_responses(401, 403),
    },
)
async def metrics(svc: Annotated[Services, Depends(services)]) -> Response:
    return Response(svc.metrics.render(), media_type=CONTENT_TYPE)
