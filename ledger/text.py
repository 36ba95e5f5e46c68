"""Text shown to people: an error's words on the one line a log, a table cell or a status line has.

An error's text may span lines (libpq adds a hint on a second line, click wraps its usage
messages, a Docker engine ends its answer with a newline); where one line is shown, every run of
whitespace, line breaks included, becomes one space. Written once here, so every face of the
ledger shows the same error the same way.
"""

from __future__ import annotations

__all__ = [
    "one_line",
]


def one_line(text: object) -> str:
    """`str(text)` (an exception's message, or any text) on one line: each run of whitespace,
    line breaks included, becomes one space, and none leads or trails. Empty when the text is only
    whitespace (a caller shows something else then, such as the error's type)."""
    return " ".join(str(text).split())
