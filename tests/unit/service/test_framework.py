"""The service's framework parts without a database: body limit, depth check, run ids in paths,
Idempotency-Key parsing, error wording, drain, JSON logs."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.types import Message, Receive, Scope, Send

from ledger.idempotency import fingerprint_body
from ledger.service.app import create_app
from ledger.service.errors import describe_validation_error
from ledger.service.idempotent import key_problem
from ledger.service.jsontext import body_problem, bracket_depth, encoding_problem, too_deep
from ledger.service.logs import JsonFormatter, current_run_id
from ledger.service.middleware import BodyLimitMiddleware, path_run_id_problem
from ledger.service.security import ACCESS, api_access
from ledger.service.settings import ServiceSettings
from ledger.service.state import Drain
from ledger.validate import json_depth


async def echo_size(scope: Scope, receive: Receive, send: Send) -> None:
    """A bare ASGI app answering with the size of the body it read."""
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = json.dumps({"size": size}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def limited_client(limit: int) -> httpx.AsyncClient:
    app = BodyLimitMiddleware(echo_size, max_bytes=limit)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


async def test_a_body_at_the_limit_passes_through_whole() -> None:
    async with limited_client(100) as client:
        answer = await client.post("/", content=b"x" * 100)
    assert answer.json() == {"size": 100}


async def test_a_declared_length_over_the_limit_is_refused() -> None:
    async with limited_client(100) as client:
        answer = await client.post("/", content=b"x" * 101)
    assert answer.status_code == 413
    assert answer.json() == {
        "error": "request body is larger than the limit of 100 bytes",
        "code": "too_large",
        "max_body_bytes": 100,
    }


async def test_a_streamed_body_is_counted_as_it_arrives() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b"y" * 30

    async with limited_client(100) as client:
        answer = await client.post("/", content=chunks())
    assert answer.status_code == 413


async def test_the_app_still_sees_a_disconnect_after_the_replayed_body() -> None:
    seen: list[Message] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(await receive())
        seen.append(await receive())

    messages: list[Message] = [
        {"type": "http.request", "body": b"ab", "more_body": True},
        {"type": "http.request", "body": b"c", "more_body": False},
        {"type": "http.disconnect"},
    ]

    async def receive() -> Message:
        return messages.pop(0)

    async def send(message: Message) -> None:
        raise AssertionError("nothing should be sent")

    scope: Scope = {"type": "http", "headers": [], "method": "POST", "path": "/"}
    await BodyLimitMiddleware(app, max_bytes=10)(scope, receive, send)
    assert seen == [{"type": "http.request", "body": b"abc", "more_body": False}, {"type": "http.disconnect"}]


def test_validation_errors_name_the_field_and_the_problem() -> None:
    status, message = describe_validation_error(
        [{"loc": ("body", "events", 2, "type"), "msg": "Field required", "type": "missing"}]
    )
    assert (status, message) == (422, "events[2].type: field required")
    status, message = describe_validation_error(
        [
            {"loc": ("query", "timeout_ms"), "msg": "Input should be a valid integer", "type": "int_parsing"},
            {"loc": ("query", "after"), "msg": "bad", "type": "value_error"},
        ]
    )
    assert (status, message) == (422, "timeout_ms: input should be a valid integer (and 1 more)")


def test_malformed_or_non_json_bodies_are_400() -> None:
    status, message = describe_validation_error(
        [
            {
                "loc": ("body", 3),
                "msg": "JSON decode error",
                "type": "json_invalid",
                "ctx": {"error": "Expecting value"},
            }
        ]
    )
    assert (status, message) == (400, "body: invalid JSON (Expecting value)")
    status, _ = describe_validation_error(
        [{"loc": ("body",), "msg": "Input should be an object", "type": "model_type", "input": b"hi"}]
    )
    assert status == 400


async def test_drain_returns_the_work_result_when_it_finishes_first() -> None:
    drain = Drain()
    assert await drain.race(asyncio.sleep(0, result="done")) == (True, "done")


async def test_drain_releases_a_waiter_and_cancels_its_work() -> None:
    drain = Drain()
    never = asyncio.Event()
    cancelled = asyncio.Event()

    async def wait_forever() -> str:
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "unreachable"

    racing = asyncio.create_task(drain.race(wait_forever()))
    await asyncio.sleep(0)
    drain.start()
    assert await racing == (False, None)
    await asyncio.wait_for(cancelled.wait(), 5)
    # Once draining, new work is not even started.
    assert await drain.race(wait_forever()) == (False, None)


async def test_drain_races_in_the_callers_own_task() -> None:
    # No task per race: a thousand waiters woken at once each answer one task step sooner.
    drain = Drain()
    tasks = len(asyncio.all_tasks())

    async def count() -> int:
        return len(asyncio.all_tasks())

    assert await drain.race(count()) == (True, tasks)


async def test_drain_after_a_race_leaves_the_task_alone() -> None:
    # A task that has left its race is doing something else: the drain must not cancel that.
    drain = Drain()
    raced, after = asyncio.Event(), asyncio.Event()

    async def served() -> str:
        assert await drain.race(asyncio.sleep(0, result="page")) == (True, "page")
        raced.set()
        await after.wait()
        return "answered"

    task = asyncio.create_task(served())
    await raced.wait()
    drain.start()
    await asyncio.sleep(0)
    after.set()
    assert await task == "answered"
    assert task.cancelling() == 0


async def test_drain_gives_way_to_a_caller_gone_at_the_same_time() -> None:
    # Cancelled by the drain and by its own caller (the client went away): the caller's wins.
    drain = Drain()
    never = asyncio.Event()
    racing = asyncio.create_task(drain.race(never.wait()))
    await asyncio.sleep(0)
    drain.start()
    racing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await racing
    # Only the drain: the race answers, and the task carries no cancellation on.
    alone = Drain()

    async def waiter() -> tuple[tuple[bool, object], int]:
        answer = await alone.race(never.wait())
        current = asyncio.current_task()
        assert current is not None
        return answer, current.cancelling()

    task = asyncio.create_task(waiter())
    await asyncio.sleep(0)
    alone.start()
    assert await task == ((False, None), 0)


def test_json_log_lines_carry_the_run_id_and_extra_fields() -> None:
    record = logging.LogRecord("ledger.x", logging.INFO, __file__, 1, "hello %s", ("there",), None)
    record.route = "/v1/runs/{run_id}"
    token = current_run_id.set("run-7")
    try:
        entry = json.loads(JsonFormatter().format(record))
    finally:
        current_run_id.reset(token)
    assert entry["message"] == "hello there"
    assert entry["run_id"] == "run-7"
    assert entry["route"] == "/v1/runs/{run_id}"
    assert entry["level"] == "info"


def nested(depth: int) -> bytes:
    return b'{"events": ' + b"[" * (depth - 1) + b"1" + b"]" * (depth - 1) + b"}"


def test_json_deeper_than_the_limit_is_found_without_recursing() -> None:
    assert too_deep(nested(64)) is None
    assert too_deep(nested(65)) == "body: JSON nests deeper than 64 levels"
    # Far deeper than the interpreter's recursion limit: an answer, not a crash.
    assert too_deep(b"[" * 100_000 + b"]" * 100_000) == "body: JSON nests deeper than 64 levels"
    assert too_deep(b'{"a": ' * 100_000) == "body: JSON nests deeper than 64 levels"
    # Brackets inside strings are not nesting; broken JSON is the parser's to report.
    assert too_deep(b'{"line": "' + b"[" * 500 + b'"}') is None
    assert too_deep(b"[" * 70 + b"oops") is None
    # Lone surrogates are no longer refused up front: free text is repaired by the library.
    assert too_deep(b'{"events": [{"type": "log", "line": "ok \\ud800"}]}') is None


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ('{"a": "Ģ"}'.encode("utf-16-le"), "it looks like UTF-16-LE"),
        ('{"a": 1}'.encode("utf-16-be"), "it looks like UTF-16-BE"),
        ('{"a": 1}'.encode("utf-16"), "it is UTF-16-LE"),
        ('{"a": 1}'.encode("utf-32"), "it is UTF-32-LE"),
        ('{"a": 1}'.encode("utf-32-le"), "it looks like UTF-32-LE"),
        ('{"a": 1}'.encode("utf-32-be"), "it looks like UTF-32-BE"),
        (b'\xef\xbb\xbf{"a": 1}', "it is UTF-8 with a byte order mark"),
        (b'{"a": "\xed\xa0\x80"}', "byte 0xed at offset 7"),
        (b'{"a": "\xe9"}', "byte 0xe9 at offset 7"),
        (b'{"a": "x\x00"}', "a NUL byte at offset 8"),
    ],
)
def test_a_body_that_is_not_utf8_json_text_is_named(body: bytes, why: str) -> None:
    problem = encoding_problem(body)
    assert problem is not None and problem.startswith(f"body: must be UTF-8 JSON; {why}")
    refusal = body_problem(body)
    assert refusal is not None and (refusal.status, refusal.code) == (400, "invalid_encoding")


def test_utf8_text_and_an_empty_body_pass_the_encoding_check() -> None:
    for body in (b"", b"{}", '{"a": "Ģ 日本 🙂", "b": "\\u0000 \\ud800"}'.encode()):
        assert encoding_problem(body) is None


async def test_a_body_refused_by_the_check_never_reaches_the_app() -> None:
    app = BodyLimitMiddleware(echo_size, max_bytes=1_000_000, check=body_problem)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        refused = await client.post("/", content=nested(100))
        utf16 = await client.post("/", content=nested(100).decode().encode("utf-16-le"))
        fine = await client.post("/", content=b'{"run_id": "r"}')
    assert refused.status_code == 422
    assert refused.json() == {"error": "body: JSON nests deeper than 64 levels", "code": "too_deep"}
    assert utf16.status_code == 400
    assert utf16.json() == {
        "error": "body: must be UTF-8 JSON; it looks like UTF-16-LE",
        "code": "invalid_encoding",
    }
    assert fine.json() == {"size": 15}


async def test_api_docs_need_the_token_by_default_and_can_be_opened() -> None:
    # No lifespan runs here (no database): only routes that need none are exercised.
    for public in (True, False):
        app = create_app(ServiceSettings(public_docs=public), "postgresql://unused/db", ["tok"])
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            anonymous = await client.get("/openapi.json")
            with_token = await client.get("/openapi.json", headers={"Authorization": "Bearer tok"})
            metrics = await client.get("/metrics")
        assert anonymous.status_code == (200 if public else 401)
        assert with_token.status_code == 200
        assert "/v1/runs/{run_id}/events/stream" in with_token.json()["paths"]
        assert metrics.status_code == 401
        assert metrics.json() == {
            "error": "missing bearer token (Authorization: Bearer <token>)",
            "code": "unauthorized",
        }


def test_idempotency_keys_must_be_one_short_printable_value() -> None:
    assert key_problem([b"run-1:2:3"]) is None
    assert key_problem([b"x" * 1024]) is None
    assert key_problem([b"x" * 1025]) == "Idempotency-Key: must be at most 1024 bytes"
    assert key_problem([b"  "]) == "Idempotency-Key: must not be empty"
    assert key_problem([b"a", b"b"]) == "Idempotency-Key: send it once"
    assert key_problem([b"a\x01b"]) == "Idempotency-Key: must not contain control characters"


def test_the_same_body_is_equal_canonical_json() -> None:
    same = fingerprint_body(b'{"b": [1, 2], "a": {"y": 1, "x": "\\u00fc"}}')
    assert fingerprint_body(b'{"a":{"x":"\xc3\xbc","y":1},"b":[1,2]}') == same
    assert fingerprint_body(b'{"a": {"x": "u", "y": 1}, "b": [1, 2]}') != same
    assert fingerprint_body(b'{"b": [2, 1], "a": {"y": 1, "x": "\\u00fc"}}') != same
    # Not JSON: the bytes themselves.
    assert fingerprint_body(b"not json") == fingerprint_body(b"not json")
    assert fingerprint_body(b"not json") != fingerprint_body(b"not  json")
    assert fingerprint_body(b"[" * 5000) == fingerprint_body(b"[" * 5000)


def path_scope(raw_path: bytes) -> Scope:
    return {"type": "http", "path": raw_path.decode("latin-1"), "raw_path": raw_path, "headers": []}


def test_run_ids_in_paths_are_checked_raw() -> None:
    assert path_run_id_problem(path_scope(b"/v1/runs/run-1/events")) is None
    assert path_run_id_problem(path_scope(b"/v1/runs")) is None
    assert path_run_id_problem(path_scope(b"/v1/pools/a%2Fb/entries")) is None
    assert path_run_id_problem(path_scope(b"/v1/runs/%F0%9F%99%82")) is None  # an emoji is fine
    assert path_run_id_problem(path_scope(b"/v1/runs/x%2Fevents")) == "run_id: must not contain '/'"
    assert path_run_id_problem(path_scope(b"/v1/runs/x%2fb/status")) == "run_id: must not contain '/'"
    assert path_run_id_problem(path_scope(b"/v1/runs/%ED%A0%80")) == (
        "run_id: must be valid UTF-8 once percent-decoded"
    )
    assert path_run_id_problem(path_scope(b"/v1/runs/a%00")) is not None
    assert path_run_id_problem(path_scope(b"/v1/runs/%20")) == "run_id: must not be empty"
    assert path_run_id_problem(path_scope(b"/v1/runs/" + b"x" * 513)) is not None


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab"\\[]{}\u00fc\n'),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(alphabet='k"\\[{', max_size=3), children, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, ensure_ascii=st.booleans(), indent=st.sampled_from([None, 2]))
def test_brackets_outside_strings_nest_as_deep_as_the_json(
    value: Any, ensure_ascii: bool, indent: int | None
) -> None:
    body = json.dumps(value, ensure_ascii=ensure_ascii, indent=indent).encode()
    assert bracket_depth(body) == json_depth(value)


def test_every_api_route_is_found_in_access_before_routing_with_its_path_parameters() -> None:
    for (method, template), need in ACCESS.items():
        if not template.startswith("/v1/"):
            continue
        path = template.replace("{run_id}", "r-1").replace("{pool}", "p").replace("{name:path}", "a/b c")
        found = api_access(method, path)
        assert found is not None, (method, template)
        assert found[0] is need, (method, template)
        assert set(found[1].values()) <= {"r-1", "p", "a/b c"}
    assert api_access("PATCH", "/v1/runs/r") is None
    assert api_access("GET", "/v1/nothing/here") is None


def test_a_fingerprint_covers_the_headers_that_change_a_write() -> None:
    json_type = [("content-type", "application/json")]
    # A JSON body: by meaning, its content type implied (the fingerprint an API request always had).
    assert fingerprint_body(b'{"a": 1, "b": 2}', json_type) == fingerprint_body(b'{"b":2,"a":1}')
    assert fingerprint_body(b'{"a": 1}', [("content-type", "application/json; charset=utf-8")]) == (
        fingerprint_body(b'{"a":1}', json_type)
    )
    # Bytes: by bytes and content type.
    octets = [("content-type", "application/octet-stream")]
    assert fingerprint_body(b'{"a": 1}', octets, as_json=False) != fingerprint_body(
        b'{"a":1}', octets, as_json=False
    )
    assert fingerprint_body(b"x", octets, as_json=False) != fingerprint_body(
        b"x", [("content-type", "text/plain")], as_json=False
    )
    # The protocol's headers, in any order.
    producer = [("producer-id", "p"), ("producer-epoch", "0"), ("producer-seq", "0")]
    assert fingerprint_body(b"x", octets + producer, as_json=False) == fingerprint_body(
        b"x", producer[::-1] + octets, as_json=False
    )
    assert fingerprint_body(b"x", octets + producer, as_json=False) != fingerprint_body(
        b"x", [*octets, *producer[:2], ("producer-seq", "1")], as_json=False
    )
    assert fingerprint_body(b"", [("stream-closed", "true")]) != fingerprint_body(b"")
