"""Run endpoints: open/read runs, append events, terminal state, run mapping.

`GET /v1/runs` lists the newest runs from the `run_overview` view, for `ledger runs` and anyone
who wants the same list over HTTP.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from ledger import shapes, tracing, validate
from ledger.runlog import overview
from ledger.runlog.events import MAX_LIST_LIMIT
from ledger.runlog.overview import MAX_RUNS_LIMIT
from ledger.service.errors import error_responses
from ledger.service.json_answer import JsonAnswer
from ledger.service.models import (
    AppendEvents,
    BlockRun,
    CancelRun,
    MapRun,
    OpenRun,
    RunId,
    SetTerminal,
    Version,
)
from ledger.service.security import require_token
from ledger.service.state import Services, services

__all__ = [
    "CANCELLED_BY_OPERATOR",
    "append_answer",
    "router",
]

router = APIRouter(
    prefix="/v1/runs",
    tags=["runs"],
    dependencies=[Depends(require_token)],
    responses=error_responses(401, 403, 422, 503),
)

_Svc = Annotated[Services, Depends(services)]


@router.post("", summary="Open a run (idempotent)", responses=error_responses(400, 413))
async def open_run(body: OpenRun, svc: _Svc) -> shapes.Run:
    return await svc.runlog.open_run(body.run_id, body.play_name)


@router.get(
    "",
    summary="The newest runs (the run_overview view), newest first, a page at a time, optionally only "
    "those of a status, a play or since a time; for `ledger runs`",
)
async def list_runs(
    svc: _Svc,
    limit: Annotated[
        int,
        Query(description="how many runs", json_schema_extra={"minimum": 1, "maximum": MAX_RUNS_LIMIT}),
    ] = 50,
    before: Annotated[
        str | None,
        Query(
            description="the `next_before` of the previous page: the runs after it in the list",
            json_schema_extra={"pattern": overview.RUN_LIST_CURSOR_PATTERN},
        ),
    ] = None,
    status: Annotated[
        str | None, Query(description="only runs with this status (`running`, `failed`, …)")
    ] = None,
    play: Annotated[str | None, Query(description="only runs with this play name")] = None,
    since: Annotated[
        int | None,
        Query(
            description="only runs created at or after this time (epoch ms)",
            json_schema_extra={"minimum": 0, "maximum": validate.MAX_EPOCH_MS},
        ),
    ] = None,
) -> shapes.RunList:
    runs = overview.RunFilter(status=status, play=play, since_ms=since)
    return await overview.runs_page(svc.db, limit, before, runs)


@router.get(
    "/{run_id}",
    summary="The run: status, last seq, terminal state, live node progress (each step's state and reason),"
    " the attempt's resume position",
    responses=error_responses(404),
)
async def get_run(run_id: RunId, svc: _Svc) -> shapes.Run:
    return await svc.runlog.get_run(run_id)


@router.get(
    "/{run_id}/logs",
    summary="The text of the run's last `tail` log lines, oldest first",
    responses=error_responses(404),
)
async def get_logs(
    run_id: RunId,
    svc: _Svc,
    tail: Annotated[
        int,
        Query(description="how many lines", json_schema_extra={"minimum": 1, "maximum": MAX_LIST_LIMIT}),
    ] = validate.LIVE_LOG_TAIL_LIMIT,
) -> shapes.LogTail:
    return {"lines": await svc.runlog.recent_log_lines(run_id, tail)}


@router.post(
    "/{run_id}/events",
    summary="Append events in one transaction (409 `terminal` once the run has ended; a trailing `terminal`"
    " event settles the run's open steps first)",
    responses=error_responses(400, 404, 409, 413),
    response_model=shapes.AppendedEvents,
)
async def append_events(run_id: RunId, body: AppendEvents, svc: _Svc) -> JsonAnswer:
    # Valid appends are served by `ledger.service.append_route` with `append_answer`; this route
    # answers the rest (and is what the OpenAPI document describes).
    return await append_answer(svc, run_id, body.events)


async def append_answer(svc: Services, run_id: str, events: list[dict[str, Any]]) -> JsonAnswer:
    """Append `events` to the run; the answer holds them with the seq and ts they were given,
    encoded as the library returned them (not validated against their own type first)."""
    appended = await svc.runlog.append(run_id, events)
    svc.metrics.events_appended.inc(len(appended))
    tracing.annotate(run_id=run_id, events_appended=len(appended))
    return JsonAnswer({"events": appended})


@router.put(
    "/{run_id}/terminal",
    summary="Set the terminal state, settling the run's open steps (first wins; the same again is a no-op;"
    " another is 409 `terminal`)",
    responses=error_responses(400, 404, 409, 413),
)
async def set_terminal(run_id: RunId, body: SetTerminal, svc: _Svc) -> shapes.TerminalStateBody:
    return await svc.runlog.set_terminal(
        run_id,
        body.status,
        result=body.result,
        error=body.error,
        total_rows=body.total_rows,
        duration_ms=body.duration_ms,
        play_name=body.play_name,
    )


# The terminal error of a run cancelled without a reason.
CANCELLED_BY_OPERATOR = "cancelled by an operator"


@router.post(
    "/{run_id}/cancel",
    summary="Cancel a live run: it ends `cancelled` with the reason as its error (409 `terminal` once it "
    "has ended otherwise; cancelling a cancelled run again changes nothing)",
    responses=error_responses(400, 404, 409, 413),
)
async def cancel_run(run_id: RunId, body: CancelRun, svc: _Svc) -> shapes.TerminalStateBody:
    # Unlike PUT terminal (the operator's), the run's own token may cancel it: a worker giving up
    # on its run says so, with the reason a person reads on every face.
    stored = await svc.runlog.get_terminal(run_id)
    if stored is not None and stored["status"] == "cancelled":
        return stored
    return await svc.runlog.set_terminal(run_id, "cancelled", error=body.reason or CANCELLED_BY_OPERATOR)


@router.get(
    "/{run_id}/terminal",
    summary="The terminal state, or null while the run is live",
    responses=error_responses(404),
)
async def get_terminal(run_id: RunId, svc: _Svc) -> shapes.TerminalAnswer:
    return {"state": await svc.runlog.get_terminal(run_id)}


@router.put(
    "/{run_id}/mapping",
    summary="Map the run to an instance (refused if blocked for it; 409 `instance_mapped` if it serves "
    "another live run or is a live entry of a pool)",
    responses=error_responses(
        400,
        409,
        413,
        notes={
            409: "`code` `instance_mapped`: the instance serves another live run (mapping unexpired, "
            "run not ended), or is a live entry (ready or warming, not expired) of any pool: only a "
            "claim takes an instance out of a pool. Nothing was written."
        },
    ),
)
async def map_run(run_id: RunId, body: MapRun, svc: _Svc) -> shapes.MapResult:
    return await svc.pool.map_run(run_id, body.instance_id, body.version, body.started)


@router.post(
    "/{run_id}/mapping/block",
    summary="Block an instance from the run unless it started it",
    responses=error_responses(400, 413),
)
async def block_run(run_id: RunId, body: BlockRun, svc: _Svc) -> shapes.BlockResult:
    return await svc.pool.block_run(run_id, body.instance_id, body.version)


@router.get("/{run_id}/mapping", summary="The instance serving the run (same version only)")
async def resolve_run(run_id: RunId, version: Version, svc: _Svc) -> shapes.ResolvedMapping:
    return await svc.pool.resolve_run(run_id, version)
