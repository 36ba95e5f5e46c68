"""Junk to every endpoint: whatever comes in, the answer is a clear 4xx (or a success), never a 500."""

from __future__ import annotations

import base64
import json
import os
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
import pytest

from ledger.schema import SCHEMA, metadata
from ledger.validate import INT64_MAX, MAX_LOG_LINE_BYTES
from tests.acceptance.conftest import Server, new_id, start_server, stop_server
from tests.acceptance.rawhttp import send_raw
from tests.faults.invariants import violations
from tests.integration.bench_runs import database_of_its_own

HUGE = 10**30
LINE = MAX_LOG_LINE_BYTES
# Bodies every JSON endpoint gets; each is sent raw so lone surrogates and bad JSON reach the server.
JUNK_BODIES: list[bytes] = [
    b"",
    b"null",
    b"[]",
    b"[1, 2]",
    b'"a string"',
    b"42",
    b"{",
    b"{'single': 'quotes'}",
    b'{"events": NaN}',
    b"\xff\xfe\x00garbage",
    b"[" * 5000 + b"]" * 5000,
    b'{"run_id": "\\ud800"}',
    b'{"version": "\\ud800", "ids": ["\\udfff"], "run_id": "\\ud800", "id": "\\ud800"}',
    b'{"run_id": "nul\\u0000", "version": "v\\u0000", "ids": ["\\u0000"], "instance_id": "\\u0000"}',
    # Free text with NUL and lone surrogates (repaired) beside structure holding them (refused).
    b'{"events": [{"type": "log", "line": "\\ud800\\u0000"}, {"type": "status", "status": "\\udfff"}],'
    b' "status": "running", "live_logs": ["\\ud800"],'
    b' "live_node_progress": {"\\ud800": {"message": "\\u0000"}},'
    b' "observations": [{"node_id": "\\udfff", "attempt": 1, "status": "failed", "error": "\\u0000"}],'
    b' "rows": [{"table_namespace": "\\ud800", "row_key": "\\u0000", "status": "completed"}],'
    b' "error": "\\ud800"}',
    b'{"events": [{"type": "step.started", "\\ud800": 1}],'
    b' "activity_observations": [{"activityId": "\\ud800"}]}',
    # Nesting: just past the request limit, and far past the interpreter's recursion limit.
    b'{"events": [' + b"[" * 64 + b"]" * 64 + b"]}",
    b'{"events": ' + b"{" * 3000 + b"}" * 3000 + b"}",
]
JUNK_OBJECTS: list[dict[str, Any]] = [
    {},
    {"run_id": 5, "version": 5, "ids": 5, "id": 5, "instance_id": 5, "events": 5, "rows": 5},
    {"run_id": None, "version": None, "ids": None, "events": None, "status": None},
    {"run_id": ["x"], "version": {"a": 1}, "ids": [1, 2], "events": ["x"], "rows": [1]},
    {
        "version": "v",
        "ids": ["a"],
        "ttl_ms": HUGE,
        "ready_at": HUGE,
        "run_id": "r",
        "min_ready_age_ms": -HUGE,
    },
    {"version": "v", "ids": ["a"], "ttl_ms": -1, "ready_at": -HUGE, "ready": "yes"},
    {"version": "v", "ids": ["a"], "ready_at": 1e308, "ttl_ms": 1e308},
    {"version": "v", "run_id": "r", "min_ready_age_ms": 1e308},
    {"version": "x" * 100_000, "ids": ["y" * 100_000], "run_id": "z" * 100_000},
    {"version": "🚀", "ids": ["עברית", "\u202e", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢"], "run_id": "🙂" * 300, "id": "☃"},
    {"status": "completed", "total_rows": HUGE, "duration_ms": -HUGE, "error": 5, "result": {"x": [HUGE]}},
    {"status": "failed", "total_rows": 1.5, "play_name": ["x"]},
    {"events": [{}]},
    {"events": [{"type": "log"}, {"type": "log", "line": HUGE}]},
    {"events": [{"type": "log", "line": "x", "seq": 9}]},
    {"events": [{"type": "terminal", "status": "completed", "total_rows": HUGE}]},
    {"events": [{"type": "progress", "status": "running", "updated_at": HUGE}]},
    {"events": [{"type": "log", "line": "x"}] * 5_000},
    {"events": [{"type": "step.progress", "node": {"deep": [[[[{}]]]]}}]},
    {"rows": [{"table_namespace": "", "row_key": "k", "status": "completed"}]},
    {"rows": [{"table_namespace": "t", "row_key": "\u0000", "status": "completed"}]},
    {"observations": [{"node_id": "n", "attempt": HUGE, "status": "completed"}]},
    {"observations": [{"node_id": "n", "attempt": 1, "status": "completed", "started_at": HUGE}]},
    {"observations": [{"node_id": "n", "attempt": 1, "status": "completed", "inputs": {"a": "\u0000"}}]},
    {"observations": "all of them"},
    {"status": "running", "upload_seq": HUGE, "producer_attempt": HUGE, "live_log_total_count": HUGE},
    {"status": "running", "upload_seq": 0, "live_logs": "not a list", "live_node_progress": []},
    {"status": "running", "live_node_progress": {"n": {"completed": HUGE, "started_at": HUGE}}},
    {"status": "running", "live_node_progress": {"": {}}, "live_logs": [1, None]},
    {"status": "completed", "terminal_log_replay": {"lines": "x", "dedupe_mode": "fuzzy"}},
    {"status": "running", "activity_observations": [{"activityId": 5, "observedAt": "later"}]},
    {"status": "running", "dataset_lifecycle_events": [5, "x", None]},
    {"status": "running", "live_logs": ["x"] * 1001},
    {"instance_id": "i", "version": "v", "started": "yes"},
    # What a hostile runner's token may send: text at its bound and one either side on every
    # route that stores it, ids no URL can address, counts at and past the bigint.
    *(
        {
            "events": [
                {"type": "log", "line": "l" * size},
                {"type": "status", "status": "running", "logs": ["s" * size]},
            ],
            "status": "failed",
            "error": "e" * size,
            "live_logs": ["u" * size],
            "live_node_progress": {"n": {"message": "m" * size}},
            "observations": [{"node_id": "n", "attempt": 1, "status": "failed", "error": "o" * size}],
        }
        for size in (LINE - 1, LINE, LINE + 1, 200_000)
    ),
    {"run_id": "."},
    {"run_id": ".."},
    {"run_id": ".", "version": "v1"},
    # One step at the bigint (several would overflow the run list's sums until they are numeric).
    {"status": "running", "live_node_progress": {"m": {"completed": INT64_MAX, "total": INT64_MAX}}},
    {"status": "running", "live_node_progress": {"m": {"completed": INT64_MAX + 1}}},
    {"status": "running", "pipeline_steps": ["s" * 1_100] * 2},
    {"status": "running", "pipeline_steps": [f"{i}" for i in range(1_001)]},
]
JUNK_QUERIES: list[dict[str, str]] = [
    {},
    {"version": ""},
    {"version": "\u0000"},
    {"after": "-2", "timeout_ms": "-5"},
    {"after": str(HUGE), "timeout_ms": str(HUGE), "limit": str(HUGE)},
    {"after": "1e3", "timeout_ms": "1.5", "limit": "0"},
    {"after": "now", "limit": "-1", "min_ready_age_ms": "nan"},
    {"version": "v", "min_ready_age_ms": "inf"},
    {"version": "v", "min_ready_age_ms": str(HUGE)},
    {"after": "🙂", "version": "🙂"},
]
ALLOWED = {200, 204, 400, 404, 405, 409, 410, 413, 422}
# What ledger.service.errors logs when input the library should have refused reached Postgres or
# overflowed a conversion: the library validates everything the fuzz sends, so these never show.
BACKSTOP_MESSAGES = ("database rejected request input", "number out of range reached the library")


def backstop_hits(server: Server, since: int) -> list[str]:
    """Backstop log lines the server wrote after offset `since` of its log."""
    return [
        line[:300]
        for line in server.log()[since:].splitlines()
        if any(message in line for message in BACKSTOP_MESSAGES)
    ]


def endpoints(run_id: str, pool: str) -> list[tuple[str, str]]:
    run = f"/v1/runs/{run_id}"
    return [
        ("POST", "/v1/runs"),
        ("GET", "/v1/runs"),
        ("GET", run),
        ("POST", f"{run}/events"),
        ("GET", f"{run}/events"),
        ("POST", f"{run}/status"),
        ("POST", f"{run}/sheets"),
        ("GET", f"{run}/sheets"),
        ("POST", f"{run}/observations"),
        ("GET", f"{run}/observations"),
        ("PUT", f"{run}/terminal"),
        ("GET", f"{run}/terminal"),
        ("PUT", f"{run}/mapping"),
        ("POST", f"{run}/mapping/block"),
        ("GET", f"{run}/mapping"),
        ("POST", f"/v1/pools/{pool}/entries"),
        ("GET", f"/v1/pools/{pool}/entries"),
        ("POST", f"/v1/pools/{pool}/claim"),
        ("GET", f"/v1/pools/{pool}/counts"),
        ("POST", f"/v1/pools/{pool}/promote"),
        ("POST", f"/v1/pools/{pool}/ready"),
        ("POST", f"/v1/pools/{pool}/delete"),
    ]


class Checker:
    """Collects every bad answer, so one run reports all of them."""

    def __init__(self) -> None:
        self.bad: list[str] = []

    def __call__(self, client: httpx.Client, what: object, method: str, path: str, **kwargs: Any) -> None:
        try:
            answer = client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            self.bad.append(f"{what} -> {type(exc).__name__}: {exc}")
            return
        if answer.status_code not in ALLOWED:
            self.bad.append(f"{what} -> {answer.status_code} {answer.text[:200]}")
        elif answer.status_code >= 400:
            body = answer.json()
            if not isinstance(body.get("error"), str) or not body["error"]:
                self.bad.append(f"{what} -> {answer.status_code} without an error message: {body}")

    def assert_clean(self) -> None:
        assert not self.bad, f"{len(self.bad)} bad answers:\n" + "\n".join(self.bad[:40])


def test_junk_bodies_and_queries_never_cause_a_500(client: httpx.Client, server: Server) -> None:
    log_start = len(server.log())
    check = Checker()
    run_id = new_id("fuzz")
    client.post("/v1/runs", json={"run_id": run_id})
    for method, path in endpoints(run_id, new_id("fuzzpool")):
        if method in ("POST", "PUT"):
            for index, raw in enumerate(JUNK_BODIES):
                headers = {"Content-Type": "application/json"}
                check(client, (method, path, raw[:60]), method, path, content=raw, headers=headers)
                # The same through the Idempotency-Key path, which stores (or replays) the answer.
                keyed = {**headers, "Idempotency-Key": f"fuzz-{index}"}
                for _ in range(2):
                    check(client, (method, path, raw[:60], "keyed"), method, path, content=raw, headers=keyed)
            for body in JUNK_OBJECTS:
                check(client, (method, path, json.dumps(body)[:120]), method, path, json=body)
        else:
            for params in JUNK_QUERIES:
                check(client, (method, path, params), method, path, params=params)
    check.assert_clean()
    assert backstop_hits(server, log_start) == []


def test_junk_path_segments_never_cause_a_500(client: httpx.Client, server: Server) -> None:
    log_start = len(server.log())
    check = Checker()
    segments = ["%00", "%ud800", "%ED%A0%80", "x" * 10_000, "🙂", "..%2F..", " ", "%20", "a%2Fb"]
    for segment in segments:
        for method, path in endpoints(segment, segment):
            body = {"version": "v", "ids": ["a"], "run_id": "r", "id": "a", "instance_id": "i"}
            check(client, (method, path[:80]), method, path, json=body if method in ("POST", "PUT") else None)
    check.assert_clean()
    assert backstop_hits(server, log_start) == []


def test_junk_cursors_on_the_stream_never_cause_a_500(client: httpx.Client, server: Server) -> None:
    log_start = len(server.log())
    check = Checker()
    run_id = new_id("fuzzstream")
    client.post("/v1/runs", json={"run_id": run_id})
    client.post(f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": "x"}]})
    # Finished, so every accepted cursor gets a bounded answer (the replay, or 204).
    client.put(f"/v1/runs/{run_id}/terminal", json={"status": "completed"})
    path = f"/v1/runs/{run_id}/events/stream"
    cursors = [
        "",
        " ",
        "now",
        " now ",
        "-1",
        "-2",
        "0",
        "+1",
        "1.0",
        "1e2",
        "🙂",
        "\t7",
        str(HUGE),
        "2" * 400,
    ]
    for cursor in cursors:
        check(client, ("after", cursor), "GET", path, params={"after": cursor})
        if cursor.isascii() and cursor == cursor.strip():  # httpx refuses padded header values
            check(client, ("Last-Event-ID", cursor), "GET", path, headers={"Last-Event-ID": cursor})
    check.assert_clean()
    assert backstop_hits(server, log_start) == []


# -- byte-level fuzzing of every entry point (marker `fuzz`) ---------------------------------------
#
# Valid requests to every route, then mutated at the byte level: the body re-encoded, truncated,
# given lone surrogates, NaN, huge numbers, deep nesting or junk at a random position; each path
# parameter percent-encoded oddly; the token, the session cookie, the content type and the
# protocol headers replaced with junk. Sent as raw bytes (no client library normalises them).
# Properties: never a 5xx, never a traceback in the service's log, nothing written by a refused
# request (a digest of every table but the Idempotency-Key answers, before and after each
# request), and the invariants query holds after each batch.
#
# Profiles (LEDGER_FUZZ_PROFILE): `ci` (default) sends a fixed, seeded set of about a minute's
# requests; `soak` runs for LEDGER_FUZZ_SECONDS (default 600) with a random seed (printed; set
# LEDGER_FUZZ_SEED to replay one).


@dataclass(frozen=True)
class FuzzProfile:
    name: str
    seed: int
    batches: int | None  # None: until `seconds` have passed
    seconds: float | None


def fuzz_profile(environ: Mapping[str, str] = os.environ) -> FuzzProfile:
    name = environ.get("LEDGER_FUZZ_PROFILE", "ci").strip() or "ci"
    seed_text = environ.get("LEDGER_FUZZ_SEED", "").strip()
    if name == "ci":
        return FuzzProfile(
            "ci", int(seed_text or 23), batches=int(environ.get("LEDGER_FUZZ_BATCHES", "6")), seconds=None
        )
    if name == "soak":
        seed = int(seed_text) if seed_text else random.SystemRandom().randrange(2**32)
        return FuzzProfile(
            "soak", seed, batches=None, seconds=float(environ.get("LEDGER_FUZZ_SECONDS", "600"))
        )
    raise pytest.UsageError(f"LEDGER_FUZZ_PROFILE must be ci or soak (got {name!r})")


@dataclass
class RawRequest:
    method: bytes
    path: list[bytes]  # segments between slashes, as sent (percent-encoded)
    params: dict[int, str]  # segment index -> the parameter it carries (for path mutations)
    query: list[tuple[bytes, bytes]]
    headers: list[tuple[bytes, bytes]]
    body: bytes
    label: str
    kinds: list[str] = field(default_factory=list)

    def target(self) -> bytes:
        path = b"/" + b"/".join(self.path)
        return path + (b"?" + b"&".join(k + b"=" + v for k, v in self.query) if self.query else b"")

    def copy(self) -> RawRequest:
        return RawRequest(
            self.method,
            list(self.path),
            dict(self.params),
            list(self.query),
            list(self.headers),
            self.body,
            self.label,
            list(self.kinds),
        )

    def header(self, name: bytes) -> bytes | None:
        return next((value for key, value in self.headers if key.lower() == name), None)

    def set_header(self, name: bytes, value: bytes | None) -> None:
        self.headers = [(key, old) for key, old in self.headers if key.lower() != name]
        if value is not None:
            self.headers.append((name, value))


@dataclass
class World:
    """One batch's names: a running run, a finished one, a pool, streams, and tokens."""

    tag: str
    admin: str
    read_token: str = ""
    run_token: str = ""

    @property
    def run(self) -> str:
        return f"{self.tag}-run"

    @property
    def done(self) -> str:
        return f"{self.tag}-done"

    @property
    def pool(self) -> str:
        return f"{self.tag}-pool"


JSON_TYPE = (b"Content-Type", b"application/json")


def seed_requests(world: World) -> list[RawRequest]:
    """A valid request to every route (bodies as the service reads them), for `world`."""

    def make(
        method: str,
        template: str,
        body: Any = None,
        *,
        query: Sequence[tuple[str, str]] = (),
        headers: Sequence[tuple[bytes, bytes]] = (),
        raw: bytes | None = None,
        token: str | None = None,
    ) -> RawRequest:
        values = {"run": world.run, "done": world.done, "pool": world.pool, "tag": world.tag}
        segments: list[bytes] = []
        params: dict[int, str] = {}
        for index, part in enumerate(template.strip("/").split("/")):
            if part.startswith("{") and part.endswith("}"):
                params[index] = part[1:-1]
                part = values[part[1:-1]]
            segments.append(quote(part, safe="").encode())
        all_headers = [(b"Authorization", f"Bearer {token or world.admin}".encode()), *headers]
        content = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        if body is not None:
            all_headers.append(JSON_TYPE)
        query_bytes = [(quote(k).encode(), quote(v).encode()) for k, v in query]
        return RawRequest(
            method.encode(), segments, params, query_bytes, all_headers, content, f"{method} {template}"
        )

    run, pool = "/v1/runs/{run}", "/v1/pools/{pool}"
    event = {"type": "log", "line": "fuzz Ģ 日本"}
    upload = {
        "status": "running",
        "producer_attempt": 1,
        "upload_seq": 1,
        "live_logs": ["a line"],
        "live_node_progress": {"n": {"completed": 1, "total": 2, "message": "m"}},
        "activity_observations": [{"activityId": "a", "observedAt": 1}],
        "events": [{"type": "step.started", "step": "s"}],
    }
    octets = (b"Content-Type", b"application/octet-stream")
    producer = [(b"Producer-Id", b"p"), (b"Producer-Epoch", b"0"), (b"Producer-Seq", b"0")]
    return [
        make("POST", "/v1/runs", {"run_id": world.run, "play_name": "fuzz"}),
        make("POST", "/v1/runs", {"run_id": world.run}, token=world.run_token),
        make("GET", "/v1/runs", query=[("limit", "5"), ("status", "running")]),
        make("GET", run),
        make("GET", run + "/logs"),
        make("POST", run + "/events", {"events": [event, {"type": "progress", "status": "running"}]}),
        make("POST", run + "/events", {"events": [event]}, token=world.run_token),
        make("GET", run + "/events", query=[("after", "0"), ("limit", "10"), ("timeout_ms", "0")]),
        make("GET", "/v1/runs/{done}/events/stream", query=[("after", "-1")]),
        make("GET", "/v1/runs/{done}/events/stream", headers=[(b"Last-Event-ID", b"1")]),
        make("PUT", "/v1/runs/{done}/terminal", {"status": "completed", "total_rows": 1}),
        make("GET", run + "/terminal"),
        make("PUT", run + "/mapping", {"instance_id": f"{world.tag}-i", "version": "v1", "started": True}),
        make("POST", run + "/mapping/block", {"instance_id": f"{world.tag}-j", "version": "v1"}),
        make("GET", run + "/mapping", query=[("version", "v1")]),
        make("POST", run + "/status", upload),
        make("POST", run + "/status", upload, token=world.run_token),
        make(
            "POST",
            run + "/sheets",
            {"rows": [{"table_namespace": "t", "row_key": "k", "status": "completed"}]},
        ),
        make("GET", run + "/sheets"),
        make(
            "POST",
            run + "/observations",
            {"observations": [{"node_id": "n", "attempt": 1, "status": "completed", "inputs": {"a": [1]}}]},
        ),
        make("GET", run + "/observations"),
        make(
            "POST",
            pool + "/entries",
            {"version": "v1", "ids": [f"{world.tag}-a", f"{world.tag}-b"], "ttl_ms": 60_000},
        ),
        make("GET", pool + "/entries", query=[("version", "v1")]),
        make("POST", pool + "/claim", {"version": "v1", "run_id": world.run}),
        make("GET", pool + "/counts", query=[("version", "v1"), ("min_ready_age_ms", "0")]),
        make("POST", pool + "/promote", {"version": "v1", "ids": [f"{world.tag}-a"]}),
        make("POST", pool + "/ready", {"version": "v1", "id": f"{world.tag}-b"}),
        make("POST", pool + "/delete", {"version": "v1", "ids": [f"{world.tag}-a"]}),
        make("DELETE", pool + "/entries"),
        make("POST", "/v1/tokens", {"scope": "run", "run_id": world.run, "max_attempt": 1, "ttl_s": 60}),
        make("GET", "/metrics", token=world.read_token),
        make("GET", "/openapi.json"),
        make("PUT", "/v1/stream/{tag}/json", raw=b'[{"a": 1}]', headers=[JSON_TYPE]),
        make("POST", "/v1/stream/{tag}/json", raw='[{"b": "Ģ"}, 2, null]'.encode(), headers=[JSON_TYPE]),
        make("PUT", "/v1/stream/{tag}/bytes", raw=b"\x00\xff", headers=[octets]),
        make("POST", "/v1/stream/{tag}/bytes", raw=b"more", headers=[octets, *producer]),
        make("POST", "/v1/stream/{tag}/bytes", headers=[octets, (b"Stream-Closed", b"true")]),
        make(
            "PUT",
            "/v1/stream/{tag}/fork",
            headers=[octets, (b"Stream-Forked-From", f"/v1/stream/{world.tag}/bytes".encode())],
        ),
        make("GET", "/v1/stream/{tag}/json", query=[("offset", "-1")]),
        make("GET", "/v1/stream/{tag}/bytes", query=[("offset", "-1"), ("live", "long-poll")]),
        make("GET", "/v1/stream/{tag}/json", query=[("offset", "now"), ("live", "sse")]),
        make("HEAD", "/v1/stream/{tag}/json"),
        make("GET", "/v1/stream/runs/{done}", query=[("offset", "-1")]),
        make("DELETE", "/v1/stream/{tag}/fork"),
        make("GET", "/ui/api/pools", token=world.read_token),
        make("GET", "/ui/runs/{run}", headers=[(b"Cookie", f"ledger_session={world.read_token}".encode())]),
        make(
            "POST",
            "/ui/sign-in",
            raw=f"token={world.read_token}".encode(),
            headers=[(b"Content-Type", b"application/x-www-form-urlencoded")],
        ),
        make("GET", "/healthz"),
    ]


# Junk values, as JSON text, put in place of any value of a body.
JUNK_VALUES: tuple[bytes, ...] = (
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e400",
    b"-1e400",
    b"1e-400",
    str(10**30).encode(),
    b"-" + str(2**63).encode(),
    b"9" * 5000,
    b"1.5",
    b"-1",
    b"0",
    b"true",
    b"null",
    b"[]",
    b"{}",
    b'""',
    b'"\\ud800"',
    b'"\\udfff\\ud800"',
    b'"\\u0000"',
    b'"\xed\xa0\x80"',
    b'"\xff\xfe"',
    b'"\xc0\xaf"',
    b'"\x00"',
    b'"' + "🙂".encode() * 3000 + b'"',
    b'"' + b"x" * 200_000 + b'"',
    b'"' + b"\\" * 1001 + b'"',
    b'{"a": 1, "a": 2}',
)
PERCENT_JUNK: tuple[bytes, ...] = (
    b"%00",
    b"%FF",
    b"%ED%A0%80",
    b"%C0%AF",
    b"%2F",
    b"%2F..%2F..",
    b"%2e%2e",
    b"..",
    b"%",
    b"%G1",
    b"%25",
    b"%25FF",
    b"%E6%97%A5",
    b"%F0%9F%99%82",
    b"%EF%BF%BF",
    b"%0A",
    b"%20",
    b"a%0D%0Ab",
    b"x" * 600,
    b"%41" * 600,
    b"\xff",
    "日本".encode(),
)
CONTENT_TYPES: tuple[bytes | None, ...] = (
    None,
    b"",
    b"text/plain",
    b"application/json; charset=utf-16",
    b"application/json; charset=latin-1",
    b"application/x-www-form-urlencoded",
    b"multipart/form-data; boundary=x",
    b"application/vnd.thing+json",
    b"application/json\xff",
    b"*/*",
)
STREAM_HEADERS: tuple[bytes, ...] = (
    b"Stream-Seq",
    b"Stream-TTL",
    b"Stream-Expires-At",
    b"Stream-Closed",
    b"Stream-Forked-From",
    b"Stream-Fork-Offset",
    b"Stream-Fork-Sub-Offset",
    b"Producer-Id",
    b"Producer-Epoch",
    b"Producer-Seq",
    b"Idempotency-Key",
    b"Last-Event-ID",
    b"If-None-Match",
)
HEADER_JUNK: tuple[bytes, ...] = (
    b"",
    b" ",
    b"-1",
    b"1e3",
    b"18446744073709551616",
    b"9" * 400,
    b"\xff\xfe",
    "日本".encode(),
    b"true, false",
    b"0000000000000000_0000000000000001",
    b"/v1/stream/%FF",
    b"/v1/stream/../../etc",
    b"9999-12-31T23:59:59.999999+00:00",
    b"0001-01-01T00:00:00Z",
    b"\x01\x02",
    b"x" * 1025,
)


def _b64(raw: bytes) -> bytes:
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def junk_tokens(rng: random.Random, world: World) -> list[bytes]:
    valid = rng.choice([world.read_token, world.run_token, world.admin]).encode()
    head, _, rest = valid.partition(b".")
    payload, _, signature = rest.partition(b".")
    flipped = bytearray(valid)
    if flipped:
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(7)
    claims = [
        b'{"kid":"\\ud800","exp":1}',
        b'{"kid":' + b"[" * 2000 + b"]" * 2000 + b"}",
        b'{"kid":"x","exp":' + b"9" * 5000 + b"}",
        b'{"kid":"x","exp":NaN}',
        b'{"kid":"\xed\xa0\x80"}',
        b"\xff\xfe\x00",
        b'{"kid":"' + b"x" * 3000 + b'"}',
        "{}".encode("utf-16"),
    ]
    return [
        bytes(flipped),
        b"v1." + _b64(rng.choice(claims)) + b"." + signature,
        head + b"." + payload + b"." + signature[::-1],
        head + b"." + payload[: len(payload) // 2] + b"." + signature,
        b"v1." + payload + b"==." + signature,
        b"v1.\xff\xfe." + signature,
        valid + b".x",
        valid[:-1],
        b"v1." * 1000,
        valid.replace(b"v1.", b"v2."),
    ]


def _json_sentinel_mutation(rng: random.Random, body: bytes, junk: bytes) -> bytes | None:
    """`body` (JSON) with a random value (or a new key of a random object) replaced by `junk`."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):  # an earlier mutation made it junk, or very deep
        return None
    sentinel = "\u0000fuzz-sentinel"
    spots: list[tuple[Any, Any]] = []
    pending: list[Any] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            spots.extend((item, key) for key in item)
            spots.append((item, "fuzz-extra"))
            pending.extend(item.values())
        elif isinstance(item, list):
            spots.extend((item, index) for index in range(len(item)))
            pending.extend(item)
    if not spots:
        return junk
    container, key = rng.choice(spots)
    container[key] = sentinel
    return json.dumps(value).encode().replace(json.dumps(sentinel).encode(), junk, 1)


def mutate(rng: random.Random, request: RawRequest, world: World, kind: str) -> RawRequest:
    """`request` with one mutation of `kind` (see `MUTATIONS`)."""
    out = request.copy()
    out.kinds.append(kind)
    body = out.body
    if kind == "encoding" and body:
        encoding = rng.choice(
            ["utf-16-le", "utf-16-be", "utf-16", "utf-32", "utf-32-be", "utf-8-sig", "cp1252"]
        )
        out.body = body.decode("utf-8", "replace").encode(encoding, "replace")
    elif kind == "truncate" and body:
        out.body = body[: rng.randrange(len(body))]
    elif kind == "bytes" and body:
        data = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data) + 1)
            data[at:at] = rng.choice(
                [b"\xed\xa0\x80", b"\xff", b"\x00", b"\xc0\xaf", b"\\ud800", b"\\", b'"', b"\xef\xbb\xbf"]
            )
        out.body = bytes(data)
    elif kind == "flip" and body:
        data = bytearray(body)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        out.body = bytes(data)
    elif kind == "value":
        out.body = _json_sentinel_mutation(rng, body, rng.choice(JUNK_VALUES)) or body + rng.choice(
            JUNK_VALUES
        )
    elif kind == "deep":
        depth = rng.choice([62, 63, 64, 65, 66, 200, 5000, 50_000])
        opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}"), (b'[{"x":[', b"]}]")])
        junk = opener * depth + b"1" + closer * depth
        out.body = _json_sentinel_mutation(rng, body, junk) or junk
    elif kind == "path" and out.params:
        index = rng.choice(sorted(out.params))
        junk = rng.choice(PERCENT_JUNK)
        original = out.path[index]
        out.path[index] = rng.choice(
            [junk, original + junk, junk + original, b"".join(b"%%%02X" % byte for byte in original)]
        )
    elif kind == "query":
        junk = rng.choice(PERCENT_JUNK + HEADER_JUNK[:10])
        if out.query and rng.random() < 0.7:
            at = rng.randrange(len(out.query))
            out.query[at] = (out.query[at][0], junk)
        else:
            out.query.append(
                (rng.choice([b"after", b"offset", b"limit", b"version", b"live", b"cursor", b"\xff"]), junk)
            )
    elif kind == "token":
        scheme = rng.choice([b"Bearer ", b"bearer  ", b"Basic ", b"", b"Bearer\t"])
        out.set_header(b"authorization", scheme + rng.choice(junk_tokens(rng, world)))
    elif kind == "cookie":
        out.set_header(b"authorization", None)
        token = rng.choice(junk_tokens(rng, world))
        out.set_header(
            b"cookie",
            rng.choice(
                [
                    b"ledger_session=" + token,
                    b'ledger_session="' + token + b'"',
                    b"a=b; ledger_session=" + token + b"; ledger_session=x",
                    b"ledger_session",
                ]
            ),
        )
        out.method = rng.choice([b"GET", out.method])
    elif kind == "content-type":
        out.set_header(b"content-type", rng.choice(CONTENT_TYPES))
    elif kind == "header":
        name = rng.choice(STREAM_HEADERS)
        out.headers.append((name, rng.choice(HEADER_JUNK)))
        if rng.random() < 0.3:
            out.headers.append((name, rng.choice(HEADER_JUNK)))
    else:
        out.kinds.pop()
    return out


MUTATIONS: tuple[str, ...] = (
    "encoding",
    "truncate",
    "bytes",
    "flip",
    "value",
    "deep",
    "path",
    "query",
    "token",
    "cookie",
    "content-type",
    "header",
)


def digest_query() -> str:
    """One row: per table (but the Idempotency-Key answers, which a refused request may store),
    its row count and a digest of its rows, so an update shows as well as an insert."""
    columns = [
        f"(SELECT array[count(*), coalesce(sum(hashtextextended(t::text, 0)), 0)] FROM {SCHEMA}.{name} t)"
        f' AS "{name}"'
        for name in sorted(table.name for table in metadata.tables.values())
        if name != "idempotency_keys"
    ]
    return "SELECT " + ", ".join(columns)


@dataclass
class FuzzStats:
    tried: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    bad: list[str] = field(default_factory=list)

    @property
    def server_errors(self) -> int:
        return sum(count for status, count in self.statuses.items() if status >= 500)

    def summary(self, profile: FuzzProfile, seconds: float) -> str:
        return (
            f"fuzz profile={profile.name} seed={profile.seed} requests={self.tried} "
            f"5xx={self.server_errors} seconds={seconds:.0f} statuses={dict(sorted(self.statuses.items()))} "
            f"mutations={dict(sorted(self.kinds.items()))}"
        )


class Fuzzer:
    """Sends requests to one service on a database of its own and checks each answer."""

    def __init__(self, server: Server, database_url: str, stats: FuzzStats) -> None:
        self.server = server
        self.stats = stats
        self.conn = psycopg.connect(database_url, autocommit=True)
        self.query = digest_query()
        self.digest = self._digest()

    def close(self) -> None:
        self.conn.close()

    def _digest(self) -> tuple[Any, ...]:
        row = self.conn.execute(self.query).fetchone()
        assert row is not None
        return tuple(row)

    def send(self, request: RawRequest) -> int:
        kinds = "+".join(request.kinds) or "valid"
        what = f"{request.label} {kinds}: {request.method!r} {request.target()[:120]!r}"
        try:
            answer = send_raw(
                self.server.url, request.method, request.target(), request.headers, request.body
            )
        except OSError as exc:
            self.stats.bad.append(f"{what} -> {type(exc).__name__}: {exc}")
            return -1
        self.stats.tried += 1
        self.stats.statuses[answer.status] += 1
        self.stats.kinds.update(request.kinds)
        if answer.status >= 500 or answer.status == 0:
            self.stats.bad.append(f"{what} -> {answer.status} {answer.body[:200]!r}")
        before, self.digest = self.digest, self._digest()
        # Only refusals: a read may write by design (resolving a mapping of another version ends
        # it; reading a pool's counts collects its expired entries).
        if (answer.status >= 400 or answer.status == 0) and before != self.digest:
            changed = [
                name
                for name, old, new in zip(self.query_names(), before, self.digest, strict=True)
                if old != new
            ]
            self.stats.bad.append(f"{what} -> {answer.status} but wrote to {changed}")
        return answer.status

    def query_names(self) -> list[str]:
        return sorted(table.name for table in metadata.tables.values() if table.name != "idempotency_keys")


def prepare_world(server: Server, tag: str) -> World:
    world = World(tag, server.token)
    with server.client() as admin:
        for run in (world.run, world.done):
            assert admin.post("/v1/runs", json={"run_id": run}).status_code in (200, 201)
        assert admin.put(f"/v1/runs/{world.done}/terminal", json={"status": "completed"}).status_code == 200
        minted = [
            admin.post("/v1/tokens", json=body).json()["token"]
            for body in ({"scope": "read"}, {"scope": "run", "run_id": world.run, "max_attempt": 1})
        ]
    world.read_token, world.run_token = minted
    return world


def fuzz_batch(
    fuzzer: Fuzzer, rng: random.Random, world: World, *, systematic: bool, random_requests: int
) -> None:
    """The seeds as they are, then (if `systematic`) each seed under each mutation once, then
    `random_requests` seeds under one to three random mutations."""
    seeds = seed_requests(world)
    for seed in seeds:
        fuzzer.send(seed)
    if systematic:
        for seed in seeds:
            for kind in MUTATIONS:
                fuzzer.send(mutate(rng, seed, world, kind))
    for _ in range(random_requests):
        request = rng.choice(seeds)
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            request = mutate(rng, request, world, rng.choice(MUTATIONS))
        fuzzer.send(request)


@pytest.fixture(scope="module")
def fuzz_service(pg_admin_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """A service on a database of its own, nothing running in the background (no watchdog), and
    streams that answer live reads within a second: each write it sees is a request's."""
    with database_of_its_own(pg_admin_url, "ledger_fuzz") as url:
        running = start_server(
            url,
            tmp_path_factory.mktemp("fuzz"),
            LEDGER_WATCHDOG="0",
            LEDGER_STREAM_LONG_POLL_S="1",
            LEDGER_STREAM_SSE_MAX_S="1",
        )
        try:
            yield running, url
        finally:
            stop_server(running)


SERVER_ERRORS = ("Traceback", '"level":"error"', '"level": "error"')


PROFILE = fuzz_profile()


@pytest.mark.fuzz
# Past the suite's per-test timeout: the ci profile takes about a minute on an idle machine, the
# soak as long as it is told; this only stops a hung run.
@pytest.mark.timeout((PROFILE.seconds or 0) + 600)
def test_byte_mutations_of_every_request_never_5xx_log_a_traceback_or_write_when_refused(
    fuzz_service: tuple[Server, str],
) -> None:
    server, url = fuzz_service
    profile = PROFILE
    rng = random.Random(profile.seed)
    stats = FuzzStats()
    fuzzer = Fuzzer(server, url, stats)
    started = time.monotonic()
    batch = 0
    try:
        while True:
            if profile.batches is not None and batch >= profile.batches:
                break
            if profile.seconds is not None and time.monotonic() - started >= profile.seconds:
                break
            log_start = len(server.log())
            world = prepare_world(server, f"fz{batch}-{uuid.uuid4().hex[:6]}")
            fuzzer.digest = fuzzer._digest()
            fuzz_batch(fuzzer, rng, world, systematic=batch == 0, random_requests=150)
            logged = [
                line[:400]
                for line in server.log()[log_start:].splitlines()
                if any(e in line for e in SERVER_ERRORS)
            ]
            stats.bad.extend(f"batch {batch} logged: {line}" for line in logged[:5])
            stats.bad.extend(f"batch {batch} invariant: {problem}" for problem in violations(url)[:10])
            batch += 1
            if len(stats.bad) > 50:
                break
    finally:
        fuzzer.close()
        print("\n" + stats.summary(profile, time.monotonic() - started))
    assert stats.server_errors == 0
    assert not stats.bad, f"seed {profile.seed}: {len(stats.bad)} problems:\n" + "\n".join(stats.bad[:50])
