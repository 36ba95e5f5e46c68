"""Limits on what one HTTP connection may cost before the app sees a request.

uvicorn's httptools protocol has no bound on a request's header block (size or count), and times
out only connections idle after an answer: a client may send headers forever (slowloris), hold a
connection it never uses, or grow the process by gigabytes with never-finished header blocks. This
protocol adds, per connection:

- **header size**: the request line and header fields together at most `max_header_bytes`, counted
  as the parser hands them over and, for a block still unfinished, as its bytes arrive (the parser
  buffers a field until it ends), so an endless block never grows past it; over it, 431 and close;
- **header count**: at most `max_headers` fields; over it, 431 and close;
- **idle**: a connection that sends nothing - new, or after an answer - for `keepalive_timeout_s`
  is closed (uvicorn's keep-alive timer, armed on connect as well);
- **slow requests**: from a request's first byte to its last (headers and body) at most
  `request_timeout_s`; past it, 408 and close (or just close once the app has the request);
- **connections**: at most `max_connections` open at once; one more is closed on accept.

Answers written here are `{"error": ..., "code": ...}` like every other, with `Connection: close`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ledger.service.errors import error_body
from ledger.service.json_answer import encode

__all__ = [
    "HttpLimits",
    "apply_limits",
]

_LIMITS_ATTRIBUTE = "ledger_http_limits"
_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large", 400: b"Bad Request"}


@dataclass(frozen=True, kw_only=True)
class HttpLimits:
    max_header_bytes: int = 32 * 1024
    max_headers: int = 100
    keepalive_timeout_s: float = 5.0
    request_timeout_s: float = 30.0
    max_connections: int = 4000


class _Refused(Exception):
    """Raised from a parser callback to stop parsing a request that is over a limit."""


class _LimitedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits `apply_limits` put on its config.

    Given to uvicorn by name (`http=`), so a worker process started by `--workers` finds it too;
    the limits travel with the config, which uvicorn hands to every worker.
    """

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.limits: HttpLimits = getattr(config, _LIMITS_ATTRIBUTE, None) or HttpLimits()
        self._head_open = False
        self._head_bytes = 0
        self._head_size = 0
        self._header_count = 0
        self._refusal: tuple[int, str] | None = None
        self._request_timer: asyncio.TimerHandle | None = None

    # -- connections and idleness ------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            transport.close()
            return
        # A connection that never sends a byte is idle too.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.limits.keepalive_timeout_s, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_request_timer()
        super().connection_lost(exc)

    def _stop_request_timer(self) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None

    def _request_timed_out(self) -> None:
        self._request_timer = None
        if self.transport.is_closing():
            return
        if self._head_open:
            self._refuse(408, f"the request was not received within {self.limits.request_timeout_s:g} s")
        else:
            # The app has the request but not its whole body: its next receive() sees a disconnect.
            self.transport.close()

    # -- the header block ----------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:
            return
        super().data_received(data)
        if self._head_open and self._refusal is None:
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_header_bytes:
                self._refuse(431, self._too_large())

    def _too_large(self) -> str:
        return f"the request's header block is larger than {self.limits.max_header_bytes} bytes"

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_open = True
        self._head_bytes = 0
        self._head_size = 0
        self._header_count = 0
        self._stop_request_timer()
        self._request_timer = self.loop.call_later(self.limits.request_timeout_s, self._request_timed_out)

    def on_url(self, url: bytes) -> None:
        self._head_size += len(url)
        if self._head_size > self.limits.max_header_bytes:
            self._refusal = (431, self._too_large())
            raise _Refused
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._head_size += len(name) + len(value) + 4  # ": " and CRLF
        if self._header_count > self.limits.max_headers:
            self._refusal = (431, f"the request has more than {self.limits.max_headers} header fields")
            raise _Refused
        if self._head_size > self.limits.max_header_bytes:
            self._refusal = (431, self._too_large())
            raise _Refused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head_open = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._stop_request_timer()
        super().on_message_complete()

    # -- refusing ------------------------------------------------------------------------------

    def send_400_response(self, msg: str) -> None:
        # uvicorn calls this for any parser error, a limit raised from a callback included.
        status, message = self._refusal or (400, msg)
        self._refusal = None
        self._refuse(status, message)

    def _refuse(self, status: int, message: str) -> None:
        self._refusal = (status, message)
        self._head_open = False
        self._stop_request_timer()
        if self.transport.is_closing():
            return
        body = encode(error_body(status, message))
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, _REASONS.get(status, b"Error"), len(body), body)
        )
        self.transport.close()


def apply_limits(config: uvicorn.Config, limits: HttpLimits) -> uvicorn.Config:
    """Serve `config`'s connections with `_LimitedHttpProtocol` enforcing `limits`."""
    config.http = _LimitedHttpProtocol
    setattr(config, _LIMITS_ATTRIBUTE, limits)
    return config
