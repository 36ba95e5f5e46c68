"""Build the tests' Postgres image from Debian's own packages, for a Docker engine that can pull nothing.

    sudo .venv/bin/python -m ledger.testing_image        # prints the image's tag
    LEDGER_TEST_BACKEND=docker LEDGER_TEST_IMAGE=ledger-test-postgres:15 \\
        TESTCONTAINERS_RYUK_DISABLED=true pytest -n 2

A Debian bookworm root filesystem with PostgreSQL 15 (`debootstrap --variant=minbase`, from the
Debian mirror this machine's apt already uses, or `--mirror`), imported with `docker import`, with
an entrypoint that does what testcontainers asks of the official image: `POSTGRES_USER`,
`POSTGRES_PASSWORD` and `POSTGRES_DB` at first start, a UTF-8 cluster (an SQL_ASCII one hands
psycopg bytes), password authentication over TCP, `psql` on the PATH (its readiness check) and the
server's own flags as the command (`postgres -c fsync=off …`).

Built once: when the engine has the tag and it was built from this recipe (the image's environment
carries the recipe's digest), nothing is done. Needs root (debootstrap), the `debootstrap` package
and a Docker engine; takes about a minute and 300 MB of the engine's disk.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from ledger.text import one_line

__all__ = [
    "DEFAULT_TAG",
    "ENTRYPOINT",
    "BuildError",
    "build_image",
    "debian_mirror",
    "main",
]

DEFAULT_TAG = "ledger-test-postgres:15"
_SUITE = "bookworm"
_PG_MAJOR = "15"
_PACKAGES = (f"postgresql-{_PG_MAJOR}",)
_PG_BIN = f"/usr/lib/postgresql/{_PG_MAJOR}/bin"
_RECIPE_VAR = "LEDGER_TEST_IMAGE_RECIPE"

# Runs as the `postgres` user (the image's USER), so no privilege switching is needed. It follows
# the official image: a command starting with `-` or `postgres` is the server's; anything else runs
# as given. Local connections are trusted, TCP ones need the password (scram-sha-256), and the
# database is created in single-user mode, so the server's "ready" line appears only once.
ENTRYPOINT = r"""#!/bin/sh
set -eu
case "${1:-postgres}" in -*) set -- postgres "$@" ;; esac
[ "$#" -gt 0 ] || set -- postgres
if [ "$1" != postgres ]; then exec "$@"; fi
shift
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set (the server asks for it over TCP)}"
    user="${POSTGRES_USER:-postgres}"
    db="${POSTGRES_DB:-$user}"
    pwfile="$(mktemp)"
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    initdb -D "$PGDATA" --username="$user" --pwfile="$pwfile" --encoding=UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    printf "listen_addresses = '*'\njit = off\n" >>"$PGDATA/postgresql.conf"
    if [ "$db" != postgres ]; then
        ident=$(printf '%s' "$db" | sed 's/"/""/g')
        echo "CREATE DATABASE \"$ident\"" | postgres --single -D "$PGDATA" postgres >/dev/null
    fi
fi
exec postgres -D "$PGDATA" "$@"
"""

# `docker import` takes these Dockerfile instructions; the recipe's digest is added to them.
_CHANGES = (
    f"ENV PATH={_PG_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV PGDATA=/var/lib/postgresql/data",
    "ENV LANG=C.UTF-8",
    "USER postgres",
    "WORKDIR /var/lib/postgresql",
    'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]',
    'CMD ["postgres"]',
    "EXPOSE 5432",
)

# Nothing a test server reads: documentation, translations, apt's lists, the cluster the package
# creates for itself (the entrypoint makes its own), and the JIT's LLVM (the server runs without it
# when its provider is missing).
_TRIM = (
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/cache/apt",
    "var/lib/apt/lists",
    f"var/lib/postgresql/{_PG_MAJOR}",
    f"etc/postgresql/{_PG_MAJOR}",
    f"usr/lib/postgresql/{_PG_MAJOR}/lib/bitcode",
    f"usr/lib/postgresql/{_PG_MAJOR}/lib/llvmjit.so",
    f"usr/lib/postgresql/{_PG_MAJOR}/lib/llvmjit_types.bc",
)
_TRIM_GLOBS = ("usr/lib/*/libLLVM*",)


class BuildError(Exception):
    """The image cannot be built here; the message is one line for a person."""


def _recipe_digest() -> str:
    """What the image is built from; a change to it makes the next run build again."""
    digest = hashlib.sha256()
    for part in (_SUITE, *_PACKAGES, ENTRYPOINT, *_CHANGES, *_TRIM, *_TRIM_GLOBS):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def debian_mirror(indextargets: str, suite: str = _SUITE) -> str | None:
    """The Debian archive's URL in `apt-get indextargets` output (REPO_URI, LABEL, CODENAME per line),
    preferring one that serves `suite`; None when apt knows no Debian archive."""
    found: list[tuple[str, str]] = []
    for line in indextargets.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[1] == "Debian":
            found.append((fields[0], fields[2]))
    for uri, codename in found:
        if codename == suite:
            return uri
    return found[0][0] if found else None


def _apt_mirror() -> str:
    try:
        listing = subprocess.run(
            ["apt-get", "indextargets", "--format", "$(REPO_URI) $(LABEL) $(CODENAME)"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"cannot read apt's sources ({exc}): pass --mirror") from None
    mirror = debian_mirror(listing)
    if mirror is None:
        raise BuildError("apt lists no Debian archive (run apt-get update, or pass --mirror)")
    return mirror


def _docker(*args: str, stdin: IO[bytes] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], stdin=stdin, text=True, capture_output=True)


def _image_is_current(tag: str, digest: str) -> bool:
    found = _docker("image", "inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", tag)
    return found.returncode == 0 and f"{_RECIPE_VAR}={digest}" in found.stdout.splitlines()


def _trim(root: Path) -> None:
    for relative in _TRIM:
        path = root / relative
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    for pattern in _TRIM_GLOBS:
        for path in root.glob(pattern):
            path.unlink()


def _install_entrypoint(root: Path) -> None:
    entrypoint = root / "usr/local/bin/docker-entrypoint.sh"
    entrypoint.write_text(ENTRYPOINT, encoding="utf-8")
    entrypoint.chmod(0o755)
    uid, gid = _ids(root, "postgres")
    for directory in (root / "var/lib/postgresql/data", root / "var/run/postgresql"):
        directory.mkdir(parents=True, exist_ok=True)
        os.chown(directory, uid, gid)
    (root / "var/lib/postgresql/data").chmod(0o700)


def _ids(root: Path, user: str) -> tuple[int, int]:
    for line in (root / "etc/passwd").read_text(encoding="utf-8").splitlines():
        fields = line.split(":")
        if fields[0] == user:
            return int(fields[2]), int(fields[3])
    raise BuildError(f"the root filesystem has no {user} user")


def build_image(tag: str = DEFAULT_TAG, *, mirror: str | None = None, work_dir: Path | None = None) -> bool:
    """Build `tag` unless the engine has it from this recipe; True when it was built."""
    digest = _recipe_digest()
    if shutil.which("docker") is None:
        raise BuildError("no docker command (apt-get install docker.io)")
    if _docker("version", "--format", "{{.Server.Version}}").returncode != 0:
        raise BuildError("no Docker engine answers (start dockerd, or set DOCKER_HOST)")
    if _image_is_current(tag, digest):
        return False
    if shutil.which("debootstrap") is None:
        raise BuildError("no debootstrap (apt-get install debootstrap)")
    if os.geteuid() != 0:
        raise BuildError("debootstrap needs root: run this as root")
    mirror = mirror or _apt_mirror()
    with tempfile.TemporaryDirectory(prefix="ledger-test-image-", dir=work_dir) as tmp:
        root = Path(tmp) / "rootfs"
        bootstrap = subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(_PACKAGES)}",
                _SUITE,
                str(root),
                mirror,
            ],
            capture_output=True,
            text=True,
        )
        if bootstrap.returncode != 0:
            tail = " | ".join(bootstrap.stdout.strip().splitlines()[-3:])
            raise BuildError(f"debootstrap {_SUITE} from {mirror} failed: {tail}")
        _trim(root)
        _install_entrypoint(root)
        changes = [
            arg for change in (*_CHANGES, f"ENV {_RECIPE_VAR}={digest}") for arg in ("--change", change)
        ]
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        try:
            imported = _docker("import", *changes, "-", tag, stdin=tar.stdout)
        finally:
            assert tar.stdout is not None
            tar.stdout.close()
            tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise BuildError(f"docker import failed: {one_line(imported.stderr)}")
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ledger.testing_image",
        description="Build the tests' Postgres image from Debian packages (no image registry needed); "
        "prints its tag, for LEDGER_TEST_IMAGE.",
    )
    parser.add_argument("--tag", default=DEFAULT_TAG, help=f"the image's tag (default {DEFAULT_TAG})")
    parser.add_argument("--mirror", help="a Debian mirror URL (default: the one apt uses)")
    parser.add_argument("--work-dir", type=Path, help="where the root filesystem is made (default: TMPDIR)")
    args = parser.parse_args(argv)
    try:
        build_image(args.tag, mirror=args.mirror, work_dir=args.work_dir)
    except BuildError as exc:
        print(f"ledger.testing_image: {exc}", file=sys.stderr)
        return 1
    print(args.tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
