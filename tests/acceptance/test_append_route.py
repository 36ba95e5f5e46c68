"""`POST /v1/runs/{run_id}/events` is served by `ledger.service.append_route` when the body is
plainly a valid append (`Content-Type: application/json`) and by the FastAPI route otherwise (any
other JSON type, e.g. `application/problem+json`, which FastAPI reads as JSON too). Both must give
the same answer to the same request: here every case is sent both ways, each to a run of its own
in the same state, and the answers compared; what is refused writes nothing either way. Also: a
run token remembered by the service is refused once it expires, and the metrics and access line of
a request served directly name the route."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from ledger import tokens
from tests.acceptance.conftest import Server, new_id

# An attacker's key: tokens it signs name its key id, the same both ways.
FORGER = tokens.parse_keyring(tokens.generate_key())
DIRECT = "application/json"
ROUTE = "application/problem+json"


def server_keyring(server: Server) -> tokens.Keyring:
    # start_server puts the data dir (and the generated token secret in it) beside the log.
    return tokens.parse_keyring((server.log_path.parent / "data" / "token-secret").read_text())


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        yield client


@dataclass(frozen=True)
class Case:
    name: str
    body: bytes
    # What the run is before the request: "open", "ended" (terminal) or "missing".
    run: str = "open"
    # Whose token: "admin", "own" (a run token for the run), "other" (for another run), "expired",
    # "forged", "none".
    token: str = "admin"


def events(*items: dict[str, Any]) -> bytes:
    return json.dumps({"events": list(items)}).encode()


LOG = {"type": "log", "line": "hello"}
CASES = [
    Case("one log line", events(LOG)),
    Case(
        "several events",
        events(LOG, {"type": "status", "status": "running"}, {"type": "log", "line": "é 😀"}),
    ),
    Case("with a run token", events(LOG), token="own"),
    Case("a NUL in a log line (repaired)", events({"type": "log", "line": "a\u0000b"})),
    Case("the terminal event last", events(LOG, {"type": "terminal", "status": "completed"})),
    Case("an unknown run", events(LOG), run="missing"),
    Case("an ended run", events(LOG), run="ended"),
    Case("an unknown event type", events({"type": "no.such.type"})),
    Case("a log event without its line", events({"type": "log"})),
    Case("a terminal event before another", events({"type": "terminal", "status": "failed"}, LOG)),
    Case("a reserved key", events({"type": "log", "line": "x", "seq": 7})),
    Case("no events", events()),
    Case("another run's token", events(LOG), token="other"),
    Case("an expired token", events(LOG), token="expired"),
    Case("a forged token", events(LOG), token="forged"),
    Case("no token", events(LOG), token="none"),
    # Bodies the model refuses: both ways reach the route.
    Case("events not a list", b'{"events": "x"}'),
    Case("an unknown field", b'{"events": [], "more": 1}'),
    Case("not JSON", b'{"events": ['),
    Case("not an object", b"[1]"),
    Case("empty", b""),
]


def prepare(server: Server, http: httpx.Client, case: Case) -> tuple[str, dict[str, str]]:
    """A run in the case's state, and the case's Authorization header."""
    admin = {"Authorization": f"Bearer {server.token}"}
    run_id = new_id("append-route")
    if case.run != "missing":
        assert http.post("/v1/runs", json={"run_id": run_id}, headers=admin).status_code == 200
        assert http.post(f"/v1/runs/{run_id}/events", content=events(LOG), headers=admin).status_code == 200
    if case.run == "ended":
        assert http.put(f"/v1/runs/{run_id}/terminal", json={"status": "failed"}, headers=admin).is_success
    keyring = server_keyring(server)
    now = time.time()
    token = {
        "admin": lambda: server.token,
        "own": lambda: tokens.mint(keyring, tokens.Scope.RUN, now_s=now, run_id=run_id, max_attempt=1)[0],
        "other": lambda: tokens.mint(keyring, tokens.Scope.RUN, now_s=now, run_id="other", max_attempt=1)[0],
        "expired": lambda: tokens.mint(
            keyring, tokens.Scope.RUN, now_s=now - 120, ttl_s=60, run_id=run_id, max_attempt=1
        )[0],
        "forged": lambda: tokens.mint(FORGER, tokens.Scope.RUN, now_s=now, run_id=run_id, max_attempt=1)[0],
        "none": lambda: "",
    }[case.token]()
    return run_id, ({"Authorization": f"Bearer {token}"} if token else {})


def stored(server: Server, http: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    answer = http.get(f"/v1/runs/{run_id}/events", headers={"Authorization": f"Bearer {server.token}"})
    if answer.status_code == 404:
        return []
    assert answer.status_code == 200, answer.text
    return [without_times(event) for event in answer.json()["events"]]


def without_times(value: Any) -> Any:
    """`value` without what differs between two runs in the same state: times and run ids."""
    if isinstance(value, dict):
        return {
            key: without_times(item)
            for key, item in value.items()
            if key not in ("ts", "run_id") and not key.endswith("_at")
        }
    if isinstance(value, list):
        return [without_times(item) for item in value]
    return value


def answer_of(server: Server, http: httpx.Client, case: Case, content_type: str) -> tuple[Any, ...]:
    run_id, headers = prepare(server, http, case)
    answer = http.post(
        f"/v1/runs/{run_id}/events", content=case.body, headers={**headers, "Content-Type": content_type}
    )
    body = answer.json()
    if isinstance(body.get("error"), str):
        body["error"] = body["error"].replace(run_id, "<run>")
    return (
        answer.status_code,
        answer.headers["content-type"],
        answer.headers.get("www-authenticate"),
        without_times(body),
        stored(server, http, run_id),
    )


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_same_request_gets_the_same_answer_either_way(
    server: Server, http: httpx.Client, case: Case
) -> None:
    direct = answer_of(server, http, case, DIRECT)
    routed = answer_of(server, http, case, ROUTE)
    assert direct == routed
    status, _, _, body, written = direct
    if status != 200:
        # Refused: the run holds what it held before (its first log line, if it exists).
        assert isinstance(body["error"], str) and body["error"]
        assert written == ([] if case.run == "missing" else stored_before(written))
    else:
        assert [event["seq"] for event in body["events"]] == list(range(2, 2 + len(body["events"])))
        assert written[1:] == body["events"]


def stored_before(written: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # An open run holds the log line `prepare` appended; an ended one its terminal event too.
    assert written and written[0] == {"seq": 1, "type": "log", "line": "hello"}
    return written[:1] + [event for event in written[1:] if event["type"] == "terminal"]


def test_a_remembered_run_token_is_refused_once_it_expires(server: Server, http: httpx.Client) -> None:
    admin = {"Authorization": f"Bearer {server.token}"}
    run_id = new_id("expiring")
    assert http.post("/v1/runs", json={"run_id": run_id}, headers=admin).status_code == 200
    # A token minted 58 s ago for 60 s: it expires within about 2 s.
    token, grant = tokens.mint(
        server_keyring(server),
        tokens.Scope.RUN,
        now_s=time.time() - 58,
        ttl_s=60,
        run_id=run_id,
        max_attempt=1,
    )
    assert grant.expires_at_s is not None
    headers = {"Authorization": f"Bearer {token}"}
    for _ in range(3):  # the first verifies it, the others are answered from memory
        assert http.post(f"/v1/runs/{run_id}/events", content=events(LOG), headers=headers).status_code == 200
    assert http.get(f"/v1/runs/{run_id}", headers=headers).status_code == 200
    time.sleep(max(0.0, grant.expires_at_s - time.time()) + 0.2)
    for send in (
        lambda: http.post(f"/v1/runs/{run_id}/events", content=events(LOG), headers=headers),
        lambda: http.get(f"/v1/runs/{run_id}", headers=headers),
    ):
        refused = send()
        assert refused.status_code == 401, refused.text
        assert refused.json()["code"] == "token_expired"
    assert len(stored(server, http, run_id)) == 3


def metric(http: httpx.Client, server: Server, name: str) -> float:
    text = http.get("/metrics", headers={"Authorization": f"Bearer {server.token}"}).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_requests_served_directly_are_counted_and_logged_under_the_route(
    server: Server, http: httpx.Client
) -> None:
    admin = {"Authorization": f"Bearer {server.token}"}
    run_id = new_id("counted")
    assert http.post("/v1/runs", json={"run_id": run_id}, headers=admin).status_code == 200
    series = 'ledger_http_requests_total{method="POST",route="/v1/runs/{run_id}/events",status="200"}'
    counted: Callable[[], float] = lambda: metric(http, server, series)  # noqa: E731
    requests_before = counted()
    appended_before = metric(http, server, "ledger_events_appended_total")
    for _ in range(3):
        answer = http.post(f"/v1/runs/{run_id}/events", content=events(LOG, LOG), headers=admin)
        assert answer.status_code == 200
    assert counted() - requests_before == 3
    assert metric(http, server, "ledger_events_appended_total") - appended_before == 6
    lines = [
        json.loads(line) for line in server.log().splitlines() if run_id in line and line.startswith("{")
    ]
    access = [
        line
        for line in lines
        if line.get("logger") == "ledger.service.access" and line["message"].startswith("POST")
    ]
    assert len(access) == 3
    assert all(line["route"] == "/v1/runs/{run_id}/events" and line["run_id"] == run_id for line in access)
