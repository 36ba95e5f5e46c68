"""A bare asyncio HTTP/1.1 client for the benchmarks: one keep-alive connection, prepared requests,
answers read by Content-Length, SSE read from the chunked body line by line.

httpx spends several times the server's CPU per request; on a machine of two cores a benchmark
driven by it measures the client as much as the server. This client costs a few microseconds per
request, so the figures are the server's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator


class BareConnection:
    """One keep-alive connection to `base` (http://host:port) sending `token` as the bearer."""

    def __init__(self, base: str, token: str) -> None:
        self.host, port = base.removeprefix("http://").split(":")
        self.port = int(port)
        self.auth = f"Authorization: Bearer {token}\r\n"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> BareConnection:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

    def _send(self, method: str, path: str, body: bytes | None) -> None:
        assert self.writer is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n{self.auth}"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + (body or b""))

    async def _head(self) -> tuple[int, dict[bytes, bytes]]:
        assert self.reader is not None
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *lines = raw[:-4].split(b"\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        return int(status_line.split(b" ", 2)[1]), headers

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """(status, body) of one request on this connection."""
        assert self.reader is not None
        self._send(method, path, body)
        status, headers = await self._head()
        length = int(headers.get(b"content-length", b"0"))
        return status, await self.reader.readexactly(length)

    async def lines(self, path: str) -> AsyncIterator[bytes]:
        """The lines of a streamed (chunked) answer to GET `path`, as they arrive; ends with it."""
        assert self.reader is not None
        self._send("GET", path, None)
        status, headers = await self._head()
        if status != 200 or headers.get(b"transfer-encoding") != b"chunked":
            return
        pending = b""
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
            chunk = await self.reader.readexactly(size + 2)
            if size == 0:
                return
            pending += chunk[:-2]
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line
