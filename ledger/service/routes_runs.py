"""Run endpoints: open/read runs, append events, terminal state, run mapping.

`GET /v1/runs` lists the newest runs from the `run_overview` view, for `ledger runs` and anyone
who wants the same list over HTTP.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from ledger.runlog import overview
from ledger.service.models import AppendEvents, BlockRun, MapRun, OpenRun, SetTerminal
from ledger.service.security import require_token
from ledger.service.state import Services, services

router = APIRouter(prefix="/v1/runs", tags=["runs"], dependencies=[Depends(require_token)])

Svc = Annotated[Services, Depends(services)]


@router.post("", summary="Open a run (idempotent)")
async def open_run(body: OpenRun, svc: Svc) -> dict[str, Any]:
    return await svc.runlog.open_run(body.run_id, body.play_name)


@router.get("", summary="The newest runs (the run_overview view), newest first; for `ledger runs`")
async def list_runs(
    svc: Svc, limit: Annotated[int, Query(description="how many runs, 1 to 1,000")] = 50
) -> dict[str, list[dict[str, Any]]]:
    return {"runs": await overview.list_runs(svc.db, limit)}


@router.get(
    "/{run_id}",
    summary="The run: status, last seq, terminal state, live node progress, the attempt's resume position",
)
async def get_run(run_id: str, svc: Svc) -> dict[str, Any]:
    return await svc.runlog.get_run(run_id)


@router.get("/{run_id}/logs", summary="The text of the run's last `tail` log lines, oldest first")
async def get_logs(
    run_id: str,
    svc: Svc,
    tail: Annotated[int, Query(description="how many lines, 1 to 10,000")] = 1000,
) -> dict[str, list[str]]:
    return {"lines": await svc.runlog.recent_log_lines(run_id, tail)}


@router.post("/{run_id}/events", summary="Append events in one transaction")
async def append_events(run_id: str, body: AppendEvents, svc: Svc) -> dict[str, list[dict[str, Any]]]:
    events = await svc.runlog.append(run_id, body.events)
    svc.metrics.events_appended.inc(len(events))
    return {"events": events}


@router.put(
    "/{run_id}/terminal",
    summary="Set the terminal state (first wins; the same again is a no-op; another is 409 `terminal`)",
)
async def set_terminal(run_id: str, body: SetTerminal, svc: Svc) -> dict[str, Any]:
    return await svc.runlog.set_terminal(
        run_id,
        body.status,
        result=body.result,
        error=body.error,
        total_rows=body.total_rows,
        duration_ms=body.duration_ms,
        play_name=body.play_name,
    )


@router.get("/{run_id}/terminal", summary="The terminal state, or null while the run is live")
async def get_terminal(run_id: str, svc: Svc) -> dict[str, Any]:
    return {"state": await svc.runlog.get_terminal(run_id)}


@router.put("/{run_id}/mapping", summary="Map the run to an instance (refused if blocked for it)")
async def map_run(run_id: str, body: MapRun, svc: Svc) -> dict[str, bool]:
    return await svc.pool.map_run(run_id, body.instance_id, body.version, body.started)


@router.post("/{run_id}/mapping/block", summary="Block an instance from the run unless it started it")
async def block_run(run_id: str, body: BlockRun, svc: Svc) -> dict[str, bool]:
    return await svc.pool.block_run(run_id, body.instance_id, body.version)


@router.get("/{run_id}/mapping", summary="The instance serving the run (same version only)")
async def resolve_run(run_id: str, version: Annotated[str, Query()], svc: Svc) -> dict[str, Any]:
    return await svc.pool.resolve_run(run_id, version)
