"""The documentation test's own parts: reading blocks and markers, and running a page's script."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from tests.docs.blocks import MarkdownError, blocks, command, console_commands
from tests.docs.test_docs import failing_block, page_script, run_page


def page(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(textwrap.dedent(text))
    return path


def test_blocks_in_order_with_their_markers(tmp_path: Path) -> None:
    path = page(
        tmp_path,
        """\
        # Title
        ```sh
        echo one
        ```
        <!-- not run: another machine -->
        ```bash
        ssh db.example
        ```
        ````python
        print("```")
        ````
        ```json
        {}
        ```
        """,
    )
    found = blocks(path)
    assert [(b.line, b.language, b.runs) for b in found] == [
        (2, "sh", True),
        (6, "bash", False),
        (9, "python", True),
        (12, "json", False),
    ]
    assert found[1].not_run == "another machine"
    assert found[2].text == 'print("```")\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<!-- not run: why -->\n\n```sh\nls\n```\n", "right before a fence"),
        ("<!-- not run:  -->\n```sh\nls\n```\n", "must say why"),
        ("```sh\nls\n", "never closed"),
    ],
)
def test_pages_the_test_cannot_read(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(MarkdownError, match=message):
        blocks(page(tmp_path, text))


def test_console_blocks_run_their_prompt_lines() -> None:
    text = "$ ledger runs \\\n    --limit 5\noutput line\n$ echo done\ndone\n"
    assert console_commands(text) == "ledger runs \\\n    --limit 5\necho done\n"


def test_the_two_commands_are_found_by_their_markers(tmp_path: Path) -> None:
    path = page(
        tmp_path,
        """\
        <!-- not run: the install command; CI runs it -->
        ```sh
        pip install .
        ```
        <!-- not run: the test command; CI runs it -->
        ```sh
        pytest
        ```
        """,
    )
    assert command(path, "install") == "pip install .\n"
    assert command(path, "test") == "pytest\n"


def test_a_failing_block_is_named_and_what_it_left_running_ends(tmp_path: Path) -> None:
    path = page(
        tmp_path,
        """\
        ```sh
        sleep 600 &
        echo $! > sleeper.pid
        X=carried
        ```
        ```sh
        test "$X" = carried
        false
        echo never
        ```
        """,
    )
    script = page_script([b for b in blocks(path) if b.runs], tmp_path)
    code, output = run_page(script, {"PATH": "/usr/bin:/bin"}, tmp_path, tmp_path / "log")
    assert code == 1
    assert failing_block(output).endswith("page.md:6 (sh)")
    assert "never" not in output
    sleeper = int((tmp_path / "sleeper.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(sleeper, 0)
