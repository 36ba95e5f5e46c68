"""Junk to every endpoint: whatever comes in, the answer is a clear 4xx (or a success), never a 500."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.acceptance.conftest import Server, new_id

HUGE = 10**30
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
