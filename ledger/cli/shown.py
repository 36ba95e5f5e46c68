"""`shown`: text from a runner or the ledger's data, made safe to print on a person's terminal.

A runner's text is whatever its tools wrote: a log line may hold an escape sequence that retitles,
clears or recolours the operator's terminal, a step's name may look like rich markup (``[/bold]n``,
which rich would refuse with a traceback). Every `ledger` command prints such text through `shown`,
at the place it prints it, never in the data: a machine-readable output (``--json``) stays exact.
"""

from __future__ import annotations

import re

__all__ = [
    "shown",
]

# An escape sequence: CSI (`ESC [` parameters, intermediates, a final byte), a string command
# (OSC, DCS, SOS, PM, APC: up to BEL or the string terminator, or the end), or ESC and one character.
# Each alternative moves through disjoint character classes, so a search stays linear.
_ESCAPE_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"  # a string command
    r"|\x1b[\s\S]?"  # any other
)
# C0 and C1 control characters and DEL, but tab and newline (kept or made spaces by `shown`).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_LINE_BREAKS = re.compile(r"[\t\n]")


def shown(value: object, *, markup: bool = True, multiline: bool = False) -> str:
    """`value` as text that is safe to print on a terminal: escape sequences and control
    characters removed (tab and newline kept when `multiline`, else each made a space), and
    escaped for rich's markup when `markup` (for strings rich reads markup in: table cells,
    `Console.print`); `markup=False` for plain output (`click.echo`) and `Text` objects."""
    text = value if isinstance(value, str) else str(value)
    if not text.isprintable():  # the usual text, printable, skips both substitutions
        text = _CONTROL.sub("", _ESCAPE_SEQUENCE.sub("", text))
        if not multiline:
            text = _LINE_BREAKS.sub(" ", text)
    return _escape_markup(text) if markup else text


def _escape_markup(text: str) -> str:
    # Imported on first use: the commands that print only plain lines need no rich at all.
    from rich.markup import escape

    return escape(text)
