"""`GET /v1/runs/{run_id}/events` and `.../events/stream` are served by `ledger.service.read_route`
when the query is plainly what the route declares, and by the FastAPI route otherwise (a parameter
the route does not declare, here `via=route`, which FastAPI ignores). Both must give the same
answer to the same request, byte for byte: every case is sent both ways to the same run (a read
writes nothing) and the status, headers and body compared. The refusals covered: a bad cursor or
limit, an unknown run, every kind of refused token, an expired cursor (410), the database not
answering in time (503 with Retry-After); and the access line and metrics of a request served
directly name the route."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import psycopg
import pytest

from ledger import tokens
from ledger.runlog.events import MAX_LIST_LIMIT
from tests.acceptance.conftest import Server, new_id, start_server, stop_server

RETAINED = 20
LOCK_TIMEOUT_S = 0.2
# An attacker's key: tokens it signs name its key id, the same both ways.
FORGER = tokens.parse_keyring(tokens.generate_key())
ROUTED = "via=route"


@pytest.fixture(scope="module")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Few events kept per run (so cursors expire) and a short lock timeout (so a locked table is
    a 503 soon)."""
    running = start_server(
        database_url,
        tmp_path_factory.mktemp("serve-read-route"),
        LEDGER_MAX_EVENTS_PER_RUN=str(RETAINED),
        LEDGER_DB_LOCK_TIMEOUT_S=str(LOCK_TIMEOUT_S),
    )
    yield running
    stop_server(running)


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        yield client


@dataclass(frozen=True)
class Runs:
    """Runs in the states the cases read: open with 3 lines, ended after 3 lines, trimmed (its
    first events gone), and one that does not exist."""

    open: str
    ended: str
    trimmed: str
    missing: str


def admin(server: Server) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.token}"}


def append(server: Server, http: httpx.Client, run_id: str, *lines: str) -> None:
    body = {"events": [{"type": "log", "line": line} for line in lines]}
    assert http.post(f"/v1/runs/{run_id}/events", json=body, headers=admin(server)).status_code == 200


@pytest.fixture(scope="module")
def runs(server: Server, http: httpx.Client) -> Runs:
    made = Runs(new_id("open"), new_id("ended"), new_id("trimmed"), new_id("missing"))
    for run_id in (made.open, made.ended, made.trimmed):
        assert http.post("/v1/runs", json={"run_id": run_id}, headers=admin(server)).status_code == 200
    append(server, http, made.open, "a", "b", "c")
    append(server, http, made.ended, "a", "b", "c")
    ended = http.put(f"/v1/runs/{made.ended}/terminal", json={"status": "failed"}, headers=admin(server))
    assert ended.is_success
    append(server, http, made.trimmed, *[f"line {n}" for n in range(RETAINED + 5)])
    return made


def server_keyring(server: Server) -> tokens.Keyring:
    # start_server puts the data dir (and the generated token secret in it) beside the log.
    return tokens.parse_keyring((server.log_path.parent / "data" / "token-secret").read_text())


def credentials(server: Server, kind: str, run_id: str) -> dict[str, str]:
    """The headers of a caller: "admin", "read" (a read token), "own" (a run token for the run),
    "other" (for another run), "expired", "forged", "cookie" (the dashboard's session), "none"."""
    keyring, now = server_keyring(server), time.time()

    def run_token(signer: tokens.Keyring, run: str, minted_s: float = now) -> str:
        return tokens.mint(signer, tokens.Scope.RUN, now_s=minted_s, ttl_s=60, run_id=run, max_attempt=1)[0]

    token = {
        "admin": lambda: server.token,
        "cookie": lambda: server.token,
        "read": lambda: tokens.mint(keyring, tokens.Scope.READ, now_s=now)[0],
        "own": lambda: run_token(keyring, run_id),
        "other": lambda: run_token(keyring, "other"),
        "expired": lambda: run_token(keyring, run_id, now - 120),
        "forged": lambda: run_token(FORGER, run_id),
        "none": lambda: "",
    }[kind]()
    if kind == "cookie":
        return {"Cookie": f"ledger_session={token}"}
    return {"Authorization": f"Bearer {token}"} if token else {}


@dataclass(frozen=True)
class Case:
    name: str
    # "events" (the long-poll) or "stream".
    endpoint: str
    # Which run of `Runs` it reads.
    run: str
    query: str = ""
    token: str = "admin"
    last_event_id: str | None = None
    status: int = 200


CASES = [
    # The long-poll.
    Case("a page from the start", "events", "open"),
    Case("a page after a seq, limited", "events", "open", "after=1&limit=1"),
    Case("nothing new, waited for", "events", "open", "after=now&timeout_ms=50"),
    Case("a negative timeout (clamped)", "events", "open", "after=3&timeout_ms=-5"),
    Case("the largest limit", "events", "open", f"limit={MAX_LIST_LIMIT}"),
    Case("a limit over the largest", "events", "open", f"limit={MAX_LIST_LIMIT + 1}", status=422),
    Case("a limit of zero", "events", "open", "limit=0", status=422),
    Case("a cursor that is no cursor", "events", "open", "after=yesterday", status=422),
    Case("a cursor beyond 64 bits", "events", "open", "after=99999999999999999999", status=422),
    Case("an empty cursor", "events", "open", "after=", status=422),
    Case("an ended run", "events", "ended", "after=1"),
    Case("from the oldest retained event", "events", "trimmed"),
    Case("an unknown run", "events", "missing", status=404),
    Case("an expired cursor", "events", "trimmed", "after=1", status=410),
    Case("a read token", "events", "open", token="read"),
    Case("the run's own token", "events", "open", token="own"),
    Case("the session cookie", "events", "open", token="cookie"),
    Case("another run's token", "events", "open", token="other", status=403),
    Case("an expired token", "events", "open", token="expired", status=401),
    Case("a forged token", "events", "open", token="forged", status=401),
    Case("no token", "events", "open", token="none", status=401),
    # A timeout FastAPI reads but not as plain digits: the route answers both ways.
    Case("a timeout that is no integer", "events", "open", "timeout_ms=soon", status=422),
    # The tail (of ended runs: a tail of an open run never ends).
    Case("a tail of an ended run", "stream", "ended"),
    Case("a tail after a seq", "stream", "ended", "after=2"),
    Case("a tail at the end of an ended run", "stream", "ended", "after=4", status=204),
    Case("a tail resumed", "stream", "ended", last_event_id="1"),
    Case("Last-Event-ID wins over after", "stream", "ended", "after=0", last_event_id="2"),
    Case("an empty Last-Event-ID", "stream", "ended", "after=3", last_event_id=""),
    Case("a bad Last-Event-ID", "stream", "ended", last_event_id="soon", status=422),
    Case("a tail from no cursor", "stream", "ended", "after=yesterday", status=422),
    Case("a tail of an unknown run", "stream", "missing", status=404),
    Case("a tail from an expired cursor", "stream", "trimmed", last_event_id="2", status=410),
    Case("a tail with another run's token", "stream", "ended", token="other", status=403),
    Case("a tail with no token", "stream", "ended", token="none", status=401),
]


def answer_of(
    server: Server, http: httpx.Client, runs: Runs, case: Case, *, routed: bool
) -> tuple[int, dict[str, str], bytes]:
    run_id = getattr(runs, case.run)
    path = f"/v1/runs/{run_id}/events" + ("/stream" if case.endpoint == "stream" else "")
    query = "&".join(part for part in (case.query, ROUTED if routed else "") if part)
    headers = credentials(server, case.token, run_id)
    if case.last_event_id is not None:
        headers["Last-Event-ID"] = case.last_event_id
    answer = http.get(path + (f"?{query}" if query else ""), headers=headers)
    # What differs between two answers to the same request: the time they were given.
    kept = {name: value for name, value in answer.headers.items() if name != "date"}
    return answer.status_code, kept, answer.content


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_same_read_gets_the_same_answer_either_way(
    server: Server, http: httpx.Client, runs: Runs, case: Case
) -> None:
    direct = answer_of(server, http, runs, case, routed=False)
    routed = answer_of(server, http, runs, case, routed=True)
    assert direct == routed
    status, headers, body = direct
    assert status == case.status, body
    if status >= 400:
        assert headers["content-type"] == "application/json"
        assert isinstance(json.loads(body)["error"], str)
    if status == 401:
        assert headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("endpoint", ["events", "stream"])
def test_a_read_the_database_does_not_answer_in_time_is_503_either_way(
    server: Server, http: httpx.Client, runs: Runs, database_url: str, endpoint: str
) -> None:
    case = Case("locked", endpoint, "ended")
    with psycopg.connect(database_url) as locker:
        # Every read of a run waits for this lock, and gives up after the service's lock timeout.
        locker.execute("LOCK TABLE ledger.runs IN ACCESS EXCLUSIVE MODE")
        direct = answer_of(server, http, runs, case, routed=False)
        routed = answer_of(server, http, runs, case, routed=True)
        locker.rollback()
    assert direct == routed
    status, headers, body = direct
    assert status == 503, body
    assert headers["retry-after"] == "1"
    assert json.loads(body)["code"] == "unavailable"


def metric(http: httpx.Client, server: Server, name: str) -> float:
    text = http.get("/metrics", headers=admin(server)).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


@pytest.mark.parametrize(
    ("endpoint", "template"),
    [("events", "/v1/runs/{run_id}/events"), ("stream", "/v1/runs/{run_id}/events/stream")],
)
def test_reads_served_directly_are_counted_and_logged_under_the_route(
    server: Server, http: httpx.Client, runs: Runs, endpoint: str, template: str
) -> None:
    path = f"/v1/runs/{runs.ended}/events" + ("/stream" if endpoint == "stream" else "")
    series = f'ledger_http_requests_total{{method="GET",route="{template}",status="200"}}'
    before = metric(http, server, series)
    for _ in range(3):
        assert http.get(path, params={"after": 1}, headers=admin(server)).status_code == 200

    def access() -> list[dict[str, object]]:
        # Whole lines only: the server may be half-way through writing the last one.
        whole = server.log().rpartition("\n")[0]
        return [
            line
            for line in map(json.loads, filter(lambda text: text.startswith("{"), whole.splitlines()))
            if line.get("logger") == "ledger.service.access" and line["message"].startswith(f"GET {path} ")
        ]

    # A stream's request is counted and logged once its response has ended, which the client may
    # see first: wait for it (the deadline only bounds a failure).
    deadline = time.monotonic() + 30
    while (metric(http, server, series) - before < 3 or len(access()) < 3) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(http, server, series) - before == 3
    assert len(access()) >= 3
    assert all(line["route"] == template and line["run_id"] == runs.ended for line in access())
