"""Who may do what, against the real service: every route × every scope (admin, read, a run token
for the run, a run token for another run), with nothing written where refused; a run token's
attempt bound; expiry; minting (admin only, replicas sharing the secret, key rotation); the worker
reporting with a run token; the attempt step and one live run per instance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from click.testing import CliRunner
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from ledger import tokens
from ledger.cli.app import cli
from ledger.service.app import create_app
from ledger.service.security import require_token
from ledger.service.settings import ServiceSettings
from tests.acceptance.conftest import ROOT, Server, new_id, start_server, stop_server

SCOPES = ("read", "run", "other-run")

# Routes anyone may call (probes), or that check a session themselves (the dashboard's pages).
PUBLIC = {
    ("GET", "/healthz"),
    ("GET", "/v1/limits"),
    ("GET", "/readyz"),
    ("GET", "/"),
    ("GET", "/ui"),
    ("GET", "/ui/"),
    ("GET", "/ui/runs/{run_id}"),
    ("GET", "/ui/pool"),
    ("GET", "/ui/sign-in"),
    ("POST", "/ui/sign-in"),
    ("POST", "/ui/sign-out"),
    ("GET", "/ui/static/{name}"),
    ("GET", "/ui/{rest:path}"),
    ("GET", "/favicon.ico"),
}


@dataclass
class Ctx:
    """One row's world: its own run (opened), another run, pool, stream and instance names."""

    tag: str
    run: str = ""
    other: str = ""
    pool: str = ""
    stream: str = ""
    seq: list[int] = field(default_factory=lambda: [0])

    def __post_init__(self) -> None:
        self.run, self.other = f"{self.tag}-run", f"{self.tag}-other"
        self.pool, self.stream = f"{self.tag}-pool", f"{self.tag}-stream"

    def next_seq(self) -> int:
        self.seq[0] += 1
        return self.seq[0]


Request = Callable[[Ctx], dict[str, Any]]
OCTETS = {"Content-Type": "application/octet-stream"}


def req(method: str, path: str, **kwargs: Any) -> Request:
    def build(ctx: Ctx) -> dict[str, Any]:
        filled = path.format(run=ctx.run, pool=ctx.pool, stream=ctx.stream, tag=ctx.tag)
        body = kwargs.get("json")
        if callable(body):
            body = body(ctx)
        return {
            "method": method,
            "url": filled,
            **{k: v for k, v in kwargs.items() if k != "json"},
            **({"json": body} if body is not None else {}),
        }

    return build


ALL, READERS, WORKER, ADMIN = {"read", "run"}, {"read"}, {"run"}, set[str]()
RUN = "/v1/runs/{run}"
POOL = "/v1/pools/{pool}"

# (method, route path) -> (the scopes besides admin that may, a request of it). Admin may all.
TABLE: dict[tuple[str, str], tuple[set[str], Request]] = {
    ("POST", "/v1/runs"): (WORKER, req("POST", "/v1/runs", json=lambda c: {"run_id": c.run})),
    ("GET", "/v1/runs"): (READERS, req("GET", "/v1/runs")),
    ("GET", "/v1/runs/{run_id}"): (ALL, req("GET", RUN)),
    ("GET", "/v1/runs/{run_id}/logs"): (ALL, req("GET", RUN + "/logs")),
    ("POST", "/v1/runs/{run_id}/events"): (
        WORKER,
        req("POST", RUN + "/events", json={"events": [{"type": "log", "line": "x"}]}),
    ),
    ("GET", "/v1/runs/{run_id}/events"): (ALL, req("GET", RUN + "/events", params={"timeout_ms": 0})),
    ("GET", "/v1/runs/{run_id}/events/stream"): (ALL, req("GET", RUN + "/events/stream")),
    ("PUT", "/v1/runs/{run_id}/terminal"): (
        ADMIN,
        req("PUT", RUN + "/terminal", json={"status": "completed"}),
    ),
    ("GET", "/v1/runs/{run_id}/terminal"): (ALL, req("GET", RUN + "/terminal")),
    ("POST", "/v1/runs/{run_id}/cancel"): (WORKER, req("POST", RUN + "/cancel", json={"reason": "scopes"})),
    ("PUT", "/v1/runs/{run_id}/mapping"): (
        WORKER,
        req("PUT", RUN + "/mapping", json=lambda c: {"instance_id": f"{c.tag}-i", "version": "v1"}),
    ),
    ("POST", "/v1/runs/{run_id}/mapping/block"): (
        WORKER,
        req("POST", RUN + "/mapping/block", json=lambda c: {"instance_id": f"{c.tag}-j", "version": "v1"}),
    ),
    ("GET", "/v1/runs/{run_id}/mapping"): (ALL, req("GET", RUN + "/mapping", params={"version": "v1"})),
    ("POST", "/v1/runs/{run_id}/status"): (
        WORKER,
        req(
            "POST",
            RUN + "/status",
            json=lambda c: {"status": "running", "producer_attempt": 1, "upload_seq": c.next_seq()},
        ),
    ),
    ("POST", "/v1/runs/{run_id}/sheets"): (
        WORKER,
        req(
            "POST",
            RUN + "/sheets",
            json={"rows": [{"table_namespace": "t", "row_key": "k", "status": "completed"}]},
        ),
    ),
    ("GET", "/v1/runs/{run_id}/sheets"): (ALL, req("GET", RUN + "/sheets")),
    ("POST", "/v1/runs/{run_id}/observations"): (
        WORKER,
        req(
            "POST",
            RUN + "/observations",
            json={"observations": [{"node_id": "n", "attempt": 1, "status": "completed"}]},
        ),
    ),
    ("GET", "/v1/runs/{run_id}/observations"): (ALL, req("GET", RUN + "/observations")),
    ("POST", "/v1/pools/{pool}/entries"): (
        ADMIN,
        req(
            "POST", POOL + "/entries", json=lambda c: {"version": "v1", "ids": [f"{c.tag}-a"], "ready": True}
        ),
    ),
    ("GET", "/v1/pools/{pool}/entries"): (READERS, req("GET", POOL + "/entries", params={"version": "v1"})),
    ("DELETE", "/v1/pools/{pool}/entries"): (ADMIN, req("DELETE", POOL + "/entries")),
    ("POST", "/v1/pools/{pool}/claim"): (
        ADMIN,
        req("POST", POOL + "/claim", json=lambda c: {"version": "v1", "run_id": c.run}),
    ),
    ("GET", "/v1/pools/{pool}/counts"): (READERS, req("GET", POOL + "/counts", params={"version": "v1"})),
    ("POST", "/v1/pools/{pool}/promote"): (
        ADMIN,
        req("POST", POOL + "/promote", json=lambda c: {"version": "v1", "ids": [f"{c.tag}-a"]}),
    ),
    ("POST", "/v1/pools/{pool}/ready"): (
        ADMIN,
        req("POST", POOL + "/ready", json=lambda c: {"version": "v1", "id": f"{c.tag}-a"}),
    ),
    ("POST", "/v1/pools/{pool}/delete"): (
        ADMIN,
        req("POST", POOL + "/delete", json=lambda c: {"version": "v1", "ids": [f"{c.tag}-a"]}),
    ),
    ("GET", "/metrics"): (READERS, req("GET", "/metrics")),
    ("GET", "/openapi.json"): (READERS, req("GET", "/openapi.json")),
    ("POST", "/v1/tokens"): (ADMIN, req("POST", "/v1/tokens", json={"scope": "read"})),
    ("PUT", "/v1/stream/{name:path}"): (
        ADMIN,
        req("PUT", "/v1/stream/{stream}-new", headers=OCTETS, content=b"x"),
    ),
    ("POST", "/v1/stream/{name:path}"): (
        ADMIN,
        req("POST", "/v1/stream/{stream}", headers=OCTETS, content=b"y"),
    ),
    ("DELETE", "/v1/stream/{name:path}"): (ADMIN, req("DELETE", "/v1/stream/{stream}")),
    ("HEAD", "/v1/stream/{name:path}"): (READERS, req("HEAD", "/v1/stream/{stream}")),
    ("GET", "/v1/stream/{name:path}"): (READERS, req("GET", "/v1/stream/{stream}")),
    ("GET", "/ui/api/pools"): (READERS, req("GET", "/ui/api/pools")),
}


def _needs_token(route: APIRoute) -> bool:
    pending = list(route.dependant.dependencies)
    while pending:
        dependency = pending.pop()
        if dependency.call is require_token:
            return True
        pending.extend(dependency.dependencies)
    return False


def _api_routes(routes: Iterable[BaseRoute]) -> Iterator[APIRoute]:
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "effective_route_contexts"):
            # FastAPI keeps an included router whole; its routes are reached through it.
            for context in route.effective_route_contexts():
                yield from _api_routes([context.original_route])


def app_routes() -> set[tuple[str, str, bool]]:
    """(method, path, guarded) of every route of the app as `ledger serve` builds it."""
    app = create_app(ServiceSettings(), "postgresql://unused/db", ["admin"])
    return {
        (method, route.path, _needs_token(route))
        for route in _api_routes(app.routes)
        for method in route.methods
    }


ROUTES = app_routes()


def test_every_route_has_a_scope_decision() -> None:
    """A new route fails here until it is in TABLE (guarded) or PUBLIC (unguarded) above."""
    guarded = {(method, path) for method, path, needs in ROUTES if needs}
    unguarded = {(method, path) for method, path, needs in ROUTES if not needs}
    assert guarded - TABLE.keys() == set(), "guarded routes with no row in TABLE"
    # A row whose route vanished is a decision nobody checks any more: remove it with the route.
    assert TABLE.keys() - guarded == set(), "rows of TABLE for routes that are gone or unguarded"
    assert unguarded - PUBLIC == set(), "routes without require_token that are not known to be public"
    assert guarded & PUBLIC == set()
    assert len(guarded) >= 30, "the routes were not found (FastAPI's router internals changed?)"


# -- the service, its tokens, the database ----------------------------------------------------------


def mint(server: Server, **body: Any) -> str:
    answer = httpx.post(server.base_url + "/v1/tokens", json=body, headers=server.headers, timeout=30)
    assert answer.status_code == 200, answer.text
    token: str = answer.json()["token"]
    return token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Callers:
    ctx: Ctx
    tokens: dict[str, str]


def callers(server: Server, ctx: Ctx) -> Callers:
    return Callers(
        ctx,
        {
            "admin": server.token,
            "read": mint(server, scope="read", ttl_s=300),
            "run": mint(server, scope="run", run_id=ctx.run, max_attempt=2, ttl_s=300),
            "other-run": mint(server, scope="run", run_id=ctx.other, max_attempt=2, ttl_s=300),
        },
    )


def tagged_rows(database_url: str, tag: str) -> dict[str, list[str]]:
    """Every row of every ledger table that mentions `tag` (run ids, pools, streams, paths of
    Idempotency-Key answers all carry it): what a request of this test could have written."""
    found: dict[str, list[str]] = {}
    with psycopg.connect(database_url) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'ledger' "
            "AND table_type = 'BASE TABLE' ORDER BY table_name"
        ).fetchall()
        for (table,) in tables:
            rows = conn.execute(
                f"SELECT t::text FROM ledger.{table} t WHERE t::text LIKE %s ORDER BY 1", (f"%{tag}%",)
            ).fetchall()
            found[table] = [row[0] for row in rows]
    return found


def send(http: httpx.Client, request: dict[str, Any], token: str, **extra_headers: str) -> httpx.Response:
    headers = {**request.get("headers", {}), **bearer(token), **extra_headers}
    spec = {k: v for k, v in request.items() if k != "headers"}
    if spec["url"].endswith("/events/stream"):
        # A live stream: the status line is the answer here; the stream is dropped after it.
        with http.stream(headers=headers, **spec) as response:
            if response.status_code != 200:
                response.read()
            return response
    return http.request(headers=headers, **spec)


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        yield client


def setup_world(http: httpx.Client, admin: str, ctx: Ctx) -> None:
    def ok(answer: httpx.Response) -> None:
        assert answer.status_code < 300, answer.text

    ok(http.post("/v1/runs", json={"run_id": ctx.run}, headers=bearer(admin)))
    ok(
        http.post(
            f"/v1/pools/{ctx.pool}/entries",
            # An instance id names one instance in every pool: each test has its own.
            json={"version": "v1", "ids": [f"{ctx.tag}-a"]},
            headers=bearer(admin),
        )
    )
    ok(http.put(f"/v1/stream/{ctx.stream}", content=b"s", headers={**OCTETS, **bearer(admin)}))


@pytest.mark.parametrize("route", sorted(TABLE), ids=lambda r: f"{r[0]} {r[1]}")
def test_each_scope_on_each_route(
    route: tuple[str, str], server: Server, http: httpx.Client, database_url: str
) -> None:
    assert any((route[0], route[1]) == (m, p) for m, p, _ in ROUTES), f"{route} is not a route any more"
    allowed, request = TABLE[route]
    ctx = Ctx(new_id("scope"))
    who = callers(server, ctx)
    setup_world(http, server.token, ctx)
    denied = [scope for scope in SCOPES if scope not in allowed]
    before = tagged_rows(database_url, ctx.tag)
    for scope in denied:
        # With an Idempotency-Key: not even the refusal is kept.
        answer = send(http, request(ctx), who.tokens[scope], **{"Idempotency-Key": f"{ctx.tag}-{scope}"})
        assert answer.status_code == 403, (scope, answer.text)
        if route[0] != "HEAD":
            body = answer.json()
            assert body["code"] == "forbidden"
            assert ("read token" if scope == "read" else "run token") in body["error"], body
    assert tagged_rows(database_url, ctx.tag) == before, "a refused request wrote something"
    for scope in [*sorted(allowed), "admin"]:
        answer = send(http, request(ctx), who.tokens[scope])
        assert answer.status_code < 300, (scope, answer.status_code, answer.text)


# -- a run token's bounds ---------------------------------------------------------------------------


def test_a_run_token_cannot_touch_another_run_nor_upload_past_its_attempt(
    server: Server, http: httpx.Client, database_url: str
) -> None:
    ctx = Ctx(new_id("attempt"))
    token = mint(server, scope="run", run_id=ctx.run, max_attempt=2)
    before = tagged_rows(database_url, ctx.tag)
    refused = {
        "another run": http.post(
            f"/v1/runs/{ctx.other}/status",
            json={"status": "running", "producer_attempt": 1},
            headers=bearer(token),
        ),
        "another run opened": http.post("/v1/runs", json={"run_id": ctx.other}, headers=bearer(token)),
        "past its attempt": http.post(
            f"/v1/runs/{ctx.run}/status",
            json={"status": "running", "producer_attempt": 3, "upload_seq": 1},
            headers=bearer(token),
        ),
        "no attempt named": http.post(
            f"/v1/runs/{ctx.run}/status", json={"status": "running", "upload_seq": 1}, headers=bearer(token)
        ),
        "fencing out everyone": http.post(
            f"/v1/runs/{ctx.run}/status",
            json={"status": "running", "producer_attempt": 2_147_483_647},
            headers=bearer(token),
        ),
    }
    for why, answer in refused.items():
        assert answer.status_code == 403, (why, answer.text)
        assert answer.json()["code"] == "forbidden"
    assert "may not upload as producer attempt 3" in refused["past its attempt"].json()["error"]
    assert f"may not touch run '{ctx.other}'" in refused["another run"].json()["error"]
    assert tagged_rows(database_url, ctx.tag) == before
    for attempt in (1, 2):
        upload = {
            "status": "running",
            "producer_attempt": attempt,
            "upload_seq": 1,
            "live_logs": [f"a{attempt}"],
        }
        answer = http.post(f"/v1/runs/{ctx.run}/status", json=upload, headers=bearer(token))
        assert answer.status_code == 200, answer.text
        assert answer.json()["producer_attempt"] == attempt


def test_an_attempt_far_ahead_of_the_run_is_422_even_for_admin(
    server: Server, http: httpx.Client, database_url: str
) -> None:
    ctx = Ctx(new_id("step"))
    admin = bearer(server.token)
    first = {"status": "running", "producer_attempt": 1, "upload_seq": 1}
    assert http.post(f"/v1/runs/{ctx.run}/status", json=first, headers=admin).status_code == 200
    before = tagged_rows(database_url, ctx.tag)
    far = {"status": "running", "producer_attempt": 12, "upload_seq": 1, "live_logs": ["x"]}
    answer = http.post(f"/v1/runs/{ctx.run}/status", json=far, headers=admin)
    assert answer.status_code == 422
    assert answer.json()["error"].startswith("producer_attempt: 12 is more than 10 above")
    assert tagged_rows(database_url, ctx.tag) == before
    near = {**far, "producer_attempt": 11}
    assert http.post(f"/v1/runs/{ctx.run}/status", json=near, headers=admin).status_code == 200


def test_an_instance_mapped_to_a_live_run_is_refused_to_another(server: Server, http: httpx.Client) -> None:
    ctx = Ctx(new_id("busy"))
    admin = bearer(server.token)
    instance = {"instance_id": f"{ctx.tag}-i", "version": "v1"}
    assert http.post("/v1/runs", json={"run_id": ctx.run}, headers=admin).status_code == 200
    assert http.put(f"/v1/runs/{ctx.run}/mapping", json=instance, headers=admin).json() == {"mapped": True}
    # The other run's own worker, with its own run token, still cannot take the instance.
    other_token = mint(server, scope="run", run_id=ctx.other, max_attempt=1)
    taken = http.put(f"/v1/runs/{ctx.other}/mapping", json=instance, headers=bearer(other_token))
    assert taken.status_code == 409
    assert taken.json()["code"] == "instance_mapped"
    assert (
        http.get(f"/v1/runs/{ctx.other}/mapping", params={"version": "v1"}, headers=admin).json()[
            "instance_id"
        ]
        is None
    )
    # Once the first run has ended, the instance is free.
    ended = http.put(f"/v1/runs/{ctx.run}/terminal", json={"status": "completed"}, headers=admin)
    assert ended.status_code == 200, ended.text
    again = http.put(f"/v1/runs/{ctx.other}/mapping", json=instance, headers=bearer(other_token))
    assert again.json() == {"mapped": True}


# -- expiry and credentials -------------------------------------------------------------------------


def server_keyring(server: Server) -> tokens.Keyring:
    # start_server puts the data dir (and the generated token secret in it) beside the log.
    secret = server.log_path.parent / "data" / "token-secret"
    return tokens.parse_keyring(secret.read_text())


def test_an_expired_token_is_401_and_a_forged_one_too(server: Server, http: httpx.Client) -> None:
    keyring = server_keyring(server)
    expired, _ = tokens.mint(keyring, tokens.Scope.READ, now_s=time.time() - 120, ttl_s=60)
    answer = http.get("/v1/runs", headers=bearer(expired))
    assert answer.status_code == 401
    assert answer.json()["code"] == "token_expired"
    assert answer.headers["www-authenticate"] == "Bearer"
    # The same claims, signed here with the service's key, are accepted: expiry is all that differs.
    valid, _ = tokens.mint(keyring, tokens.Scope.READ, now_s=time.time(), ttl_s=60)
    assert http.get("/v1/runs", headers=bearer(valid)).status_code == 200
    # Signed with another key (an attacker's): refused.
    forged, _ = tokens.mint(tokens.parse_keyring(tokens.generate_key()), tokens.Scope.READ, now_s=time.time())
    refused = http.get("/v1/runs", headers=bearer(forged))
    assert refused.status_code == 401 and refused.json()["code"] == "unauthorized"


def test_minting_is_admin_only_and_checks_its_input(server: Server, http: httpx.Client) -> None:
    read = mint(server, scope="read")
    run = mint(server, scope="run", run_id=new_id("r"), max_attempt=1)
    for token in (read, run):
        answer = http.post("/v1/tokens", json={"scope": "read"}, headers=bearer(token))
        assert answer.status_code == 403 and answer.json()["code"] == "forbidden"
    admin = bearer(server.token)
    for body, field_name in (
        ({"scope": "admin"}, "scope"),
        ({"scope": "run", "max_attempt": 1}, "run_id"),
        ({"scope": "run", "run_id": "r"}, "max_attempt"),
        ({"scope": "read", "run_id": "r"}, "run_id"),
        ({"scope": "run", "run_id": "a/b", "max_attempt": 1}, "run_id"),
        ({"scope": "read", "ttl_s": 0}, "ttl_s"),
        ({"scope": "read", "ttl_s": "60"}, "ttl_s"),
        ({"scope": "read", "forever": True}, "forever"),
    ):
        answer = http.post("/v1/tokens", json=body, headers=admin)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["error"].startswith(field_name), (body, answer.json())
    minted = http.post(
        "/v1/tokens", json={"scope": "run", "run_id": "r-1", "max_attempt": 3, "ttl_s": 90}, headers=admin
    )
    assert minted.headers["cache-control"] == "no-store"
    body = minted.json()
    assert (body["scope"], body["run_id"], body["max_attempt"]) == ("run", "r-1", 3)
    assert abs(body["expires_at"] - (time.time() + 90) * 1000) < 60_000


# -- replicas and rotation --------------------------------------------------------------------------

OLD_KEY = "k1:acceptance-old-secret-0123456789"
NEW_KEY = "k2:acceptance-new-secret-0123456789"


@pytest.fixture(scope="module")
def replicas(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    """Two replicas on one database: `old` knows only k1; `rotated` signs with k2, still verifies k1."""
    old = start_server(database_url, tmp_path_factory.mktemp("replica-old"), LEDGER_TOKEN_SECRET=OLD_KEY)
    try:
        rotated = start_server(
            database_url,
            tmp_path_factory.mktemp("replica-rotated"),
            LEDGER_TOKEN_SECRET=f"{NEW_KEY},{OLD_KEY}",
            LEDGER_API_TOKENS=old.token,
        )
        try:
            yield old, rotated
        finally:
            stop_server(rotated)
    finally:
        stop_server(old)


def test_a_token_minted_by_one_replica_is_verified_by_another_across_a_rotation(
    replicas: tuple[Server, Server],
) -> None:
    old, rotated = replicas
    run_id = new_id("replica")
    by_old = mint(old, scope="run", run_id=run_id, max_attempt=1)
    # Minted with k1 on one replica, used on the other, which has rotated to k2 but still lists k1.
    opened = httpx.post(rotated.base_url + "/v1/runs", json={"run_id": run_id}, headers=bearer(by_old))
    assert opened.status_code == 200, opened.text
    by_rotated = mint(rotated, scope="read")
    assert httpx.get(rotated.base_url + f"/v1/runs/{run_id}", headers=bearer(by_rotated)).status_code == 200
    # A replica that does not list k2 refuses what k2 signed, naming the key id.
    refused = httpx.get(old.base_url + f"/v1/runs/{run_id}", headers=bearer(by_rotated))
    assert refused.status_code == 401
    assert "'k2'" in refused.json()["error"]


# -- the worker side ----------------------------------------------------------------------------------


def report(
    server: Server, tmp_path: Path, token: str, run_id: str, *flags: str
) -> subprocess.CompletedProcess[str]:
    lines = [{"type": "log", "line": "hello"}, {"type": "result", "status": "completed"}]
    env = {
        **os.environ,
        "LEDGER_URL": server.base_url,
        "LEDGER_TOKEN": token,
        "LEDGER_DATA_DIR": str(tmp_path),
    }
    env.pop("LEDGER_API_TOKENS", None)
    return subprocess.run(
        [sys.executable, "-m", "ledger.cli", "report", "--run-id", run_id, *flags],
        cwd=ROOT,
        env=env,
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_ledger_report_runs_on_a_run_token_minted_with_ledger_token_create(
    server: Server, http: httpx.Client, tmp_path: Path
) -> None:
    run_id = new_id("worker")
    env = {
        **os.environ,
        "LEDGER_URL": server.base_url,
        "LEDGER_TOKEN": server.token,
        "LEDGER_DATA_DIR": str(tmp_path),
    }
    env.pop("LEDGER_API_TOKENS", None)
    created = subprocess.run(
        [
            sys.executable,
            "-m",
            "ledger.cli",
            "token",
            "create",
            "--scope",
            "run",
            "--run-id",
            run_id,
            "--max-attempt",
            "1",
            "--ttl",
            "1h",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert tokens.looks_minted(token) and "\n" not in token
    done = report(server, tmp_path, token, run_id)
    assert done.returncode == 0, done.stderr
    run = http.get(f"/v1/runs/{run_id}", headers=bearer(server.token)).json()
    assert run["terminal"]["status"] == "completed" and run["live_log_count"] == 1
    # The same token cannot report another run: its first upload is refused, and it stops there.
    elsewhere = report(server, tmp_path, token, new_id("worker-b"))
    assert elsewhere.returncode == 10, elsewhere.stderr
    assert "run token" in elsewhere.stderr


def test_ledger_token_create_refuses_bad_options_before_asking(tmp_path: Path) -> None:
    # Nothing listens at LEDGER_URL: a usage error must come before any request.
    env = {"LEDGER_URL": "http://127.0.0.1:9", "LEDGER_TOKEN": "admin", "LEDGER_DATA_DIR": str(tmp_path)}
    for args in (
        ["--scope", "run"],
        ["--scope", "run", "--run-id", "r"],
        ["--scope", "read", "--run-id", "r"],
        ["--scope", "read", "--ttl", "forever"],
        ["--scope", "read", "--ttl", "999d"],
        ["--scope", "admin"],
    ):
        refused = CliRunner().invoke(cli, ["token", "create", *args], env=env)
        assert refused.exit_code == 2, (args, refused.output)
