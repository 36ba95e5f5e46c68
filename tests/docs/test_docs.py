"""Every shell, console, Python and SQL block of README.md and docs/*.md runs, in page order, against
a real `ledger serve` the test starts for the page.

Each page is one test, with what a reader starting on that page has: a fresh `HOME` and working
directory, a temporary `LEDGER_DATA_DIR` holding the service's generated admin token, `LEDGER_URL`
pointing at the service, `LEDGER_DATABASE_URL` at its database, and the project's `ledger` and
`python` first on the PATH. Nothing else is defined: a variable a block uses must be set by an
earlier block of the same page, where the text defines it.

A page's blocks run as one bash script (`set -eo pipefail`), so variables and the working
directory carry from block to block as in one terminal; Python blocks run as files with `python`,
SQL blocks through `ledger psql -f`, console blocks as their ``$ `` lines. The first failing
command fails the page, naming its block. A block marked ``<!-- not run: REASON -->`` is skipped
(`tests/docs/blocks.py`).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger import testing
from ledger.testing import Server
from tests.docs.blocks import ROOT, Block, blocks, console_commands, pages

# Generous for a page (the slowest runs a few reporters and a long-poll); only a hang reaches it.
PAGE_TIMEOUT_S = 90
STARTED = "### docs block"


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.fixture
def page_service(clean_database_url: str, tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    # LEDGER_API_TOKENS empty: the service generates its admin token in the data dir, as on a
    # first start, and the page's client commands find it there.
    server = testing.start_server(
        clean_database_url,
        tmp_path / "service",
        LEDGER_API_TOKENS="",
        HOME=str(tmp_path / "home"),
    )
    try:
        yield server, tmp_path / "service" / "data"
    finally:
        testing.stop_server(server)


def reader_environment(server: Server, data_dir: Path, database_url: str, home: Path) -> dict[str, str]:
    # None of the caller's ledger settings leak in: the page defines what it uses.
    env = {name: value for name, value in os.environ.items() if not name.startswith("LEDGER_")}
    env.update(
        HOME=str(home),
        LEDGER_DATA_DIR=str(data_dir),
        LEDGER_URL=server.url,
        LEDGER_DATABASE_URL=database_url,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def page_script(runnable: list[Block], scratch: Path) -> str:
    """One bash script running `runnable` in order, announcing each block before it starts."""
    lines = ["set -eo pipefail"]
    for number, block in enumerate(runnable):
        lines.append(f"printf '\\n%s\\n' {shlex.quote(f'{STARTED} {block.where} ({block.language})')} >&2")
        if block.language in ("sh", "bash"):
            lines.append(block.text)
        elif block.language == "console":
            lines.append(console_commands(block.text))
        else:
            source = scratch / f"block-{number}.{'py' if block.language == 'python' else 'sql'}"
            source.write_text(block.text, encoding="utf-8")
            run = "python" if block.language == "python" else "ledger psql -q -f"
            lines.append(f"{run} {shlex.quote(str(source))}")
    return "\n".join(lines) + "\n"


def run_page(script: str, env: dict[str, str], cwd: Path, log: Path) -> tuple[int | None, str]:
    """Run the script in a session of its own; whatever it left running is ended with it.
    The exit code (None when it outlived the timeout) and its output."""
    with log.open("wb") as out:
        # Output to a file, not a pipe: a background process a block started would hold a pipe open.
        process = subprocess.Popen(
            ["bash", "-c", script],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code: int | None = process.wait(PAGE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            end_session(process)
    return code, log.read_text(encoding="utf-8", errors="replace")


def end_session(process: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
    process.wait()


def failing_block(output: str) -> str:
    started = [line for line in output.splitlines() if line.startswith(STARTED)]
    return started[-1][len(STARTED) :].strip() if started else "before the first block"


# Above the project's per-test default: the service's start comes before the page's own time.
@pytest.mark.timeout(PAGE_TIMEOUT_S + 60)
@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_page_blocks_run(page: Path, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    runnable = [block for block in blocks(page) if block.runs]
    if not runnable:
        return
    server, data_dir = request.getfixturevalue("page_service")
    database_url = request.getfixturevalue("clean_database_url")
    home, cwd, scratch = tmp_path / "home", tmp_path / "work", tmp_path / "blocks"
    for folder in (home, cwd, scratch):
        folder.mkdir(exist_ok=True)
    env = reader_environment(server, data_dir, database_url, home)
    started = time.monotonic()
    code, output = run_page(page_script(runnable, scratch), env, cwd, tmp_path / "page.log")
    print(f"{page_id(page)}: {len(runnable)} blocks in {time.monotonic() - started:.1f} s")
    tail = "\n".join(output.splitlines()[-40:])
    assert code is not None, f"{failing_block(output)} did not end within {PAGE_TIMEOUT_S} s:\n{tail}"
    assert code == 0, f"{failing_block(output)} failed (exit {code}):\n{tail}"


def test_every_page_reads() -> None:
    """Fences close and every not-run marker says why and stands right before a block (`blocks`
    raises otherwise); the README's two commands are each marked once, for `.ci/run` to find."""
    read = {page_id(page): blocks(page) for page in pages()}
    assert "README.md" in read
    for name in ("the install command", "the test command"):
        marked = [b for b in read["README.md"] if b.not_run is not None and b.not_run.startswith(name)]
        assert len(marked) == 1, f"README.md must mark one block '{name}'"
