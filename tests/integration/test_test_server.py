"""The tests' own Postgres, as the `ledger.testing` plugin hands it out, on whichever backend runs."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

LOOPBACK = "127.0.0.1"


def test_the_server_stores_text_as_utf8(pg_admin_url: str) -> None:
    # An SQL_ASCII server hands psycopg bytes where the ledger expects str.
    with psycopg.connect(pg_admin_url) as conn:
        assert conn.execute("SHOW server_encoding").fetchone() == ("UTF8",)
        assert conn.execute("SELECT 'ü€'::text").fetchone() == ("ü€",)


@pytest.mark.docker_backend
def test_a_docker_server_is_reached_on_loopback_and_asks_for_a_password(pg_admin_url: str) -> None:
    import docker

    url = urlsplit(pg_admin_url)
    assert url.hostname == LOOPBACK
    client = docker.from_env()
    try:
        bindings = [
            binding
            for container in client.containers.list()
            for binding in container.ports.get("5432/tcp") or []
            if binding["HostPort"] == str(url.port)
        ]
    finally:
        client.close()
    # Published on the loopback interface only, not on every one.
    assert [binding["HostIp"] for binding in bindings] == [LOOPBACK]
    # Like the official image: TCP connections need the password, so the tests cannot lean on trust.
    without_password = urlunsplit(url._replace(netloc=f"{url.username}@{url.hostname}:{url.port}"))
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(without_password, connect_timeout=10).close()
