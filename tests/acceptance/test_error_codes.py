"""Every error answer of the HTTP API carries a `code`, the one docs/errors.md lists for it."""

from __future__ import annotations

import re
import socket
import typing
from pathlib import Path

import httpx

from ledger import shapes
from ledger.service.errors import CODE_BY_STATUS, ERROR_DESCRIPTIONS
from tests.acceptance.conftest import ROOT, Server, new_id

ERRORS_DOC = ROOT / "docs" / "errors.md"


def test_each_status_answers_its_code(server: Server, client: httpx.Client) -> None:
    run_id = new_id("codes")
    assert client.post("/v1/runs", json={"run_id": run_id}).status_code in (200, 201)
    ended = client.put(f"/v1/runs/{run_id}/terminal", json={"status": "completed"})
    assert ended.status_code == 200, ended.text
    json_headers = {"Content-Type": "application/json"}
    answers = {
        "bad_request": client.post("/v1/runs", content=b"{not json", headers=json_headers),
        "unauthorized": httpx.get(f"{server.base_url}/v1/runs"),
        "not_found": client.get(f"/v1/runs/{new_id('missing')}"),
        "no endpoint": client.get("/v2/nothing"),
        "method_not_allowed": client.patch("/v1/runs"),
        "terminal": client.put(f"/v1/runs/{run_id}/terminal", json={"status": "failed"}),
        "too_large": client.post(
            "/v1/runs", content=b'{"run_id": "' + b"x" * (2 * 1024 * 1024) + b'"}', headers=json_headers
        ),
        "invalid": client.get("/v1/runs", params={"limit": 0}),
    }
    expected = {
        "bad_request": (400, "bad_request"),
        "unauthorized": (401, "unauthorized"),
        "not_found": (404, "not_found"),
        "no endpoint": (404, "not_found"),
        "method_not_allowed": (405, "method_not_allowed"),
        "terminal": (409, "terminal"),
        "too_large": (413, "too_large"),
        "invalid": (422, "invalid"),
    }
    got = {name: (answer.status_code, answer.json().get("code")) for name, answer in answers.items()}
    assert got == expected
    for answer in answers.values():
        assert isinstance(answer.json()["error"], str) and answer.json()["error"]


def test_a_header_block_over_the_limit_answers_431_with_its_code(server: Server) -> None:
    host, port = server.base_url.removeprefix("http://").split(":")
    headers = "".join(f"X-Filler-{i}: {'v' * 64}\r\n" for i in range(400))
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n{headers}\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431")
    assert b'"code":"headers_too_large"' in body.replace(b" ", b"")


def test_every_code_is_in_the_schema_and_the_docs() -> None:
    codes = set(typing.get_args(shapes.ErrorCode))
    assert set(CODE_BY_STATUS.values()) <= codes
    assert set(ERROR_DESCRIPTIONS) <= set(CODE_BY_STATUS)
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", ERRORS_DOC.read_text(), re.MULTILINE))
    assert codes <= documented, codes - documented


def test_every_exit_code_is_in_the_docs() -> None:
    from ledger.cli import exits, report

    constants = {
        value
        for module in (exits, report)
        for name, value in vars(module).items()
        if name.startswith("EXIT_") and isinstance(value, int)
    }
    documented = {
        int(code) for code in re.findall(r"^\| (\d+) \|", Path(ERRORS_DOC).read_text(), re.MULTILINE)
    }
    assert constants <= documented, constants - documented
