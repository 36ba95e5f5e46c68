"""Bare HTTP/1.1: an asyncio GET, for tests that hold a thousand connections open at once, and a
blocking request of exact bytes (`send_raw`), for tests that send what no client library would.

httpx's connection pool costs O(open connections) per request, so at 1,000 concurrent requests it
measures itself; one socket per request with `Connection: close` does not. And httpx normalises
what it sends (it re-quotes a path, refuses a header value beyond latin-1).
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


async def get_raw(base_url: str, path_and_query: str, token: str) -> tuple[int, bytes]:
    """GET and return `(status, the body's exact bytes)`."""
    parts = urlsplit(base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            (
                f"GET {path_and_query} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
        )
        raw = await reader.read()
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


async def get_json(base_url: str, path_and_query: str, token: str) -> tuple[int, Any]:
    """GET and return `(status, parsed JSON body)`."""
    status, body = await get_raw(base_url, path_and_query, token)
    return status, json.loads(body)


@dataclass(frozen=True)
class RawAnswer:
    """What the server sent back: status 0 when it closed the connection without a status line."""

    status: int
    head: bytes
    body: bytes


def send_raw(
    base_url: str,
    method: bytes,
    target: bytes,
    headers: Sequence[tuple[bytes, bytes]],
    body: bytes,
    *,
    timeout_s: float = 40.0,
    body_wait_s: float = 2.0,
) -> RawAnswer:
    """One HTTP/1.1 request of exactly these bytes (request target, header names and values, body;
    `Host`, `Content-Length` and `Connection: close` added), blocking. An answer without a length
    (a stream) is read for at most `body_wait_s`: the status line is what a caller asks for."""
    parts = urlsplit(base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    lines = [method + b" " + target + b" HTTP/1.1", b"Host: " + host.encode(), b"Connection: close"]
    lines += [name + b": " + value for name, value in headers]
    if body or method in (b"POST", b"PUT"):
        lines.append(b"Content-Length: " + str(len(body)).encode())
    request = b"\r\n".join(lines) + b"\r\n\r\n" + body
    received = bytearray()
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(request)
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        head, _, rest = bytes(received).partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/"):
            return RawAnswer(0, head, rest)
        length = _content_length(head)
        sock.settimeout(body_wait_s if length is None else timeout_s)
        try:
            while length is None or len(rest) < length:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                rest += chunk
        except TimeoutError:
            pass  # a stream that goes on: its status line is in hand
    return RawAnswer(int(head.split(b" ", 2)[1]), head, rest)


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return None
