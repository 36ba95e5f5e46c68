"""Health, readiness, metrics, auth, OpenAPI, body limit and error shape of the real service."""

from __future__ import annotations

import httpx

from tests.acceptance.conftest import TOKENS, Server

# The wire contract clients and workers are written against: every one of these must exist with
# exactly this path.
CONTRACT = [
    ("POST", "/v1/runs"),
    ("GET", "/v1/runs/{run_id}"),
    ("POST", "/v1/runs/{run_id}/events"),
    ("GET", "/v1/runs/{run_id}/events"),
    ("GET", "/v1/runs/{run_id}/events/stream"),
    ("POST", "/v1/runs/{run_id}/status"),
    ("POST", "/v1/runs/{run_id}/sheets"),
    ("GET", "/v1/runs/{run_id}/sheets"),
    ("POST", "/v1/runs/{run_id}/observations"),
    ("GET", "/v1/runs/{run_id}/observations"),
    ("PUT", "/v1/runs/{run_id}/terminal"),
    ("GET", "/v1/runs/{run_id}/terminal"),
    ("PUT", "/v1/runs/{run_id}/mapping"),
    ("POST", "/v1/runs/{run_id}/mapping/block"),
    ("GET", "/v1/runs/{run_id}/mapping"),
    ("POST", "/v1/pools/{pool}/entries"),
    ("GET", "/v1/pools/{pool}/entries"),
    ("DELETE", "/v1/pools/{pool}/entries"),
    ("POST", "/v1/pools/{pool}/claim"),
    ("GET", "/v1/pools/{pool}/counts"),
    ("POST", "/v1/pools/{pool}/promote"),
    ("POST", "/v1/pools/{pool}/ready"),
    ("POST", "/v1/pools/{pool}/delete"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
]
OPEN = {"/healthz", "/readyz"}
PROTECTED = [
    (m, p.replace("{run_id}", "some-run").replace("{pool}", "default")) for m, p in CONTRACT if p not in OPEN
]


def test_health_and_readiness_need_no_token(server: Server) -> None:
    assert httpx.get(server.base_url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(server.base_url + "/readyz")
    assert ready.status_code == 200
    assert ready.json()["database"] is True
    assert ready.json()["listener"] is True


def test_every_other_endpoint_refuses_a_missing_or_wrong_token(server: Server) -> None:
    with httpx.Client(base_url=server.base_url) as anonymous:
        for method, path in PROTECTED:
            missing = anonymous.request(method, path, json={})
            assert missing.status_code == 401, (method, path)
            assert "bearer token" in missing.json()["error"]
            assert missing.headers["www-authenticate"] == "Bearer"
            wrong = anonymous.request(method, path, json={}, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401, (method, path)
            assert wrong.json() == {"error": "invalid bearer token", "code": "unauthorized"}
            basic = anonymous.request(method, path, headers={"Authorization": f"Basic {TOKENS[0]}"})
            assert basic.status_code == 401, (method, path)


def test_every_configured_token_is_accepted(server: Server) -> None:
    for token in TOKENS:
        answer = httpx.get(server.base_url + "/metrics", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200
        # A prefix or an extension of a valid token is not valid.
        for near in (token[:-1], token + "x"):
            refused = httpx.get(server.base_url + "/metrics", headers={"Authorization": f"Bearer {near}"})
            assert refused.status_code == 401


def test_metrics_count_requests_by_route_template(client: httpx.Client) -> None:
    for run_id in ("metrics-a", "metrics-b"):
        client.get(f"/v1/runs/{run_id}")
    text = client.get("/metrics").text
    assert 'ledger_http_requests_total{method="GET",route="/v1/runs/{run_id}",status="404"}' in text
    # Raw paths never become labels.
    assert "metrics-a" not in text
    for name in (
        "ledger_http_request_duration_seconds_bucket",
        "ledger_listener_reconnects",
        "ledger_waiters",
    ):
        assert name in text


def test_openapi_schema_needs_the_token_and_lists_the_contract(server: Server) -> None:
    assert httpx.get(server.base_url + "/openapi.json").status_code == 401
    schema = httpx.get(server.base_url + "/openapi.json", headers=server.headers).json()
    offered = {(method.upper(), path) for path, item in schema["paths"].items() for method in item}
    assert set(CONTRACT) <= offered
    claim = schema["paths"]["/v1/pools/{pool}/claim"]["post"]
    assert claim["security"] == [{"HTTPBearer": []}]
    body = schema["components"]["schemas"]["Claim"]
    assert set(body["properties"]) == {"version", "run_id", "min_ready_age_ms"}
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_unknown_paths_and_methods_answer_json_errors(client: httpx.Client) -> None:
    missing = client.get("/v2/nothing")
    assert missing.status_code == 404
    assert missing.json() == {"error": "no such endpoint: GET /v2/nothing", "code": "not_found"}
    wrong_method = client.patch("/v1/runs")
    assert wrong_method.status_code == 405
    assert "PATCH" in wrong_method.json()["error"]


def test_a_body_over_the_limit_is_refused_before_parsing(client: httpx.Client) -> None:
    big = b'{"run_id": "' + b"x" * (1024 * 1024) + b'"}'
    declared = client.post("/v1/runs", content=big, headers={"Content-Type": "application/json"})
    assert declared.status_code == 413
    assert "larger than the limit of 1048576 bytes" in declared.json()["error"]

    def chunks() -> object:
        # No Content-Length: the limit is enforced on the bytes as they stream in.
        for start in range(0, len(big), 64 * 1024):
            yield big[start : start + 64 * 1024]

    streamed = client.post("/v1/runs", content=chunks(), headers={"Content-Type": "application/json"})  # type: ignore[arg-type]
    assert streamed.status_code == 413


def test_access_log_is_json_with_the_run_id(server: Server, client: httpx.Client) -> None:
    client.get("/v1/runs/logged-run-42")
    import json
    import time

    # The access line is written once the answer is sent: the client may read the log first.
    deadline = time.monotonic() + 10
    while True:
        # Only whole lines: the server may be half-way through writing the last one.
        whole = server.log().rpartition("\n")[0]
        # Split at "\n" only: a JSON string may hold U+2028 or U+0085, which `splitlines` breaks at.
        lines = [json.loads(line) for line in whole.split("\n") if line.startswith("{")]
        access = [entry for entry in lines if entry.get("run_id") == "logged-run-42"]
        if access or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert access, "no JSON log line carries the run id"
    assert access[-1]["route"] == "/v1/runs/{run_id}"
    assert access[-1]["status"] == 404


def test_openapi_schema_documents_idempotency_keys_and_503(server: Server) -> None:
    schema = httpx.get(server.base_url + "/openapi.json", headers=server.headers).json()
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            headers = [p["name"] for p in operation.get("parameters", []) if p["in"] == "header"]
            assert ("Idempotency-Key" in headers) == (method in ("post", "put")), (method, path)
            if path.startswith("/v1/"):
                assert "Retry-After" in operation["responses"]["503"]["headers"], (method, path)
    # Asked twice, the schema is the same (amended once).
    assert httpx.get(server.base_url + "/openapi.json", headers=server.headers).json() == schema
