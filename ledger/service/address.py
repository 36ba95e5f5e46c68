"""The service's listening socket, bound before anything else starts, and what a failure means.

`ledger serve` binds it before Postgres, the migrations or even the web stack's imports: a port
in use, or an address that is not this machine's, is one line at once instead of after seconds of
starting everything else (uvicorn would bind only after the app's startup, then exit).
"""

from __future__ import annotations

import errno
import socket

__all__ = [
    "bind_problem",
    "bind_socket",
]


def bind_socket(host: str, port: int) -> socket.socket:
    """The service's listening socket, bound (`OSError` when the address is in use or not ours)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def bind_problem(exc: OSError, host: str, port: int) -> str:
    """One line for a person: why `host:port` could not be bound, and what to do about it."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        advice = "another process listens there (another `ledger serve`?): choose another port with --port"
    elif exc.errno == errno.EADDRNOTAVAIL:
        advice = f"{host} is not an address of this machine: listen on 127.0.0.1, 0.0.0.0 or one of its own"
    elif exc.errno == errno.EACCES:
        advice = "ports below 1024 need privileges: choose another with --port"
    elif isinstance(exc, socket.gaierror):
        advice = f"{host} is not a host name or address this machine can resolve"
    else:
        advice = "check --host and --port"
    return f"cannot listen on {host}:{port}: {reason} ({advice})"
