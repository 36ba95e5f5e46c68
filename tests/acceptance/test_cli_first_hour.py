"""The client commands a person reaches for in the first hour: `ledger runs` filtered by status,
play and time, and `ledger events --follow` started before the run exists (a watcher beside the
worker that creates it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from ledger.cli.exits import EXIT_FAILED
from tests.acceptance.conftest import ROOT, Server, new_id
from tests.acceptance.test_cli import client_env, ledger


def test_runs_filters_by_status_play_and_time(server: Server, client: httpx.Client, tmp_path: Path) -> None:
    tag = new_id("play")
    failed, running, other_play = new_id("f"), new_id("r"), new_id("o")
    for run_id, play in ((failed, tag), (running, tag), (other_play, f"{tag}-other")):
        client.post("/v1/runs", json={"run_id": run_id, "play_name": play}).raise_for_status()
    client.put(f"/v1/runs/{failed}/terminal", json={"status": "failed", "error": "boom"}).raise_for_status()
    env = client_env(server, tmp_path)

    def listed(*args: str) -> str:
        done = ledger("runs", "--limit", "1000", *args, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    by_play = listed("--play", tag)
    assert failed in by_play and running in by_play and other_play not in by_play
    by_status = listed("--play", tag, "--status", "failed")
    assert failed in by_status and running not in by_status
    recent = listed("--since", "10m", "--play", f"{tag}-other")
    assert other_play in recent and failed not in recent
    assert listed("--play", tag, "--since", "2999-01-01T00:00:00Z").strip() == "no runs yet that match"
    bad = ledger("runs", "--since", "yesterday", env=env)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "Error: Invalid value for '--since': 'yesterday' is neither a duration (90s, 30m, 24h, 7d) "
        "nor an ISO time (2026-12-03T09:00) (`ledger runs --help` says more)"
    ]


def test_a_full_filtered_page_prints_the_next_command_with_its_filters(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    tag = new_id("paged")
    runs = [new_id("p") for _ in range(3)]
    for run_id in runs:
        client.post("/v1/runs", json={"run_id": run_id, "play_name": tag}).raise_for_status()
    first = ledger("runs", "--limit", "2", "--play", tag, env=client_env(server, tmp_path))
    more = first.stdout.strip().splitlines()[-1]
    assert more.startswith(f"more: ledger runs --limit 2 --play {tag} --before ")
    # The printed command, run as printed, gives the rest of the filtered list.
    second = ledger(*more.removeprefix("more: ledger ").split(), env=client_env(server, tmp_path))
    listed = first.stdout + second.stdout
    assert all(run_id in listed for run_id in runs)
    assert sum(run_id in second.stdout for run_id in runs) == 1


def test_follow_waits_for_a_run_not_yet_created(server: Server, client: httpx.Client, tmp_path: Path) -> None:
    run_id = new_id("late")
    watcher = subprocess.Popen(
        [sys.executable, "-m", "ledger.cli", "events", run_id, "--follow", "--wait", "100"],
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", **client_env(server, tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watcher.stderr is not None
        # The run is created only once the watcher says it waits: it was there first.
        assert "waiting up to 100 s for run" in watcher.stderr.readline()
        client.post("/v1/runs", json={"run_id": run_id}).raise_for_status()
        client.post(f"/v1/runs/{run_id}/events", json={"events": [{"type": "log", "line": "hello"}]})
        client.put(f"/v1/runs/{run_id}/terminal", json={"status": "completed"}).raise_for_status()
        out, err = watcher.communicate(timeout=60)
    finally:
        watcher.kill()
    assert watcher.returncode == 0, err
    assert "hello" in out and "terminal" in out


def test_follow_without_a_wait_and_a_wait_that_runs_out_are_404(server: Server, tmp_path: Path) -> None:
    at_once = ledger("events", new_id("none"), "--follow", "--wait", "0", env=client_env(server, tmp_path))
    assert at_once.returncode == EXIT_FAILED
    assert len(at_once.stderr.strip().splitlines()) == 1 and "waiting" not in at_once.stderr
    waited = ledger("events", new_id("none"), "--follow", "--wait", "0.6", env=client_env(server, tmp_path))
    assert waited.returncode == EXIT_FAILED
    said = waited.stderr.strip().splitlines()
    assert len(said) == 2 and said[0].startswith("waiting up to 0.6 s") and said[1].startswith("Error: ")
    plain = ledger("events", new_id("none"), env=client_env(server, tmp_path))
    assert plain.returncode == EXIT_FAILED and "waiting" not in plain.stderr


def test_pool_json_is_the_apis_counts_and_entries(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    pool = new_id("pool")
    client.post(f"/v1/pools/{pool}/entries", json={"version": "v9", "ids": ["warm-a"]}).raise_for_status()
    client.post(f"/v1/pools/{pool}/entries", json={"version": "v9", "ids": ["ready-b"], "ready": True})
    done = ledger("pool", "v9", "--pool", pool, "--json", env=client_env(server, tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    shown = json.loads(lines[0])
    counts = client.get(f"/v1/pools/{pool}/counts", params={"version": "v9"}).json()
    entries = client.get(f"/v1/pools/{pool}/entries", params={"version": "v9"}).json()["entries"]
    assert shown == {"pool": pool, "version": "v9", "counts": counts, "entries": entries}
    assert {e["id"] for e in shown["entries"]} == {"warm-a", "ready-b"}


def test_piped_tables_are_never_cut_or_wrapped(server: Server, client: httpx.Client, tmp_path: Path) -> None:
    # A long run id, piped with no COLUMNS: each run stays one whole line.
    run_id = new_id("a-rather-long-run-identifier-that-would-not-fit-eighty-columns")
    play = "a-play-whose-name-is-long-enough-to-push-the-table-past-eighty-columns"
    client.post("/v1/runs", json={"run_id": run_id, "play_name": play}).raise_for_status()
    env = {k: v for k, v in {**os.environ, **client_env(server, tmp_path)}.items() if k != "COLUMNS"}
    done = subprocess.run(
        [sys.executable, "-m", "ledger.cli", "runs", "--play", play],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if run_id in line]
    assert len(rows) == 1 and "running" in rows[0], done.stdout
    assert "…" not in done.stdout
    assert all(len(line) < 1_000 for line in done.stdout.splitlines())  # as wide as the rows, no wider
