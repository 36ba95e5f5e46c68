"""A bare asyncio HTTP/1.1 GET, for tests that hold a thousand connections open at once.

httpx's connection pool costs O(open connections) per request, so at 1,000 concurrent requests it
measures itself; one socket per request with `Connection: close` does not.
"""

from __future__ import annotations

import asyncio
import json
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
