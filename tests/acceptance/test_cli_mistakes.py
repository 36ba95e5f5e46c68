"""Every mistake a person can make with a `ledger` command answers in one line on stderr, with its
documented exit code (`ledger.cli.exits`, docs/errors.md), never a traceback, and soon: a port in
use, a database that refuses or never answers, an unreachable ledger service, a token that does
not fit. Each runs the real command as a subprocess; nothing here asserts a wall-clock figure
tighter than the timeout the command itself is configured with.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ledger.cli.exits import EXIT_ADDRESS, EXIT_CONFIG, EXIT_DATABASE, EXIT_LEDGER, EXIT_TOKEN
from ledger.cli.report import EXIT_UPLOAD_FAILED
from ledger.service.address import bind_problem
from tests.acceptance.conftest import ROOT, Server, free_port, new_id

# What `ledger gc` used to sit out on a refused database: the connection pool's own wait for its
# first connection. A probe bounded by libpq's connect timeout answers well within it.
POOL_OPEN_WAIT_S = 15.0


def run_ledger(
    *args: str, env: dict[str, str], input: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("LEDGER_TOKEN", "LEDGER_API_TOKENS")}
    return subprocess.run(
        [sys.executable, "-m", "ledger.cli", *args],
        cwd=ROOT,
        env={**full, "COLUMNS": "200", **env},
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_ledger(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("LEDGER_TOKEN", "LEDGER_API_TOKENS")}
    return subprocess.Popen(
        [sys.executable, "-m", "ledger.cli", *args],
        cwd=ROOT,
        env={**full, **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on: connecting is refused at once."""
    return free_port()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections into its backlog and never says a word."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


# -- a port in use ------------------------------------------------------------------------------


def test_serve_on_a_port_in_use_is_one_line_exit_7_and_never_ready(tmp_path: Path, closed_port: int) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        # The database is unreachable too: the address is checked first, before anything starts.
        env = {
            "LEDGER_DATABASE_URL": f"postgresql://ledger@127.0.0.1:{closed_port}/ledger",
            "LEDGER_DATA_DIR": str(tmp_path),
            "LEDGER_API_TOKENS": "t",
        }
        result = run_ledger("serve", "--port", str(port), env=env)
    assert result.returncode == EXIT_ADDRESS
    line = one_line(result)
    assert line.startswith("Error: cannot listen on 127.0.0.1:") and f":{port}:" in line
    assert "another process listens there" in line and "--port" in line
    assert "service ready" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("code", "advice"),
    [
        pytest.param(errno.EADDRINUSE, "another process listens there", id="in-use"),
        pytest.param(errno.EADDRNOTAVAIL, "192.0.2.1 is not an address of this machine", id="not-ours"),
        pytest.param(errno.EACCES, "ports below 1024 need privileges", id="privileged"),
    ],
)
def test_a_bind_failure_names_its_real_cause(code: int, advice: str) -> None:
    # Built, not provoked: binding an address that is not this machine's needs none to exist.
    line = bind_problem(OSError(code, os.strerror(code)), "192.0.2.1", 80)
    assert line.startswith(f"cannot listen on 192.0.2.1:80: {os.strerror(code)} (")
    assert advice in line
    assert ("another `ledger serve`" in line) == (code == errno.EADDRINUSE)


def test_serve_says_where_it_listens_and_how_to_sign_in(tmp_path: Path, server: Server) -> None:
    said = server.log()
    assert f"Run Ledger listens on {server.url}" in said
    assert f"dashboard: {server.url}/ui/" in said
    assert "sign in there with the admin token: the first of LEDGER_API_TOKENS" in said


def test_token_show_prints_the_admin_token_of_the_data_dir(tmp_path: Path) -> None:
    missing = run_ledger("token", "show", env={"LEDGER_DATA_DIR": str(tmp_path)})
    assert missing.returncode == EXIT_CONFIG
    assert "no admin token yet" in one_line(missing) and str(tmp_path / "api-token") in missing.stderr
    (tmp_path / "api-token").write_text("stored-token\n")
    shown = run_ledger("token", "show", env={"LEDGER_DATA_DIR": str(tmp_path)})
    assert shown.returncode == 0 and shown.stdout == "stored-token\n"
    configured = run_ledger(
        "token", "show", env={"LEDGER_DATA_DIR": str(tmp_path), "LEDGER_API_TOKENS": " a , b"}
    )
    assert configured.stdout == "a\n"


# -- an unreachable database -----------------------------------------------------------------------

DATABASE_COMMANDS = [
    pytest.param(["gc", "--dry-run"], id="gc"),
    pytest.param(["db", "current"], id="db-current"),
    pytest.param(["db", "upgrade"], id="db-upgrade"),
    pytest.param(["watchdog", "--once"], id="watchdog"),
    pytest.param(["psql", "-c", "SELECT 1"], id="psql"),
    pytest.param(["serve", "--port", "0"], id="serve"),
    pytest.param(["demo", "--exit"], id="demo"),
]


@pytest.mark.parametrize("args", DATABASE_COMMANDS)
def test_a_refused_database_is_one_line_naming_the_variable(
    args: list[str], tmp_path: Path, closed_port: int
) -> None:
    env = {
        "LEDGER_DATABASE_URL": f"postgresql://ledger:secret@127.0.0.1:{closed_port}/ledger",
        "LEDGER_DATA_DIR": str(tmp_path),
        "LEDGER_API_TOKENS": "t",
    }
    result = run_ledger(*args, env=env, timeout=POOL_OPEN_WAIT_S * 4)
    assert result.returncode == EXIT_DATABASE, result.stdout + result.stderr
    line = one_line(result)
    assert line.startswith("Error: cannot reach the database at LEDGER_DATABASE_URL")
    assert str(closed_port) in line and "secret" not in line
    # The refusal itself is the answer: the probe's, not the pool's wait for a first connection.
    assert "Connection refused" in line and "couldn't get a connection" not in line


def test_a_database_that_never_answers_is_one_line_within_the_connect_timeout(
    tmp_path: Path, silent_port: int
) -> None:
    env = {
        "LEDGER_DATABASE_URL": f"postgresql://ledger@127.0.0.1:{silent_port}/ledger",
        "LEDGER_DATA_DIR": str(tmp_path),
    }
    result = run_ledger("gc", "--dry-run", env=env, timeout=POOL_OPEN_WAIT_S * 4)
    assert result.returncode == EXIT_DATABASE
    line = one_line(result)
    assert "LEDGER_DATABASE_URL" in line
    # libpq's connect timeout ended the wait, not the pool's own (longer) wait for a connection.
    assert "timeout expired" in line and "couldn't get a connection" not in line


@pytest.mark.parametrize("args", [["gc", "--dry-run"], ["db", "current"], ["serve", "--port", "0"]])
def test_a_malformed_database_url_is_one_line_exit_6(args: list[str], tmp_path: Path) -> None:
    env = {"LEDGER_DATABASE_URL": "mysql://ledger@127.0.0.1/ledger", "LEDGER_DATA_DIR": str(tmp_path)}
    result = run_ledger(*args, env=env)
    assert result.returncode == EXIT_CONFIG
    assert "LEDGER_DATABASE_URL must be a postgresql:// URL" in one_line(result)


# -- an unreachable ledger service -----------------------------------------------------------------

CLIENT_COMMANDS = [
    pytest.param(["runs"], id="runs"),
    pytest.param(["run", "some-run"], id="run"),
    pytest.param(["events", "some-run"], id="events"),
    pytest.param(["events", "some-run", "--follow"], id="events-follow"),
    pytest.param(["pool", "v1"], id="pool"),
    pytest.param(["token", "create", "--scope", "read"], id="token-create"),
]


def client_env(tmp_path: Path, url: str, token: str = "t") -> dict[str, str]:
    return {"LEDGER_URL": url, "LEDGER_TOKEN": token, "LEDGER_DATA_DIR": str(tmp_path)}


MALFORMED_LEDGER_URLS = [
    pytest.param("127.0.0.1:8787", "does not start with http:// or https://", id="no-scheme"),
    pytest.param("localhost:8787", "does not start with http:// or https://", id="host-as-scheme"),
    pytest.param("http://127.0.0.1:8787/v1", "has a path (/v1)", id="path"),
    pytest.param("http://127.0.0.1:8787/?x=1", "has a query or fragment", id="query"),
    pytest.param("http://:8787", "names no host", id="no-host"),
]


@pytest.mark.parametrize(("url", "problem"), MALFORMED_LEDGER_URLS)
@pytest.mark.parametrize("args", [*CLIENT_COMMANDS, pytest.param(["report", "--run-id", "r"], id="report")])
def test_a_malformed_ledger_url_is_a_configuration_error_said_at_once(
    args: list[str], url: str, problem: str, tmp_path: Path
) -> None:
    # A deadline far past the subprocess's timeout: a command that retried the mistake as an
    # outage would be killed by the timeout instead of answering.
    result = run_ledger(*args, "--deadline", "600", env=client_env(tmp_path, url), input="", timeout=60)
    assert result.returncode == EXIT_CONFIG
    line = one_line(result)
    assert line.startswith("Error: LEDGER_URL=")
    assert problem in line
    assert "e.g. http://127.0.0.1:8787" in line


@pytest.mark.parametrize("url", ["http://127.0.0.1:1", "http://127.0.0.1:1/", "https://ledger.example:443"])
def test_a_well_formed_ledger_url_is_taken_without_its_trailing_slash(url: str) -> None:
    from ledger.client import service_url

    assert service_url({"LEDGER_URL": f"  {url}  "}) == url.rstrip("/")
    assert service_url({}) == "http://127.0.0.1:8787"


@pytest.mark.parametrize("args", CLIENT_COMMANDS)
def test_an_unreachable_ledger_says_so_at_once_then_gives_up_at_the_deadline(
    args: list[str], tmp_path: Path, closed_port: int
) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    result = run_ledger(*args, "--deadline", "1", env=client_env(tmp_path, url))
    assert result.returncode == EXIT_LEDGER
    assert "Traceback" not in result.stderr
    first, last = result.stderr.strip().splitlines()
    assert first.startswith(f"Error: ledger {args[0]}")
    assert f"cannot reach the ledger service at {url}" in first and "LEDGER_URL" in first
    assert "retrying for up to 1 s (--deadline)" in first
    assert last.startswith("Error: gave up after 1 s:") and url in last


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["runs"], id="runs"),
        pytest.param(["events", "some-run", "--follow"], id="events-follow"),
        pytest.param(["token", "create", "--scope", "read"], id="token-create"),
    ],
)
def test_an_unreachable_ledger_with_no_deadline_is_one_line(
    args: list[str], tmp_path: Path, closed_port: int
) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    result = run_ledger(*args, "--deadline", "0", env=client_env(tmp_path, url))
    assert result.returncode == EXIT_LEDGER
    line = one_line(result)
    assert url in line and "LEDGER_URL" in line


def test_the_first_failure_is_printed_long_before_the_deadline(tmp_path: Path, closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    with start_ledger("runs", "--deadline", "600", env=client_env(tmp_path, url)) as process:
        try:
            assert process.stderr is not None
            first = process.stderr.readline()
            # Still retrying: the line came at the first failure, not at the deadline.
            assert process.poll() is None
            assert f"cannot reach the ledger service at {url}" in first
        finally:
            process.kill()


REPORT_INPUT = "".join(
    json.dumps(line) + "\n"
    for line in ({"type": "log", "line": "hello"}, {"type": "result", "status": "completed"})
)


def test_report_to_an_unreachable_ledger_says_so_at_once_and_exits_5_at_the_deadline(
    tmp_path: Path, closed_port: int
) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    result = run_ledger(
        "report",
        "--run-id",
        new_id("r"),
        "--deadline",
        "1",
        env=client_env(tmp_path, url),
        input=REPORT_INPUT,
    )
    assert result.returncode == EXIT_UPLOAD_FAILED
    assert "Traceback" not in result.stderr
    first, last = result.stderr.strip().splitlines()
    assert first.startswith(f"Error: cannot reach the ledger at {url}") and "LEDGER_URL" in first
    assert "--deadline" in first
    assert last.startswith("Error: the final upload for run")


def test_report_prints_the_first_failure_while_it_keeps_retrying(tmp_path: Path, closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    args = ("report", "--run-id", new_id("r"), "--deadline", "600")
    with start_ledger(*args, env=client_env(tmp_path, url)) as process:
        try:
            assert process.stdin is not None and process.stderr is not None
            process.stdin.write(REPORT_INPUT)
            process.stdin.close()
            first = process.stderr.readline()
            assert process.poll() is None
            assert f"cannot reach the ledger at {url}" in first
        finally:
            process.kill()


# -- a token that does not fit ---------------------------------------------------------------------


def mint(server: Server, **body: object) -> str:
    with server.client() as http:
        answer = http.post("/v1/tokens", json=body)
    assert answer.status_code == 200, answer.text
    token: str = answer.json()["token"]
    return token


def test_a_read_token_minting_is_told_an_admin_token_is_needed(server: Server, tmp_path: Path) -> None:
    result = run_ledger(
        "token",
        "create",
        "--scope",
        "read",
        env=client_env(tmp_path, server.base_url, mint(server, scope="read")),
    )
    assert result.returncode == EXIT_TOKEN
    line = one_line(result)
    assert "a read token may only read" in line and "this request needs an admin token" in line


def test_a_read_token_reporting_is_told_a_run_token_would_do(server: Server, tmp_path: Path) -> None:
    run_id = new_id("r")
    result = run_ledger(
        "report",
        "--run-id",
        run_id,
        "--deadline",
        "1",
        env=client_env(tmp_path, server.base_url, mint(server, scope="read")),
        input=REPORT_INPUT,
    )
    # Said at the first refusal, as one line, with the exit code of a refused token.
    assert result.returncode == EXIT_TOKEN
    [line] = result.stderr.strip().splitlines()
    assert f"needs a run token for run {run_id!r} or an admin token" in line
    assert "Traceback" not in result.stderr


def test_a_read_token_writing_over_http_is_told_which_token_would(server: Server) -> None:
    run_id = new_id("r")
    with server.client() as admin:
        assert admin.post("/v1/runs", json={"run_id": run_id}).status_code in (200, 201)
    with httpx.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {mint(server, scope='read')}"}
    ) as http:
        refused = http.post(f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": "x"}]})
        minting = http.post("/v1/tokens", json={"scope": "read"})
    assert refused.status_code == 403
    needs = f"this request needs a run token for run {run_id!r} or an admin token"
    assert refused.json() == {"error": f"a read token may only read; {needs}", "code": "forbidden"}
    assert minting.status_code == 403 and minting.json()["error"].endswith(
        "this request needs an admin token"
    )


def test_an_unknown_token_is_told_which_kind_the_command_needs(server: Server, tmp_path: Path) -> None:
    result = run_ledger("runs", env=client_env(tmp_path, server.base_url, "not-a-token"))
    assert result.returncode == EXIT_TOKEN
    line = one_line(result)
    assert "this command needs a read token or an admin token" in line and "LEDGER_TOKEN" in line


# -- typos -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        pytest.param(
            ["rnus"], "No such command 'rnus'. Did you mean 'runs'? (`ledger --help` says more)", id="command"
        ),
        pytest.param(
            ["events", "--folow", "r"],
            "No such option '--folow'. Did you mean '--follow'? (`ledger events --help` says more)",
            id="option",
        ),
        pytest.param(["run"], "Missing argument 'RUN_ID'. (`ledger run --help` says more)", id="missing"),
    ],
)
def test_a_typo_is_one_line_with_the_suggestion_and_exit_2(
    args: list[str], said: str, tmp_path: Path
) -> None:
    result = run_ledger(*args, env={"LEDGER_DATA_DIR": str(tmp_path)})
    assert result.returncode == 2
    assert one_line(result) == f"Error: {said}"
    assert result.stdout == ""


def test_a_group_named_alone_prints_its_help(tmp_path: Path) -> None:
    result = run_ledger("token", env={"LEDGER_DATA_DIR": str(tmp_path)})
    assert "Usage: ledger token" in result.stdout + result.stderr
    assert "create" in result.stdout + result.stderr
