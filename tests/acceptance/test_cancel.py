"""`ledger cancel` and `POST /v1/runs/{run_id}/cancel`: a live run ends `cancelled` with its reason;
the run's own token may cancel it, a read token or another run's token may not; a run that ended
otherwise is left as it was, and the command says how it ended."""

from __future__ import annotations

from pathlib import Path

import httpx

from ledger.cli.exits import EXIT_FAILED, EXIT_TOKEN
from ledger.service.routes_runs import CANCELLED_BY_OPERATOR
from tests.acceptance.conftest import Server, new_id
from tests.acceptance.test_cli import client_env, ledger


def open_run(client: httpx.Client) -> str:
    run_id = new_id("cancel")
    client.post("/v1/runs", json={"run_id": run_id}).raise_for_status()
    return run_id


def mint(client: httpx.Client, **body: object) -> str:
    answer = client.post("/v1/tokens", json={"ttl_s": 600, **body})
    answer.raise_for_status()
    token = answer.json()["token"]
    assert isinstance(token, str)
    return token


def terminal(client: httpx.Client, run_id: str) -> dict[str, object] | None:
    answer = client.get(f"/v1/runs/{run_id}/terminal")
    answer.raise_for_status()
    state = answer.json()["state"]
    assert state is None or isinstance(state, dict)
    return state


def test_cancel_ends_a_live_run_with_the_reason(server: Server, client: httpx.Client, tmp_path: Path) -> None:
    run_id = open_run(client)
    done = ledger("cancel", run_id, "--reason", "wrong input file", env=client_env(server, tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"cancelled run {run_id}: wrong input file"
    state = terminal(client, run_id)
    assert state is not None and state["status"] == "cancelled" and state["error"] == "wrong input file"
    # Once: a second cancel (another reason) changes nothing and says the run is cancelled.
    again = ledger("cancel", run_id, "--reason", "other", env=client_env(server, tmp_path))
    assert again.returncode == 0, again.stderr
    assert terminal(client, run_id) == state
    events = client.get(f"/v1/runs/{run_id}/events").json()["events"]
    assert [e["type"] for e in events].count("terminal") == 1


def test_cancel_without_a_reason_says_an_operator_did(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = open_run(client)
    done = ledger("cancel", run_id, env=client_env(server, tmp_path))
    assert done.returncode == 0, done.stderr
    state = terminal(client, run_id)
    assert state is not None and state["error"] == CANCELLED_BY_OPERATOR


def test_the_runs_own_token_may_cancel_it_and_no_other(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id, other = open_run(client), open_run(client)
    own = mint(client, scope="run", run_id=run_id, max_attempt=1)
    foreign = mint(client, scope="run", run_id=other, max_attempt=1)
    reader = mint(client, scope="read")
    for token in (foreign, reader):
        refused = ledger("cancel", run_id, env=client_env(server, tmp_path, LEDGER_TOKEN=token))
        assert refused.returncode == EXIT_TOKEN, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        # A 403: the service names the token this request needs.
        assert f"a run token for run '{run_id}'" in refused.stderr and "or an admin token" in refused.stderr
    assert terminal(client, run_id) is None
    done = ledger(
        "cancel", run_id, "--reason", "worker gave up", env=client_env(server, tmp_path, LEDGER_TOKEN=own)
    )
    assert done.returncode == 0, done.stderr
    state = terminal(client, run_id)
    assert state is not None and state["status"] == "cancelled" and state["error"] == "worker gave up"


def test_a_run_that_ended_otherwise_is_left_as_it_was(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    run_id = open_run(client)
    client.put(
        f"/v1/runs/{run_id}/terminal", json={"status": "failed", "error": "disk full"}
    ).raise_for_status()
    before = terminal(client, run_id)
    refused = ledger("cancel", run_id, env=client_env(server, tmp_path))
    assert refused.returncode == EXIT_FAILED
    lines = refused.stderr.strip().splitlines()
    assert lines == [f"Error: run '{run_id}' already ended failed: disk full; nothing was changed"]
    assert terminal(client, run_id) == before
    answer = client.post(f"/v1/runs/{run_id}/cancel", json={})
    assert answer.status_code == 409 and answer.json()["code"] == "terminal"


def test_cancelling_an_unknown_run_is_404_and_one_line(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    answer = client.post(f"/v1/runs/{new_id('nope')}/cancel", json={"reason": "x"})
    assert answer.status_code == 404 and answer.json()["code"] == "not_found"
    missing = ledger("cancel", new_id("nope"), env=client_env(server, tmp_path))
    assert missing.returncode == EXIT_FAILED
    assert len(missing.stderr.strip().splitlines()) == 1
