"""The registry-less test image's recipe: which mirror it takes from apt, and what its entrypoint
does with the official image's variables (run here with stand-ins for initdb and postgres that
record their arguments; the docker run in CI starts the real thing)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ledger.testing_image import ENTRYPOINT, debian_mirror

INDEXTARGETS = """\
http://deb.debian.org/debian-security/ Debian-Security bookworm-security
http://mirror.example/debian/ Debian bookworm-updates
http://mirror.example/debian/ Debian bookworm
https://deb.nodesource.com/node_20.x/ Node nodistro
"""


def test_the_mirror_is_the_debian_archive_apt_uses_for_the_suite() -> None:
    assert debian_mirror(INDEXTARGETS) == "http://mirror.example/debian/"


def test_another_suites_archive_serves_when_apt_has_none_for_this_one() -> None:
    listing = "http://deb.debian.org/debian-security/ Debian-Security trixie-security\n"
    listing += "http://other.example/debian/ Debian trixie\n"
    assert debian_mirror(listing) == "http://other.example/debian/"


@pytest.mark.parametrize("listing", ["", "http://deb.debian.org/debian-security/ Debian-Security bookworm\n"])
def test_no_debian_archive_is_none(listing: str) -> None:
    assert debian_mirror(listing) is None


# Stand-ins: initdb makes the data directory and keeps its arguments and the password file's text;
# postgres keeps its arguments and, in single-user mode, what it was fed.
FAKE_INITDB = """#!/bin/sh
while [ $# -gt 0 ]; do
    case "$1" in
        -D) data="$2"; shift ;;
        --pwfile=*) cp "${1#--pwfile=}" "$LOG/password" ;;
    esac
    echo "$1" >>"$LOG/initdb"; shift
done
mkdir -p "$data"; echo 15 >"$data/PG_VERSION"; : >"$data/pg_hba.conf"; : >"$data/postgresql.conf"
"""
FAKE_POSTGRES = """#!/bin/sh
if [ "$1" = --single ]; then cat >>"$LOG/single"; exit 0; fi
printf '%s\\n' "$@" >"$LOG/postgres"
"""


def _entrypoint(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir(exist_ok=True)
    log.mkdir(exist_ok=True)
    for name, text in (("initdb", FAKE_INITDB), ("postgres", FAKE_POSTGRES), ("entrypoint", ENTRYPOINT)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    base = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(log), "PGDATA": str(tmp_path / "data")}
    return subprocess.run(
        [str(bin_dir / "entrypoint"), *args], env={**base, **env}, capture_output=True, text=True, timeout=30
    )


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_first_start_makes_a_utf8_cluster_asking_for_the_password_over_tcp(tmp_path: Path) -> None:
    env = {"POSTGRES_USER": "test", "POSTGRES_PASSWORD": "s3 cret'", "POSTGRES_DB": 'my"db'}
    result = _entrypoint(tmp_path, "postgres", "-c", "fsync=off", **env)
    assert result.returncode == 0, result.stderr
    log, data = tmp_path / "log", tmp_path / "data"
    initdb = _lines(log / "initdb")
    assert {"--username=test", "--encoding=UTF8", "--auth-host=scram-sha-256", "--auth-local=trust"} <= set(
        initdb
    )
    assert _lines(log / "password") == ["s3 cret'"]
    assert _lines(data / "pg_hba.conf") == ["host all all all scram-sha-256"]
    assert "listen_addresses = '*'" in _lines(data / "postgresql.conf")
    assert _lines(log / "single") == ['CREATE DATABASE "my""db"']
    assert _lines(log / "postgres") == ["-D", str(data), "-c", "fsync=off"]


def test_a_second_start_keeps_the_cluster(tmp_path: Path) -> None:
    env = {"POSTGRES_USER": "test", "POSTGRES_PASSWORD": "pw"}
    assert _entrypoint(tmp_path, **env).returncode == 0
    (tmp_path / "log" / "initdb").unlink()
    result = _entrypoint(tmp_path, "-c", "fsync=off", **env)  # flags alone are the server's
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "log" / "initdb").exists()
    assert _lines(tmp_path / "log" / "postgres") == ["-D", str(tmp_path / "data"), "-c", "fsync=off"]


def test_the_database_named_like_the_user_by_default_and_postgres_is_not_created(tmp_path: Path) -> None:
    assert _entrypoint(tmp_path, POSTGRES_PASSWORD="pw", POSTGRES_USER="ci").returncode == 0
    assert _lines(tmp_path / "log" / "single") == ['CREATE DATABASE "ci"']
    other = tmp_path / "other"
    other.mkdir()
    assert _entrypoint(other, POSTGRES_PASSWORD="pw").returncode == 0
    assert "--username=postgres" in _lines(other / "log" / "initdb")
    assert not (other / "log" / "single").exists()


def test_without_a_password_nothing_is_made(tmp_path: Path) -> None:
    result = _entrypoint(tmp_path, "postgres", POSTGRES_USER="test")
    assert result.returncode != 0
    assert "POSTGRES_PASSWORD must be set" in result.stderr
    assert not (tmp_path / "data").exists()
    assert not (tmp_path / "log" / "postgres").exists()


def test_another_command_runs_as_given(tmp_path: Path) -> None:
    result = _entrypoint(tmp_path, "echo", "hello")
    assert (result.returncode, result.stdout) == (0, "hello\n")
    assert not (tmp_path / "data").exists()
