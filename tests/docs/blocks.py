"""The code blocks of the project's Markdown pages, as the documentation test runs them.

A fenced block whose language is one of `RUN_LANGUAGES` is run, in the order of its page, unless the
line right before its fence is an HTML comment ``<!-- not run: REASON -->`` (a block that only
illustrates: another machine's address, a command that never ends, one CI runs elsewhere). Blocks
in other languages (json, text, …) are never run.

Standard library only: `.ci/run` reads the README's two commands with it in a fresh clone before
anything is installed (`python3 -m tests.docs.blocks command README.md install`).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_LANGUAGES = frozenset({"sh", "bash", "console", "python", "sql"})
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<reason>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")
# The two commands a new user types, found by how their markers begin.
COMMANDS = {"install": "the install command", "test": "the test command"}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # the opening fence's line, from 1
    language: str
    text: str
    not_run: str | None  # the marker's reason; None when the block runs

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.language in RUN_LANGUAGES and self.not_run is None


class MarkdownError(ValueError):
    """A page the test cannot read as it is meant: an unclosed fence, a marker without a block."""


def pages() -> list[Path]:
    """README.md, then every page of docs/ by name: a page added there is run without a change here."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """Every fenced block of `path` in order, with the not-run marker before it, if any."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        marker = NOT_RUN.match(lines[index].strip())
        if marker is not None:
            if not marker["reason"]:
                raise MarkdownError(f"{path}:{index + 1}: a not-run marker must say why")
            following = FENCE.match(lines[index + 1]) if index + 1 < len(lines) else None
            if following is None:
                raise MarkdownError(f"{path}:{index + 1}: a not-run marker must be right before a fence")
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence = opening["fence"]
        body: list[str] = []
        end = index + 1
        while end < len(lines) and not (
            lines[end].startswith(fence) and lines[end].strip(fence[0]).strip() == ""
        ):
            body.append(lines[end])
            end += 1
        if end == len(lines):
            raise MarkdownError(f"{path}:{index + 1}: the fence is never closed")
        before = NOT_RUN.match(lines[index - 1].strip()) if index > 0 else None
        found.append(
            Block(
                path=path,
                line=index + 1,
                language=opening["lang"].lower(),
                text="\n".join(body) + "\n",
                not_run=before["reason"] if before is not None else None,
            )
        )
        index = end + 1
    return found


def console_commands(text: str) -> str:
    """The commands of a console block: its ``$ `` lines and their ``\\`` continuations."""
    commands: list[str] = []
    continued = False
    for line in text.splitlines():
        if continued or line.startswith("$ "):
            commands.append(line if continued else line[2:])
            continued = line.endswith("\\")
    return "\n".join(commands) + "\n"


def command(path: Path, name: str) -> str:
    """The block whose not-run marker begins with the command's name (`COMMANDS`)."""
    wanted = COMMANDS[name]
    matching = [b for b in blocks(path) if b.not_run is not None and b.not_run.startswith(wanted)]
    if len(matching) != 1:
        raise MarkdownError(f"{path}: {len(matching)} blocks are marked '{wanted}'; there must be one")
    return matching[0].text


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] != "command" or argv[3] not in COMMANDS:
        print(f"usage: python3 -m tests.docs.blocks command PAGE {{{','.join(COMMANDS)}}}", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(command(Path(argv[2]), argv[3]))
    except (OSError, MarkdownError) as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
