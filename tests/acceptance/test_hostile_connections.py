"""What one connection may cost the real service: header size and count, idleness, slow requests,
and the number of connections. Raw sockets, so nothing on the client side bounds or fixes anything.

Times are asserted only against the configured limits, with a wide margin.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.acceptance.conftest import Server, start_server, stop_server

KEEPALIVE_S = 2.0
REQUEST_TIMEOUT_S = 2.0
MAX_HEADER_BYTES = 16 * 1024
MAX_HEADERS = 50
MAX_CONNECTIONS = 20
MARGIN = 5


@pytest.fixture(scope="module")
def guarded(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(
        database_url,
        tmp_path_factory.mktemp("hostile"),
        LEDGER_KEEPALIVE_TIMEOUT_S=str(KEEPALIVE_S),
        LEDGER_REQUEST_TIMEOUT_S=str(REQUEST_TIMEOUT_S),
        LEDGER_MAX_HEADER_BYTES=str(MAX_HEADER_BYTES),
        LEDGER_MAX_HEADERS=str(MAX_HEADERS),
        LEDGER_MAX_CONNECTIONS=str(MAX_CONNECTIONS),
        LEDGER_WATCHDOG="0",
    )
    try:
        yield running
    finally:
        stop_server(running)
        assert "unhandled error" not in running.log()


def connect(server: Server) -> socket.socket:
    parts = urlsplit(server.base_url)
    return socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=30)


def read_until_closed(sock: socket.socket, limit_s: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    started = time.monotonic()
    sock.settimeout(limit_s)
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks), time.monotonic() - started


def status_and_error(raw: bytes) -> tuple[int, str]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)["error"]


def send_ignoring_reset(sock: socket.socket, data: bytes) -> bool:
    """False once the server has closed the connection under the sender."""
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


def test_an_oversized_header_block_is_431_and_the_connection_closes(guarded: Server) -> None:
    with connect(guarded) as sock:
        big = b"x" * (100 * 1024)
        send_ignoring_reset(sock, b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + big + b"\r\n\r\n")
        raw, _ = read_until_closed(sock, 30)
    status, error = status_and_error(raw)
    assert status == 431 and str(MAX_HEADER_BYTES) in error
    assert b"connection: close" in raw.lower()


def test_a_never_finished_header_block_is_cut_off_at_the_limit(guarded: Server) -> None:
    """Sent without end, it would grow the process without bound and never be answered."""
    with connect(guarded) as sock:
        send_ignoring_reset(sock, b"GET /healthz HTTP/1.1\r\nHost: t\r\n")
        line = b"X-Pad: " + b"y" * 1000 + b"\r\n"
        sent = 0
        while sent < 8 * 1024 * 1024 and send_ignoring_reset(sock, line * 16):
            sent += len(line) * 16
        raw, _ = read_until_closed(sock, 30)
    assert raw.startswith(b"HTTP/1.1 431 "), raw


def test_too_many_header_fields_are_431(guarded: Server) -> None:
    with connect(guarded) as sock:
        fields = b"".join(b"X-F%d: v\r\n" % n for n in range(MAX_HEADERS + 10))
        send_ignoring_reset(sock, b"GET /healthz HTTP/1.1\r\nHost: t\r\n" + fields + b"\r\n")
        raw, _ = read_until_closed(sock, 30)
    status, error = status_and_error(raw)
    assert status == 431 and str(MAX_HEADERS) in error


def test_a_request_within_the_limits_is_served_and_its_connection_closed_when_idle(guarded: Server) -> None:
    with connect(guarded) as sock:
        fields = b"".join(b"X-F%d: v\r\n" % n for n in range(MAX_HEADERS - 5))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n" + fields + b"\r\n")
        raw, took = read_until_closed(sock, KEEPALIVE_S * MARGIN * 2)
    assert raw.startswith(b"HTTP/1.1 200 ")
    # Kept alive after the answer, then closed for idleness (not by the client, not by the timeout).
    assert took < KEEPALIVE_S * MARGIN


def test_a_connection_that_never_sends_anything_is_closed(guarded: Server) -> None:
    with connect(guarded) as sock:
        raw, took = read_until_closed(sock, KEEPALIVE_S * MARGIN * 2)
    assert raw == b""
    assert took < KEEPALIVE_S * MARGIN


def test_a_request_sent_too_slowly_is_408_and_closed(guarded: Server) -> None:
    """Slowloris: a byte of header now and then, never finishing, keeps no connection forever."""
    with connect(guarded) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n")
        started = time.monotonic()
        sock.settimeout(0.2)
        raw = b""
        while time.monotonic() - started < REQUEST_TIMEOUT_S * MARGIN:
            if not send_ignoring_reset(sock, b"X-Slow: 1\r\n"):
                break
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            raw += chunk
        took = time.monotonic() - started
    assert raw.startswith(b"HTTP/1.1 408 "), raw
    assert took < REQUEST_TIMEOUT_S * MARGIN


def test_connections_beyond_the_limit_are_closed_at_once(guarded: Server) -> None:
    held = [connect(guarded) for _ in range(MAX_CONNECTIONS)]
    try:
        with connect(guarded) as extra:
            send_ignoring_reset(extra, b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            raw, _ = read_until_closed(extra, 30)
        assert not raw.startswith(b"HTTP/1.1 200 "), raw
    finally:
        for sock in held:
            sock.close()
    # Once they are gone, connections are served again.
    deadline = time.monotonic() + 30
    while True:
        with connect(guarded) as sock:
            send_ignoring_reset(sock, b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            raw, _ = read_until_closed(sock, 30)
        if raw.startswith(b"HTTP/1.1 200 "):
            break
        assert time.monotonic() < deadline, raw
        time.sleep(0.05)
