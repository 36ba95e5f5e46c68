"""A TCP proxy in front of the service that can cut every open connection at once: how a test drops
the page's SSE stream for real (the browser sees the socket close, as with a lost network)."""

from __future__ import annotations

import socket
import threading
from contextlib import suppress


class DroppingProxy:
    """Forwards 127.0.0.1:<port> to `target`; `drop()` closes every connection open right now."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self.dropped = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            self._close(source, sink)

    def _close(self, *socks: socket.socket) -> None:
        with self._lock:
            for sock in socks:
                self._open.discard(sock)
        for sock in socks:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def drop(self) -> int:
        """Close every open connection (both sides); how many sockets were closed."""
        with self._lock:
            victims = list(self._open)
        self._close(*victims)
        self.dropped += len(victims)
        return len(victims)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.drop()
