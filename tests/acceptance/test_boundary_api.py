"""The HTTP boundary of the real service: JSON depth, run ids, cursors, and text repair.

Free text (log lines, status logs, error texts) is repaired - NUL and lone surrogates become
U+FFFD - and stored; structured values (ids, names, statuses, JSON payloads) are refused with 422
naming the field, and nothing is written.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.acceptance.conftest import new_id

JSON = {"Content-Type": "application/json"}


def open_run(client: httpx.Client) -> str:
    run_id = new_id("edge")
    assert client.post("/v1/runs", json={"run_id": run_id}).status_code == 200
    return run_id


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


def events_of(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    page = client.get(f"/v1/runs/{run_id}/events", params={"after": -1})
    assert page.status_code == 200, page.text
    events: list[dict[str, Any]] = page.json()["events"]
    return events


# -- depth ---------------------------------------------------------------------------------------


def test_an_event_nested_256_deep_is_refused_and_the_run_stays_readable(client: httpx.Client) -> None:
    run_id = open_run(client)
    deep = {"events": [{"type": "step.progress", "node_id": "n", "detail": nested(256)}]}
    answer = client.post(f"/v1/runs/{run_id}/events", json=deep)
    assert answer.status_code == 422, answer.text
    assert "64 levels" in answer.json()["error"]
    # Before, it was stored, the append answered 500 and every later read of the run did too.
    assert client.get(f"/v1/runs/{run_id}").status_code == 200
    assert events_of(client, run_id) == []
    with client.stream("GET", f"/v1/runs/{run_id}/events/stream", params={"after": "now"}) as stream:
        assert stream.status_code == 200


def test_depth_at_the_limits(client: httpx.Client) -> None:
    run_id = open_run(client)
    path = f"/v1/runs/{run_id}/events"

    def body(depth: int) -> dict[str, Any]:
        # The body, the events list and the event object wrap the value: three levels more; the
        # stored value is the event's payload object, one level more than the value.
        return {"events": [{"type": "step.progress", "node_id": "n", "detail": nested(depth)}]}

    assert client.post(path, json=body(59)).status_code == 200  # a 60-level stored value
    stored_too_deep = client.post(path, json=body(60))  # a 63-level body, but a 61-level value
    assert stored_too_deep.status_code == 422
    assert stored_too_deep.json()["error"].startswith("events[0]: ")
    body_too_deep = client.post(path, json=body(62))  # a 65-level body
    assert body_too_deep.status_code == 422
    assert body_too_deep.json()["error"] == "body: JSON nests deeper than 64 levels"
    [stored] = events_of(client, run_id)
    assert stored["detail"] == nested(59)


def test_a_body_nested_100000_deep_is_422_not_a_crash(client: httpx.Client) -> None:
    for raw in (b"[" * 100_000 + b"]" * 100_000, b'{"events": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"):
        answer = client.post("/v1/runs", content=raw, headers=JSON)
        assert answer.status_code == 422
        assert answer.json() == {"error": "body: JSON nests deeper than 64 levels", "code": "too_deep"}
    assert client.get("/healthz").status_code == 200


# -- run ids -----------------------------------------------------------------------------------------


def test_run_ids_are_checked_on_creation(client: httpx.Client) -> None:
    for bad in ("a/b", "x" * 513, "tab\there", "line\nbreak", "   ", "\x7f"):
        answer = client.post("/v1/runs", json={"run_id": bad})
        assert answer.status_code == 422, bad
        assert answer.json()["error"].startswith("run_id: ")
        upload = client.post(f"/v1/runs/{new_id('u')}/status", json={"run_id": bad, "status": "running"})
        assert upload.status_code == 422
    longest = "y" * 512
    assert client.post("/v1/runs", json={"run_id": longest}).status_code == 200
    assert client.get(f"/v1/runs/{longest}").status_code == 200
    claim = client.post("/v1/pools/edge/claim", json={"version": "v1", "run_id": "a/b"})
    assert claim.status_code == 422 and claim.json()["error"].startswith("run_id: ")


def test_an_encoded_slash_in_a_run_path_is_refused_and_creates_nothing(client: httpx.Client) -> None:
    prefix = new_id("slash")
    # Decoded, `x%2Fevents` would route to the events of run `x`.
    for method, path, body in (
        ("POST", f"/v1/runs/{prefix}%2Fevents", {"events": [{"type": "log", "line": "x"}]}),
        ("POST", f"/v1/runs/{prefix}%2Fb/status", {"status": "running"}),
        ("PUT", f"/v1/runs/{prefix}%2fb/mapping", {"instance_id": "i", "version": "v"}),
        ("POST", f"/v1/runs/{prefix}%2Fb/sheets", {"rows": []}),
        ("GET", f"/v1/runs/{prefix}%2Fb", None),
        ("GET", f"/v1/runs/{prefix}%2Fb/events", None),
    ):
        answer = client.request(method, path, json=body)
        assert answer.status_code == 422, (method, path, answer.text)
        assert answer.json()["error"] == "run_id: must not contain '/'"
    assert client.get(f"/v1/runs/{prefix}").status_code == 404
    listed = client.get("/v1/runs", params={"limit": 1000}).json()["runs"]
    assert not [run for run in listed if run["run_id"].startswith(prefix)]
    for segment in ("%00", "%ED%A0%80", "x" * 513, "%20"):
        answer = client.get(f"/v1/runs/{segment}")
        assert answer.status_code == 422, segment
        assert answer.json()["error"].startswith("run_id: ")


# -- cursors -----------------------------------------------------------------------------------------


def test_cursors_are_ascii_digits_minus_one_or_now(client: httpx.Client) -> None:
    run_id = open_run(client)
    client.post(
        f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": f"{n}"} for n in range(12)]}
    )
    path = f"/v1/runs/{run_id}/events"
    assert [e["seq"] for e in client.get(path, params={"after": "10"}).json()["events"]] == [11, 12]
    for bad in ("1_0", "\u0661\u0660", "+10", " 10", "10 ", "1e1", "0x0a", "-0"):
        answer = client.get(path, params={"after": bad})
        assert answer.status_code == 422, bad
        assert answer.json()["error"].startswith("after: ")
        stream = client.get(f"{path}/stream", params={"after": bad})
        assert stream.status_code == 422 and stream.json()["error"].startswith("after: ")
    for bad in ("1_0", "+10", "1e1"):
        answer = client.get(f"{path}/stream", headers={"Last-Event-ID": bad})
        assert answer.status_code == 422, bad
        assert answer.json()["error"].startswith("Last-Event-ID: ")
    # Terminal, so a valid cursor gets a bounded answer: the replay after it, then the end.
    client.put(f"/v1/runs/{run_id}/terminal", json={"status": "completed"})
    with client.stream("GET", f"{path}/stream", headers={"Last-Event-ID": "11"}) as stream:
        assert stream.status_code == 200
        ids = [line for line in stream.iter_lines() if line.startswith("id: ")]
    assert ids == ["id: 12", "id: 13"]


# -- text repair -----------------------------------------------------------------------------------


def test_free_text_is_repaired_not_refused(client: httpx.Client) -> None:
    run_id = open_run(client)
    # Sent raw, so the NUL and the lone surrogate escapes reach the server as the client wrote them.
    events = (
        b'{"events": ['
        b'{"type": "log", "line": "nul \\u0000 and half a pair \\ud800 end"},'
        b'{"type": "status", "status": "running", "logs": ["\\udfff", "fine"]},'
        b'{"type": "progress", "status": "running", "logs": ["a\\u0000"]}'
        b"]}"
    )
    answer = client.post(f"/v1/runs/{run_id}/events", content=events, headers=JSON)
    assert answer.status_code == 200, answer.text
    stored = events_of(client, run_id)
    assert stored[0]["line"] == "nul \ufffd and half a pair \ufffd end"
    assert stored[1]["logs"] == ["\ufffd", "fine"]
    assert stored[2]["logs"] == ["a\ufffd"]
    terminal = b'{"status": "failed", "error": "boom \\u0000\\udc00"}'
    ended = client.put(f"/v1/runs/{run_id}/terminal", content=terminal, headers=JSON)
    assert ended.status_code == 200, ended.text
    assert ended.json()["error"] == "boom \ufffd\ufffd"
    assert client.get(f"/v1/runs/{run_id}").json()["terminal"]["error"] == "boom \ufffd\ufffd"


def test_free_text_in_uploads_and_observations_is_repaired(client: httpx.Client) -> None:
    run_id = new_id("repair")
    upload = b'{"status": "running", "live_logs": ["x\\u0000", "\\ud83d"], "live_log_total_count": 2}'
    answer = client.post(f"/v1/runs/{run_id}/status", content=upload, headers=JSON)
    assert answer.status_code == 200, answer.text
    assert [e["line"] for e in events_of(client, run_id) if e["type"] == "log"] == ["x\ufffd", "\ufffd"]
    observation = (
        b'{"observations": [{"node_id": "n", "attempt": 1, "status": "failed", "error": "e\\u0000\\udfff"}]}'
    )
    recorded = client.post(f"/v1/runs/{run_id}/observations", content=observation, headers=JSON)
    assert recorded.status_code == 200, recorded.text
    stored = client.get(f"/v1/runs/{run_id}/observations").json()["observations"]
    assert stored[0]["error"] == "e\ufffd\ufffd"


def test_structured_values_are_still_refused_by_name(client: httpx.Client) -> None:
    run_id = open_run(client)
    cases = [
        ("POST", "/v1/runs", b'{"run_id": "r\\ud800"}', "run_id"),
        (
            "POST",
            "/v1/runs",
            b'{"run_id": "ok-' + run_id.encode() + b'", "play_name": "p\\u0000"}',
            "play_name",
        ),
        (
            "POST",
            f"/v1/runs/{run_id}/events",
            b'{"events": [{"type": "status", "status": "r\\u0000"}]}',
            "events[0].status",
        ),
        (
            "POST",
            f"/v1/runs/{run_id}/events",
            b'{"events": [{"type": "step.started", "x": "\\ud800"}]}',
            "events[0]",
        ),
        ("PUT", f"/v1/runs/{run_id}/terminal", b'{"status": "failed", "play_name": "\\udfff"}', "play_name"),
        ("PUT", f"/v1/runs/{run_id}/mapping", b'{"instance_id": "i\\u0000", "version": "v"}', "instance_id"),
        ("POST", "/v1/pools/edge/entries", b'{"version": "v\\ud800", "ids": ["a"]}', "version"),
    ]
    for method, path, body, field in cases:
        answer = client.request(method, path, content=body, headers=JSON)
        assert answer.status_code == 422, (path, body, answer.text)
        assert answer.json()["error"].startswith(f"{field}: "), (path, answer.json())
    assert events_of(client, run_id) == []
    assert client.get(f"/v1/runs/{run_id}/terminal").json() == {"state": None}
