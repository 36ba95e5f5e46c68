"""Hostile bytes against the real service: bodies in other encodings, crafted tokens on every path
that reads one, stream names and JSON stream payloads, Idempotency-Key answers to callers the
route refuses, and replayed stream writes. Each answer is a 4xx with a `code` or the protocol's
own answer, never a 500, and a refused request writes nothing."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ledger import tokens
from ledger.service.security import SESSION_COOKIE
from tests.acceptance.conftest import Server, new_id

# The reproduction: `Ģ` is U+0122, bytes `22 01` in UTF-16-LE, which a byte counter reads as a quote.
DEEP = 3000


def sneaky_body(encoding: str) -> bytes:
    text = '{"pad":"Ģ","events":' + "[" * DEEP + "]" * DEEP + "}"
    return text.encode(encoding)


ENCODINGS = ["utf-16-le", "utf-16-be", "utf-16", "utf-32", "utf-32-le", "utf-32-be", "utf-8-sig"]


def events_of(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"/v1/runs/{run_id}/events")
    assert answer.status_code == 200, answer.text
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


def assert_refused(answer: httpx.Response, status: int, code: str, *words: str) -> None:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["code"] == code, body
    for word in words:
        assert word in body["error"], body


@pytest.fixture
def run_id(client: httpx.Client) -> str:
    run = new_id("hostile")
    assert client.post("/v1/runs", json={"run_id": run}).status_code in (200, 201)
    return run


# -- bytes first ---------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_body_in_another_encoding_is_400_naming_it_on_every_json_path(
    client: httpx.Client, server: Server, run_id: str, encoding: str
) -> None:
    body = sneaky_body(encoding)
    name = {"utf-16": "UTF-16-LE", "utf-32": "UTF-32-LE", "utf-8-sig": "byte order mark"}.get(
        encoding, encoding.upper()
    )
    headers = {"Content-Type": "application/json"}
    # The append fast path without a token (the repro), with one, and the status upload.
    for path, auth in (
        (f"/v1/runs/{run_id}/events", {"Authorization": ""}),
        (f"/v1/runs/{run_id}/events", {}),
        (f"/v1/runs/{run_id}/status", {}),
        ("/v1/runs", {}),
        (f"/v1/runs/{run_id}/mapping", {}),
    ):
        method = "PUT" if path.endswith("/mapping") else "POST"
        answer = client.request(method, path, content=body, headers={**headers, **auth})
        assert_refused(answer, 400, "invalid_encoding", "UTF-8", name)
    assert events_of(client, run_id) == []


def test_a_utf16_body_that_would_be_valid_json_is_refused_not_guessed(
    client: httpx.Client, run_id: str
) -> None:
    # Shallow and valid once decoded as UTF-16: still not UTF-8, so nothing is appended.
    body = json.dumps({"events": [{"type": "log", "line": "hi"}]}).encode("utf-16-le")
    answer = client.post(f"/v1/runs/{run_id}/events", content=body)
    assert_refused(answer, 400, "invalid_encoding", "UTF-16-LE")
    assert events_of(client, run_id) == []


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b'{"events": [{"type": "log", "line": "\xff"}]}', ("0xff", "offset 37")),
        # An encoded surrogate (CESU-style) is not UTF-8.
        (b'{"events": [{"type": "log", "line": "\xed\xa0\x80"}]}', ("0xed",)),
        (b'{"events": [{"type": "log", "line": "a\x00b"}]}', ("NUL byte at offset 38",)),
        (b'{"events": [{"type": "log", "line": "\xc3"}]}', ("0xc3",)),
    ],
)
def test_a_body_that_is_not_utf8_is_400_and_writes_nothing(
    client: httpx.Client, run_id: str, raw: bytes, words: tuple[str, ...]
) -> None:
    for path in (f"/v1/runs/{run_id}/events", f"/v1/runs/{run_id}/status"):
        assert_refused(client.post(path, content=raw), 400, "invalid_encoding", *words)
    assert events_of(client, run_id) == []


def test_utf8_text_beyond_ascii_is_read_as_it_was_sent(client: httpx.Client, run_id: str) -> None:
    line = "Ģ 日本 🙂 \u202e"
    body = json.dumps({"events": [{"type": "log", "line": line}]}, ensure_ascii=False).encode()
    assert client.post(f"/v1/runs/{run_id}/events", content=body).status_code == 200
    assert [event["line"] for event in events_of(client, run_id)] == [line]


def test_depth_is_counted_on_utf8_at_the_limit(client: httpx.Client, run_id: str) -> None:
    # 64 levels in all is the limit: 63 inside the body object, 65 one past it (code too_deep).
    def body(levels: int) -> bytes:
        inner = "[" * (levels - 2) + '"Ģ"' + "]" * (levels - 2)
        return ('{"events": [{"type": "log", "line": "x", "extra": ' + inner + "}]}").encode()

    ok = client.post(f"/v1/runs/{run_id}/events", content=body(63))
    assert ok.status_code in (200, 422), ok.text  # the value's own bound may refuse it, never 500
    assert_refused(client.post(f"/v1/runs/{run_id}/events", content=body(66)), 422, "too_deep", "64")


# -- tokens ----------------------------------------------------------------------------------------


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def server_keyring(server: Server) -> tokens.Keyring:
    return tokens.parse_keyring((server.log_path.parent / "data" / "token-secret").read_text().strip())


def signed(keyring: tokens.Keyring, payload: bytes) -> str:
    """A token of `payload` signed with the server's own key, whatever the payload holds."""
    _, secret = keyring.signing
    head = f"v1.{b64(payload)}"
    return f"{head}.{b64(hmac.new(secret, head.encode(), hashlib.sha256).digest())}"


def crafted_tokens(keyring: tokens.Keyring) -> list[str]:
    kid = keyring.signing[0]
    deep = b"[" * 2000 + b"]" * 2000
    payloads = [
        b'{"kid":"\\ud800","exp":1}',  # the repro: a lone surrogate key id
        b'{"kid":"k\xed\xa0\x80","exp":1}',
        b"\xff\xfe{",
        b'{"kid":' + deep + b"}",
        json.dumps({"kid": "k" * 100, "exp": 1}).encode(),
        json.dumps({"kid": "k1\n", "exp": 1}).encode(),
        b"[1,2]",
        b'{"kid": NaN}',
    ]
    unsigned = (
        [f"v1.{b64(payload)}.AAAA" for payload in payloads]
        + [
            'v1.{"kid"}.AAAA',
            "v1.%%%%.AAAA",
            "v1.A.AAAA",  # base64 of no whole byte
            "v1." + b64(b'{"kid":"' + b"x" * 100_000 + b'"}')[:20_000] + ".AAAA",
            "v1..",
        ]
    )
    claims: list[dict[str, Any] | bytes] = [
        {"exp": 10**30, "kid": kid, "max_attempt": None, "run": None, "scope": "read"},
        {"exp": -1, "kid": kid, "max_attempt": None, "run": None, "scope": "read"},
        {"exp": 2**63, "kid": kid, "max_attempt": 1, "run": "r", "scope": "run"},
        {"exp": "soon", "kid": kid, "max_attempt": None, "run": None, "scope": "read"},
        {"exp": True, "kid": kid, "max_attempt": None, "run": None, "scope": "read"},
        {"exp": 4_000_000_000, "kid": kid, "max_attempt": 10**20, "run": "r", "scope": "run"},
        {"exp": 4_000_000_000, "kid": kid, "max_attempt": 1, "run": ["r"], "scope": "run"},
        {"exp": 4_000_000_000, "kid": kid, "max_attempt": 1, "run": "a/b", "scope": "run"},
        {"exp": 4_000_000_000, "kid": kid, "max_attempt": 1, "run": "\ud800", "scope": "run"},
        {"exp": 4_000_000_000, "kid": kid, "max_attempt": None, "run": None, "scope": "admin"},
        {"exp": 4_000_000_000, "kid": kid, "max_attempt": None, "run": None, "scope": {"a": [1]}},
        b'{"exp": 1e400, "kid": "' + kid.encode() + b'", "scope": "read"}',
        b'{"exp": Infinity, "kid": "' + kid.encode() + b'", "scope": "read"}',
        b'{"exp": ' + b"9" * 5000 + b', "kid": "' + kid.encode() + b'", "scope": "read"}',
        b'{"kid": "' + kid.encode() + b'", "x": ' + b"[" * 2000 + b"]" * 2000 + b"}",
    ]
    signed_ones = [
        signed(keyring, item if isinstance(item, bytes) else json.dumps(item).encode()) for item in claims
    ]
    return unsigned + signed_ones


def test_a_crafted_token_is_401_unauthorized_on_every_path_that_reads_one(
    client: httpx.Client, server: Server, run_id: str
) -> None:
    log_start = len(server.log())
    append = json.dumps({"events": [{"type": "log", "line": "x"}]})
    for token in crafted_tokens(server_keyring(server)):
        bearer = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=server.url, timeout=30) as anonymous:
            answers = {
                "header": anonymous.get("/v1/runs", headers=bearer),
                "fast path": anonymous.post(
                    f"/v1/runs/{run_id}/events",
                    content=append,
                    headers={**bearer, "Content-Type": "application/json"},
                ),
                "route": anonymous.post(f"/v1/runs/{run_id}/status", json={}, headers=bearer),
                "keyed": anonymous.post(
                    f"/v1/runs/{run_id}/events",
                    content=append,
                    headers={**bearer, "Idempotency-Key": "k", "Content-Type": "application/json"},
                ),
                "stream": anonymous.get("/v1/stream/anything", headers=bearer),
            }
            anonymous.cookies.set(SESSION_COOKIE, token)
            answers["cookie"] = anonymous.get("/v1/runs")
            answers["cookie, dashboard data"] = anonymous.get("/ui/api/pools")
            page = anonymous.get("/ui/", follow_redirects=False)
            anonymous.cookies.clear()
            signin = anonymous.post(
                "/ui/sign-in", data={"token": token}, headers={"Origin": server.url}, follow_redirects=False
            )
        for where, answer in answers.items():
            assert answer.status_code == 401, (where, token[:80], answer.status_code, answer.text[:200])
            assert answer.json()["code"] in ("unauthorized", "token_expired"), (where, answer.text)
        assert page.status_code in (303, 307, 401), (token[:80], page.status_code)
        assert signin.status_code == 401, (token[:80], signin.status_code, signin.text[:200])
    assert events_of(client, run_id) == []
    assert "Traceback" not in server.log()[log_start:]


def test_a_huge_token_is_refused_without_decoding_it(server: Server) -> None:
    token = "v1." + "A" * 20_000 + ".AAAA"
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        answer = anonymous.get("/v1/runs", headers={"Authorization": f"Bearer {token}"})
    assert_refused(answer, 401, "unauthorized", "malformed")


# -- Durable Streams -------------------------------------------------------------------------------


def test_a_stream_named_in_any_utf8_gets_a_percent_encoded_location(
    client: httpx.Client, server: Server
) -> None:
    tag = new_id("chat")
    encoded = f"/v1/stream/{tag}/%E6%97%A5%E6%9C%AC"
    text = {"Content-Type": "text/plain"}
    created = client.put(encoded, headers=text)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == server.url + encoded
    assert client.put(encoded, headers=text).status_code == 200
    assert client.post(encoded, content=b"hi", headers=text).status_code == 204
    # The Location reads the stream back, and names the same stream as the decoded name does.
    assert client.get(created.headers["location"]).content == b"hi"
    assert client.head(f"/v1/stream/{tag}/日本").status_code == 200


def test_a_stream_name_with_url_syntax_round_trips_through_location(
    client: httpx.Client, server: Server
) -> None:
    path = f"/v1/stream/{new_id('odd')}/a%3Fb%23c%25d%20e"
    created = client.put(path)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == server.url + path
    fork = client.put(
        f"/v1/stream/{new_id('fork')}", headers={"Stream-Forked-From": created.headers["location"]}
    )
    assert fork.status_code == 201, fork.text


def test_a_stream_name_that_is_not_utf8_is_400_and_creates_nothing(client: httpx.Client) -> None:
    path = f"/v1/stream/{new_id('bad')}/%FF%FE"
    for method in ("PUT", "POST", "GET", "HEAD", "DELETE"):
        answer = client.request(method, path, content=b"x" if method == "POST" else None)
        assert answer.status_code in (400, 404) if method == "HEAD" else answer.status_code == 400
    assert client.head(path.replace("%FF%FE", "\ufffd\ufffd")).status_code == 404


@pytest.mark.parametrize(
    "payload",
    [
        b'["\\ud800"]',
        b'{"a": "\\udfff"}',
        b"[NaN]",
        b'{"a": Infinity}',
        b"[-Infinity]",
        b"[1e400]",
        b'["\xff"]',
        b'\xef\xbb\xbf["bom"]',
        '["utf-16"]'.encode("utf-16"),
        b"[" * 5000 + b"]" * 5000,
    ],
)
def test_a_json_stream_takes_only_strict_json(client: httpx.Client, payload: bytes) -> None:
    path = f"/v1/stream/{new_id('json')}"
    json_type = {"Content-Type": "application/json"}
    assert client.put(path, headers=json_type).status_code == 201
    assert client.post(path, content=b'[{"ok": 1}]', headers=json_type).status_code == 204
    refused = client.post(path, content=payload, headers=json_type)
    assert refused.status_code == 400, refused.text
    # Nothing stored: every read is still JSON, holding only the first message.
    read = client.get(path, params={"offset": "-1"})
    assert read.json() == [{"ok": 1}]
    assert read.headers["stream-next-offset"] == "0000000000000000_0000000000000001"
    # Nor on create: a PUT with a body seeds the stream only when the body is strict JSON.
    seeded = f"/v1/stream/{new_id('json')}"
    assert client.put(seeded, content=payload, headers=json_type).status_code == 400
    assert client.head(seeded).status_code == 404


# -- authorize before replay -----------------------------------------------------------------------


def mint(client: httpx.Client, **body: Any) -> str:
    answer = client.post("/v1/tokens", json=body)
    assert answer.status_code in (200, 201), answer.text
    token: str = answer.json()["token"]
    return token


def test_an_expired_run_token_gets_401_not_the_stored_answer(
    client: httpx.Client, server: Server, run_id: str
) -> None:
    token = mint(client, scope="run", run_id=run_id, max_attempt=1, ttl_s=3)
    exp = int(json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "==="))["exp"])
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "once"}
    body = {"events": [{"type": "log", "line": "x"}]}
    with httpx.Client(base_url=server.url, timeout=30) as worker:
        first = worker.post(f"/v1/runs/{run_id}/events", json=body, headers=headers)
        assert first.status_code == 200, first.text
        assert worker.post(f"/v1/runs/{run_id}/events", json=body, headers=headers).headers.get(
            "idempotent-replayed"
        )
        while time.time() < exp + 0.05:
            time.sleep(0.1)
        late = worker.post(f"/v1/runs/{run_id}/events", json=body, headers=headers)
    assert_refused(late, 401, "token_expired")
    assert "idempotent-replayed" not in late.headers
    assert len(events_of(client, run_id)) == 1


def test_a_run_token_reusing_a_key_outside_its_run_gets_403_not_422(
    client: httpx.Client, server: Server, run_id: str
) -> None:
    mine = new_id("mine")
    token = mint(client, scope="run", run_id=mine, max_attempt=1, ttl_s=600)
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "open"}
    with httpx.Client(base_url=server.url, timeout=30) as worker:
        opened = worker.post("/v1/runs", json={"run_id": mine}, headers=headers)
        assert opened.status_code in (200, 201), opened.text
        other = worker.post("/v1/runs", json={"run_id": run_id}, headers=headers)
        assert_refused(other, 403, "forbidden")
        # Another run's path with a key never used there: refused the same way, nothing looked up.
        elsewhere = worker.post(f"/v1/runs/{run_id}/events", json={"events": []}, headers=headers)
        assert_refused(elsewhere, 403, "forbidden")
        # Its own request again is still the replay.
        again = worker.post("/v1/runs", json={"run_id": mine}, headers=headers)
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.json() == opened.json()


# -- replayed stream writes ------------------------------------------------------------------------

PROTOCOL = ("location", "stream-next-offset", "stream-closed", "producer-epoch", "producer-seq")


def protocol_headers(answer: httpx.Response) -> dict[str, str]:
    return {name: answer.headers[name] for name in PROTOCOL if name in answer.headers}


@pytest.fixture
def stream_path() -> Iterator[str]:
    yield f"/v1/stream/{new_id('replay')}/日本"


def test_a_replayed_stream_create_carries_the_first_answers_headers(
    client: httpx.Client, stream_path: str
) -> None:
    headers = {"Idempotency-Key": "create", "Content-Type": "text/plain"}
    first = client.put(stream_path, content=b"seed", headers=headers)
    again = client.put(stream_path, content=b"seed", headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert set(protocol_headers(first)) >= {"location", "stream-next-offset"}
    assert protocol_headers(again) == protocol_headers(first)


def test_a_replayed_producer_append_and_close_carry_their_headers(
    client: httpx.Client, stream_path: str
) -> None:
    assert client.put(stream_path, headers={"Content-Type": "text/plain"}).status_code == 201
    producer = {"Producer-Id": "p", "Producer-Epoch": "0", "Producer-Seq": "0", "Content-Type": "text/plain"}
    keyed = {**producer, "Idempotency-Key": "batch-0"}
    first = client.post(stream_path, content=b"one", headers=keyed)
    assert first.status_code == 200, first.text
    client.post(stream_path, content=b"two", headers={**producer, "Producer-Seq": "1"})
    again = client.post(stream_path, content=b"one", headers=keyed)
    assert again.headers["idempotent-replayed"] == "true"
    assert protocol_headers(again) == protocol_headers(first)
    assert set(protocol_headers(first)) == {"stream-next-offset", "producer-epoch", "producer-seq"}
    close = {"Stream-Closed": "true", "Idempotency-Key": "close", "Content-Type": "text/plain"}
    closed = client.post(stream_path, headers=close)
    closed_again = client.post(stream_path, headers=close)
    assert closed_again.headers["idempotent-replayed"] == "true"
    assert protocol_headers(closed_again) == protocol_headers(closed)
    assert protocol_headers(closed)["stream-closed"] == "true"


def test_a_key_reused_with_other_write_headers_or_other_bytes_is_422(
    client: httpx.Client, stream_path: str
) -> None:
    assert client.put(stream_path, headers={"Content-Type": "application/octet-stream"}).status_code == 201
    octets = {"Content-Type": "application/octet-stream"}
    producer = {**octets, "Producer-Id": "p", "Producer-Epoch": "0", "Producer-Seq": "0"}
    assert client.post(stream_path, content=b"x", headers={**producer, "Idempotency-Key": "k"}).is_success
    # The same bytes as another producer batch: a different write, not a replay.
    other_seq = client.post(
        stream_path, content=b"x", headers={**producer, "Producer-Seq": "1", "Idempotency-Key": "k"}
    )
    assert other_seq.status_code == 422, other_seq.text
    # JSON-equal but other bytes: a byte stream stores bytes, so it is another write.
    assert client.post(
        stream_path, content=b'{"a": 1}', headers={**octets, "Idempotency-Key": "j"}
    ).is_success
    spaced = client.post(stream_path, content=b'{"a":1}', headers={**octets, "Idempotency-Key": "j"})
    assert spaced.status_code == 422, spaced.text
    assert client.get(stream_path, params={"offset": "-1"}).content == b'x{"a": 1}'


def test_a_json_append_is_fingerprinted_by_meaning(client: httpx.Client, run_id: str) -> None:
    path = f"/v1/runs/{run_id}/events"
    key = {"Idempotency-Key": "json"}
    first = client.post(path, content=b'{"events": [{"type": "log", "line": "x"}]}', headers=key)
    again = client.post(path, content=b'{"events":[{"line":"x","type":"log"}]}', headers=key)
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.json() == first.json()
