"""Every `ledger` command's error line starts the way docs/errors.md says: `Error: <what is wrong>`,
on the first line of stderr, with the documented exit code. Each documented error path of each
command is run as the real command in a subprocess: a run the ledger does not know, an unreachable
ledger (a closed port on 127.0.0.1), a malformed `LEDGER_URL`, a refused token, an unreachable
database, an unknown command and an unknown option.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import click
import pytest

from ledger.cli.exits import EXIT_CONFIG, EXIT_DATABASE, EXIT_FAILED, EXIT_LEDGER, EXIT_TOKEN, EXIT_USAGE
from ledger.cli.report import EXIT_UPLOAD_FAILED
from tests.acceptance.conftest import Server, free_port, new_id
from tests.acceptance.test_cli_mistakes import run_ledger

# Every command the `ledger` group lists, with the arguments it needs to get as far as its checks.
COMMANDS = {
    "cancel": ["cancel", "some-run"],
    "db": ["db", "current"],
    "demo": ["demo"],
    "events": ["events", "some-run"],
    "gc": ["gc"],
    "pool": ["pool", "v1"],
    "psql": ["psql"],
    "report": ["report", "--run-id", "some-run"],
    "run": ["run", "some-run"],
    "runs": ["runs"],
    "serve": ["serve"],
    "token": ["token", "create", "--scope", "read"],
    "watchdog": ["watchdog"],
}
# Those that talk to the ledger service (LEDGER_URL) rather than to the database.
OVER_HTTP = ["cancel", "events", "pool", "report", "run", "runs", "token"]
# Those that reach Postgres themselves (LEDGER_DATABASE_URL).
ON_THE_DATABASE = {"db": ["db", "current"], "gc": ["gc"], "watchdog": ["watchdog", "--once"]}
# What `ledger report` reads: one event, then the result.
REPORT_INPUT = '{"type": "log", "line": "hello"}\n{"type": "result", "status": "completed"}\n'


def first_error_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The first line of stderr, after checking the exit code and that no traceback came."""
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines, "nothing on stderr"
    assert lines[0].startswith("Error: "), result.stderr
    return lines[0]


def env_for(tmp_path: Path, url: str, token: str) -> dict[str, str]:
    return {"LEDGER_URL": url, "LEDGER_TOKEN": token, "LEDGER_DATA_DIR": str(tmp_path)}


def test_the_table_here_names_every_command_the_group_lists() -> None:
    from ledger.cli.app import cli

    assert sorted(COMMANDS) == sorted(cli.list_commands(click.Context(cli)))


# `ledger psql` hands every option to psql, whose own words and codes answer a bad one.
@pytest.mark.parametrize("name", sorted(set(COMMANDS) - {"psql"}))
def test_an_unknown_option_is_an_error_line_and_exit_2(name: str, tmp_path: Path) -> None:
    result = run_ledger(*COMMANDS[name], "--no-such-option", env={"LEDGER_DATA_DIR": str(tmp_path)})
    line = first_error_line(result, EXIT_USAGE)
    assert "--no-such-option" in line


@pytest.mark.parametrize("args", [["runz"], ["token", "crate"], ["db", "upgrde"]], ids=" ".join)
def test_an_unknown_command_is_an_error_line_and_exit_2(args: list[str], tmp_path: Path) -> None:
    result = run_ledger(*args, env={"LEDGER_DATA_DIR": str(tmp_path)})
    line = first_error_line(result, EXIT_USAGE)
    assert repr(args[-1]) in line and "Did you mean" in line


@pytest.mark.parametrize("name", OVER_HTTP)
def test_an_unreachable_ledger_is_an_error_line_from_the_first(name: str, tmp_path: Path) -> None:
    # A short deadline: the first failure is printed at once, then the command gives up.
    url = f"http://127.0.0.1:{free_port()}"
    result = run_ledger(
        *COMMANDS[name], "--deadline", "0.5", env=env_for(tmp_path, url, "t"), input=REPORT_INPUT
    )
    line = first_error_line(result, EXIT_UPLOAD_FAILED if name == "report" else EXIT_LEDGER)
    assert url in line
    assert all(said.startswith("Error: ") for said in result.stderr.strip().splitlines()), result.stderr


@pytest.mark.parametrize("name", OVER_HTTP)
def test_a_malformed_ledger_url_is_an_error_line_and_exit_6(name: str, tmp_path: Path) -> None:
    result = run_ledger(*COMMANDS[name], env=env_for(tmp_path, "127.0.0.1:8787", "t"), input="")
    line = first_error_line(result, EXIT_CONFIG)
    assert "LEDGER_URL" in line


@pytest.mark.parametrize("name", OVER_HTTP)
def test_a_refused_token_is_an_error_line_and_exit_10(name: str, server: Server, tmp_path: Path) -> None:
    args = ["report", "--run-id", new_id("refused")] if name == "report" else COMMANDS[name]
    result = run_ledger(*args, env=env_for(tmp_path, server.base_url, "not-a-token"), input=REPORT_INPUT)
    line = first_error_line(result, EXIT_TOKEN)
    assert "refused the API token" in line and "LEDGER_TOKEN" in line


@pytest.mark.parametrize("args", [["run"], ["events"], ["cancel"]], ids=" ".join)
def test_a_run_the_ledger_does_not_know_is_an_error_line_and_exit_1(
    args: list[str], server: Server, tmp_path: Path
) -> None:
    run_id = new_id("unknown")
    result = run_ledger(*args, run_id, env=env_for(tmp_path, server.base_url, server.token))
    line = first_error_line(result, EXIT_FAILED)
    assert run_id in line


def test_reporting_a_run_that_ended_is_an_error_line_and_exit_4(server: Server, tmp_path: Path) -> None:
    run_id = new_id("ended")
    env = env_for(tmp_path, server.base_url, server.token)
    assert run_ledger("report", "--run-id", run_id, env=env, input=REPORT_INPUT).returncode == 0
    again = run_ledger("report", "--run-id", run_id, env=env, input=REPORT_INPUT)
    line = first_error_line(again, 4)
    assert line == f"Error: run {run_id} had already ended as completed"


def test_a_report_without_a_result_line_is_an_error_line_and_exit_1(server: Server, tmp_path: Path) -> None:
    run_id = new_id("no-result")
    env = env_for(tmp_path, server.base_url, server.token)
    result = run_ledger("report", "--run-id", run_id, env=env, input='{"type": "log", "line": "hi"}\n')
    line = first_error_line(result, 1)
    assert line == f"Error: no result line: run {run_id} was reported failed"
    # The summary that follows is a notice, not an error.
    assert result.stderr.strip().splitlines()[1].startswith(f"ledger report: run {run_id} failed: ")


@pytest.mark.parametrize("name", sorted(ON_THE_DATABASE))
def test_an_unreachable_database_is_an_error_line_and_exit_8(name: str, tmp_path: Path) -> None:
    url = f"postgresql://ledger@127.0.0.1:{free_port()}/ledger"
    env = {"LEDGER_DATABASE_URL": url, "LEDGER_DATA_DIR": str(tmp_path)}
    line = first_error_line(run_ledger(*ON_THE_DATABASE[name], env=env), EXIT_DATABASE)
    assert "LEDGER_DATABASE_URL" in line
