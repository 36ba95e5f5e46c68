"""The dashboard's session rules over plain HTTP: sign-in sets the cookie (and only for a token the
service accepts, from its own page), the cookie reads but never writes, pages send a visitor
without it to sign-in, and every page carries a strict Content-Security-Policy."""

from __future__ import annotations

import fnmatch
import re
import time
import tomllib
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest

from tests.acceptance.conftest import ROOT, TOKENS, Server, new_id

COOKIE = "ledger_session"


@pytest.fixture
def anonymous(server: Server) -> Iterator[httpx.Client]:
    """A client that sends no Authorization header and follows no redirect."""
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        yield http


@pytest.fixture
def browser_like(server: Server) -> Iterator[httpx.Client]:
    """A client holding only the session cookie, as a signed-in browser does."""
    with httpx.Client(base_url=server.base_url, timeout=30, cookies={COOKIE: TOKENS[0]}) as http:
        yield http


def set_cookie_header(response: httpx.Response) -> str:
    headers = [v for k, v in response.headers.multi_items() if k.lower() == "set-cookie"]
    assert len(headers) == 1, headers
    return headers[0]


def test_root_and_bare_ui_redirect_to_the_dashboard(anonymous: httpx.Client) -> None:
    for path in ("/", "/ui"):
        response = anonymous.get(path)
        assert response.status_code == 307
        assert response.headers["location"] == "/ui/"


@pytest.mark.parametrize(
    ("path", "location"),
    [
        ("/ui/", "/ui/sign-in"),
        ("/ui/pool", "/ui/sign-in?next=/ui/pool"),
        ("/ui/runs/any-run", "/ui/sign-in?next=/ui/runs/any-run"),
        ("/ui/runs/a%20b?x=1", "/ui/sign-in?next=/ui/runs/a%2520b%3Fx%3D1"),
    ],
)
def test_a_page_without_a_session_redirects_to_sign_in_and_back(
    anonymous: httpx.Client, path: str, location: str
) -> None:
    response = anonymous.get(path)
    assert response.status_code == 303
    assert response.headers["location"] == location


def test_signing_in_leads_back_to_the_page_asked_for(anonymous: httpx.Client) -> None:
    asked = anonymous.get("/ui/runs/a%20b", params={"x": "1"}).headers["location"]
    form = anonymous.get(asked)
    assert '<input type="hidden" name="next" value="/ui/runs/a%20b?x=1">' in form.text
    form = anonymous.get("/ui/sign-in", params={"next": "/ui/runs/run-7"})
    assert '<input type="hidden" name="next" value="/ui/runs/run-7">' in form.text
    response = anonymous.post("/ui/sign-in", data={"token": TOKENS[0], "next": "/ui/runs/run-7"})
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/runs/run-7"
    # A refused token keeps where to go for the next try.
    again = anonymous.post("/ui/sign-in", data={"token": "wrong", "next": "/ui/runs/run-7"})
    assert 'name="next" value="/ui/runs/run-7"' in again.text


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example/ui/",
        "//evil.example/ui/",
        "/\\evil.example/ui/",
        "/ui/\\evil.example",
        "http:/ui/runs/x",
        "/v1/runs",
        "ui/runs/x",
        "/ui/runs/x\r\nSet-Cookie: a=b",
        "",
    ],
)
def test_signing_in_never_leads_off_the_dashboard(anonymous: httpx.Client, target: str) -> None:
    form = anonymous.get("/ui/sign-in", params={"next": target})
    assert 'name="next" value="/ui/"' in form.text
    response = anonymous.post("/ui/sign-in", data={"token": TOKENS[0], "next": target})
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/"


def test_a_cookie_with_a_wrong_token_is_no_session(server: Server) -> None:
    with httpx.Client(base_url=server.base_url, cookies={COOKIE: "wrong"}) as http:
        assert http.get("/ui/").status_code == 303
        assert http.get("/v1/runs").status_code == 401


def test_sign_in_sets_an_http_only_strict_session_cookie(anonymous: httpx.Client) -> None:
    response = anonymous.post("/ui/sign-in", data={"token": TOKENS[1]})
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/"
    cookie = set_cookie_header(response)
    attributes = [part.strip().lower() for part in cookie.split(";")]
    assert attributes[0] == f"{COOKIE}={TOKENS[1]}".lower()
    assert "httponly" in attributes
    assert "samesite=strict" in attributes
    assert "path=/" in attributes
    assert "secure" not in attributes  # served over plain http
    assert not any(a.startswith(("max-age", "expires")) for a in attributes)  # a browser-session cookie
    assert TOKENS[1] not in response.headers["location"]


def test_sign_in_over_https_marks_the_cookie_secure(server: Server) -> None:
    # Behind a TLS-terminating proxy uvicorn takes the scheme from X-Forwarded-Proto (trusted from
    # loopback by default), as it would from the proxy in front of it.
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        response = http.post(
            "/ui/sign-in",
            data={"token": TOKENS[0]},
            headers={"X-Forwarded-Proto": "https", "Origin": server.base_url.replace("http:", "https:")},
        )
    assert response.status_code == 303
    assert "secure" in [p.strip().lower() for p in set_cookie_header(response).split(";")]


@pytest.mark.parametrize(("token", "status"), [("not-a-token", 401), ("", 400)])
def test_sign_in_with_a_bad_token_sets_nothing(anonymous: httpx.Client, token: str, status: int) -> None:
    response = anonymous.post("/ui/sign-in", data={"token": token})
    assert response.status_code == status
    assert "set-cookie" not in response.headers
    assert "sign-in-error" in response.text


def test_sign_in_from_another_site_is_refused(anonymous: httpx.Client) -> None:
    response = anonymous.post(
        "/ui/sign-in", data={"token": TOKENS[0]}, headers={"Origin": "https://evil.example"}
    )
    assert response.status_code == 403
    assert "set-cookie" not in response.headers


def test_sign_out_clears_the_cookie(browser_like: httpx.Client) -> None:
    response = browser_like.post("/ui/sign-out")
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/sign-in"
    cookie = set_cookie_header(response).lower()
    assert cookie.startswith(f"{COOKIE}=")
    assert "max-age=0" in cookie


def test_the_cookie_reads_pages_json_and_the_event_stream(
    browser_like: httpx.Client, client: httpx.Client
) -> None:
    run_id = new_id("ui-cookie")
    client.post("/v1/runs", json={"run_id": run_id}).raise_for_status()
    client.post(
        f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": "hi"}]}
    ).raise_for_status()
    client.put(f"/v1/runs/{run_id}/terminal", json={"status": "completed"}).raise_for_status()

    page = browser_like.get("/ui/")
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    assert any(r["run_id"] == run_id for r in browser_like.get("/v1/runs").json()["runs"])
    assert browser_like.get(f"/v1/runs/{run_id}").json()["terminal"]["status"] == "completed"
    assert browser_like.get("/ui/api/pools").status_code == 200
    with browser_like.stream("GET", f"/v1/runs/{run_id}/events/stream") as stream:
        assert stream.status_code == 200
        # The stream ends after the terminal event.
        types = [line.removeprefix("event: ") for line in stream.iter_lines() if line.startswith("event: ")]
    assert types == ["log", "terminal"]


def test_the_cookie_authorizes_no_write(browser_like: httpx.Client, client: httpx.Client) -> None:
    run_id = new_id("ui-nowrite")
    client.post("/v1/runs", json={"run_id": run_id}).raise_for_status()
    pool = new_id("ui-nowrite-pool")
    client.post(f"/v1/pools/{pool}/entries", json={"version": "v1", "ids": ["a"], "ready": True})
    attempts = [
        ("POST", "/v1/runs", {"run_id": run_id + "-new"}),
        ("POST", f"/v1/runs/{run_id}/events", {"events": [{"type": "log", "line": "x"}]}),
        ("PUT", f"/v1/runs/{run_id}/terminal", {"status": "failed"}),
        ("POST", f"/v1/runs/{run_id}/status", {"status": "failed"}),
        ("POST", f"/v1/pools/{pool}/claim", {"version": "v1", "run_id": run_id}),
        ("DELETE", f"/v1/pools/{pool}/entries", None),
        ("POST", "/v1/tokens", {"scope": "read"}),
    ]
    for method, path, body in attempts:
        response = browser_like.request(method, path, json=body)
        assert response.status_code == 401, (method, path, response.text)
    assert client.get(f"/v1/runs/{run_id}-new").status_code == 404
    assert client.get(f"/v1/runs/{run_id}/events").json()["events"] == []
    assert client.get(f"/v1/pools/{pool}/counts", params={"version": "v1"}).json()["available"] == 1


def test_pages_carry_a_strict_content_security_policy(browser_like: httpx.Client) -> None:
    for path in ("/ui/", "/ui/pool", "/ui/sign-in"):
        response = browser_like.get(path)
        assert response.status_code == 200, path
        policy = response.headers["content-security-policy"]
        directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
        assert directives["script-src"] == "'self'"
        assert directives["default-src"] == "'none'"
        assert "unsafe" not in policy
        assert response.headers["x-frame-options"] == "DENY"
        # Scripts are files: no inline <script> body, no inline handlers.
        assert "<script>" not in response.text
        assert not re.search(r"\son[a-z]+\s*=", response.text)


def test_a_run_id_is_escaped_in_its_page(browser_like: httpx.Client, client: httpx.Client) -> None:
    run_id = new_id('ui-<img src=x onerror="alert(1)">&')
    client.post("/v1/runs", json={"run_id": run_id}).raise_for_status()
    page = browser_like.get("/ui/runs/" + quote(run_id, safe=""))
    assert page.status_code == 200
    assert "<img" not in page.text
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;" in page.text


def test_an_unknown_run_page_is_404(browser_like: httpx.Client) -> None:
    response = browser_like.get("/ui/runs/" + new_id("never-opened"))
    assert response.status_code == 404
    assert "There is no run" in response.text


@pytest.mark.parametrize("path", ["/ui/pools", "/ui/run/x", "/ui/runs", "/ui/a/b/c"])
def test_a_mistyped_page_is_an_html_404_naming_the_pages(anonymous: httpx.Client, path: str) -> None:
    response = anonymous.get(path)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert f"There is no page {path}." in response.text
    for page in ("/ui/ (the runs)", "/ui/runs/&lt;run id&gt; (a run)", "/ui/pool (the warm pool)"):
        assert page in response.text
    assert response.headers["content-security-policy"]


def test_an_unknown_dashboard_api_path_is_the_apis_json_404(anonymous: httpx.Client) -> None:
    response = anonymous.get("/ui/api/nothing")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert "no such endpoint: GET /ui/api/nothing" in response.json()["error"]


def test_static_files_are_served_and_nothing_else(anonymous: httpx.Client) -> None:
    script = anonymous.get("/ui/static/run.js")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    assert anonymous.get("/ui/static/ui.css").headers["content-type"].startswith("text/css")
    for name in ("missing.js", "..%2Froutes.py", "__init__.py", ".hidden.js"):
        assert anonymous.get("/ui/static/" + name).status_code == 404, name


def test_the_pool_read_changes_nothing(browser_like: httpx.Client, client: httpx.Client) -> None:
    pool = new_id("ui-pool")
    # Instance ids name one instance across the shared server's pools: this test's own.
    a, b, w, old = (f"{pool}-{name}" for name in ("a", "b", "w", "old"))
    stale_ready_at = int(time.time() * 1000) - 8 * 60_000  # ready longer than the 7-minute limit
    added = client.post(f"/v1/pools/{pool}/entries", json={"version": "v1", "ids": [a, b], "ready": True})
    assert added.status_code == 200, added.text
    client.post(f"/v1/pools/{pool}/entries", json={"version": "v1", "ids": [w], "ready": False})
    # Last: every add collects the stale entries of its pool.
    client.post(f"/v1/pools/{pool}/entries", json={"version": "v1", "ids": [old], "ready_at": stale_ready_at})
    expected = [(a, "available"), (b, "available"), (old, "stale"), (w, "warming")]
    # Read twice: the pool API's own listing would have collected the stale entry on the first.
    for _ in range(2):
        answer = browser_like.get("/ui/api/pools").json()
        mine = [
            (v["version"], v["available"], v["warming"], v["stale"])
            for v in answer["versions"]
            if v["pool"] == pool
        ]
        assert mine == [("v1", 2, 1, 1)]
        entries = sorted((e["id"], e["condition"]) for e in answer["entries"] if e["pool"] == pool)
        assert entries == expected


def test_every_web_asset_ships_in_the_package() -> None:
    """A plain (non-editable) install carries only what package-data names: every template and
    static file must match one of its patterns."""
    with (ROOT / "pyproject.toml").open("rb") as fh:
        patterns = tomllib.load(fh)["tool"]["setuptools"]["package-data"]["ledger"]
    package = ROOT / "ledger"
    assets = [p for d in ("templates", "static") for p in (package / "service" / "ui" / d).iterdir()]
    assert assets
    for asset in assets:
        relative = asset.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns), relative
