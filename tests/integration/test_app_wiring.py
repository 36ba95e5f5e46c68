"""How the service is put together: the middleware in their declared order (and why the order
matters), and operation ids that come straight from the route handlers' names."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from ledger.service import app as app_module
from ledger.service.app import MIDDLEWARE_ORDER, create_app
from ledger.service.append_route import AppendRoute
from ledger.service.idempotent import IdempotencyMiddleware
from ledger.service.settings import ServiceSettings

TOKEN = "in-process-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

# The operation ids clients name their methods after: a rename is a breaking change.
OPERATION_IDS = {
    ("GET", "/healthz"): "healthz_healthz_get",
    ("GET", "/metrics"): "metrics_metrics_get",
    ("GET", "/readyz"): "readyz_readyz_get",
    ("GET", "/v1/limits"): "limits_v1_limits_get",
    ("POST", "/v1/pools/{pool}/claim"): "claim_v1_pools__pool__claim_post",
    ("GET", "/v1/pools/{pool}/counts"): "counts_v1_pools__pool__counts_get",
    ("POST", "/v1/pools/{pool}/delete"): "delete_v1_pools__pool__delete_post",
    ("DELETE", "/v1/pools/{pool}/entries"): "clear_entries_v1_pools__pool__entries_delete",
    ("GET", "/v1/pools/{pool}/entries"): "list_entries_v1_pools__pool__entries_get",
    ("POST", "/v1/pools/{pool}/entries"): "add_entries_v1_pools__pool__entries_post",
    ("POST", "/v1/pools/{pool}/promote"): "promote_v1_pools__pool__promote_post",
    ("POST", "/v1/pools/{pool}/ready"): "ready_v1_pools__pool__ready_post",
    ("GET", "/v1/runs"): "list_runs_v1_runs_get",
    ("POST", "/v1/runs"): "open_run_v1_runs_post",
    ("GET", "/v1/runs/{run_id}"): "get_run_v1_runs__run_id__get",
    ("POST", "/v1/runs/{run_id}/cancel"): "cancel_run_v1_runs__run_id__cancel_post",
    ("GET", "/v1/runs/{run_id}/events"): "list_events_v1_runs__run_id__events_get",
    ("POST", "/v1/runs/{run_id}/events"): "append_events_v1_runs__run_id__events_post",
    ("GET", "/v1/runs/{run_id}/events/stream"): "stream_events_v1_runs__run_id__events_stream_get",
    ("GET", "/v1/runs/{run_id}/logs"): "get_logs_v1_runs__run_id__logs_get",
    ("GET", "/v1/runs/{run_id}/mapping"): "resolve_run_v1_runs__run_id__mapping_get",
    ("PUT", "/v1/runs/{run_id}/mapping"): "map_run_v1_runs__run_id__mapping_put",
    ("POST", "/v1/runs/{run_id}/mapping/block"): "block_run_v1_runs__run_id__mapping_block_post",
    ("GET", "/v1/runs/{run_id}/observations"): "get_observations_v1_runs__run_id__observations_get",
    ("POST", "/v1/runs/{run_id}/observations"): "post_observations_v1_runs__run_id__observations_post",
    ("GET", "/v1/runs/{run_id}/sheets"): "get_sheets_v1_runs__run_id__sheets_get",
    ("POST", "/v1/runs/{run_id}/sheets"): "record_sheets_v1_runs__run_id__sheets_post",
    ("POST", "/v1/runs/{run_id}/status"): "status_upload_v1_runs__run_id__status_post",
    ("GET", "/v1/runs/{run_id}/terminal"): "get_terminal_v1_runs__run_id__terminal_get",
    ("PUT", "/v1/runs/{run_id}/terminal"): "set_terminal_v1_runs__run_id__terminal_put",
    ("DELETE", "/v1/stream/{name}"): "delete_stream_v1_stream__name__delete",
    ("GET", "/v1/stream/{name}"): "read_stream_v1_stream__name__get",
    ("HEAD", "/v1/stream/{name}"): "head_stream_v1_stream__name__head",
    ("POST", "/v1/stream/{name}"): "append_stream_v1_stream__name__post",
    ("PUT", "/v1/stream/{name}"): "create_stream_v1_stream__name__put",
    ("POST", "/v1/tokens"): "mint_token_v1_tokens_post",
}


def new_app(url: str = "postgresql://unused/db", *, public_docs: bool = False) -> FastAPI:
    return create_app(ServiceSettings(watchdog=False, public_docs=public_docs), url, [TOKEN])


def test_the_installed_middleware_are_the_declared_order() -> None:
    assert [entry.cls for entry in new_app().user_middleware] == list(MIDDLEWARE_ORDER)
    assert MIDDLEWARE_ORDER[-1] is AppendRoute
    assert MIDDLEWARE_ORDER.index(IdempotencyMiddleware) < MIDDLEWARE_ORDER.index(AppendRoute)


def test_operation_ids_are_the_handlers_names_unchanged() -> None:
    document = new_app(public_docs=True).openapi()
    got = {
        (method.upper(), path): operation["operationId"]
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }
    assert got == OPERATION_IDS
    # Each starts with its handler's own name: nothing rewrites it.
    assert not any(operation_id.startswith("_") for operation_id in got.values())


async def appended_twice_with_one_key(app: FastAPI) -> list[int]:
    """The status of the same append sent twice with one Idempotency-Key, then the run's lines."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://in-process", headers=AUTH) as http:
            assert (await http.post("/v1/runs", json={"run_id": "r-order"})).status_code in (200, 201)
            for _ in range(2):
                sent = await http.post(
                    "/v1/runs/r-order/events",
                    json={"events": [{"type": "log", "line": "once"}]},
                    headers={"Idempotency-Key": "k-order"},
                )
                assert sent.status_code == 200, sent.text
            page = (await http.get("/v1/runs/r-order/events")).json()
    return [event["seq"] for event in page["events"]]


async def test_the_order_keeps_an_idempotent_append_written_once(clean_database_url: str) -> None:
    assert await appended_twice_with_one_key(new_app(clean_database_url)) == [1]


async def test_serving_appends_outside_idempotency_writes_a_retry_twice(
    clean_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the order protects: moved outside Idempotency-Key handling, the append route answers
    # before the key is looked at, and a retried append is written again.
    reordered: list[Any] = [cls for cls in MIDDLEWARE_ORDER if cls is not AppendRoute]
    reordered.insert(reordered.index(IdempotencyMiddleware), AppendRoute)
    monkeypatch.setattr(app_module, "MIDDLEWARE_ORDER", tuple(reordered))
    assert await appended_twice_with_one_key(new_app(clean_database_url)) == [1, 2]
