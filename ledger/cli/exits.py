"""The exit codes of every `ledger` command, and the error that carries one.

A mistake a person can act on is one line on stderr (`Error: ...`) and one of these codes, never a
traceback; docs/errors.md lists them. 3, 4, 5, 11 and 12 are `ledger report`'s own (see its module).
"""

from __future__ import annotations

from typing import Final

import click

from ledger.cli.shown import shown
from ledger.text import one_line

__all__ = [
    "EXIT_ADDRESS",
    "EXIT_BLOCKED",
    "EXIT_CONFIG",
    "EXIT_DATABASE",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_LEDGER",
    "EXIT_NEEDS_RESUME",
    "EXIT_REPORT_INTERRUPTED",
    "EXIT_TOKEN",
    "EXIT_USAGE",
    "CliError",
    "first_line",
    "token_refused",
    "usage_line",
]

_EXIT_OK: Final = 0
# The ledger refused the request (an unknown run, a bad value) or the operation failed (no schema).
EXIT_FAILED: Final = 1
# Click's own: a bad option or argument (and a file given in one that cannot be read).
EXIT_USAGE: Final = 2
# An environment variable is unusable (a malformed LEDGER_DATABASE_URL), or no API token is found.
EXIT_CONFIG: Final = 6
# `ledger serve` cannot listen on its address (in use, or not this machine's).
EXIT_ADDRESS: Final = 7
# Postgres (LEDGER_DATABASE_URL, or the embedded one) cannot be reached.
EXIT_DATABASE: Final = 8
# The ledger service (LEDGER_URL) could not be reached before the deadline.
EXIT_LEDGER: Final = 9
# The ledger service refused the API token (unknown, expired, or not allowed this request).
EXIT_TOKEN: Final = 10
# `ledger report` was interrupted (SIGINT or SIGTERM): it landed what it could and said how to go on.
EXIT_REPORT_INTERRUPTED: Final = 11
# `ledger report` found its run interrupted, waiting for a reporter that resumes it (`--resume`).
EXIT_NEEDS_RESUME: Final = 12
# A maintenance step gave up waiting for another session (an open reader held a partition's
# detach, a conversion holds the event log): the line names it; nothing is lost, run it again.
EXIT_BLOCKED: Final = 13
# The shell's convention for a command ended by Ctrl-C (`ledger report`: by a second signal).
EXIT_INTERRUPTED: Final = 130


class CliError(click.ClickException):
    """One line on stderr and `exit_code`."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        # The message may quote the ledger's data or a runner's text: printed as `shown` says.
        super().__init__(one_line(shown(message, markup=False)))
        # click declares it a class variable; each error here has its own.
        self.exit_code = exit_code  # type: ignore[misc]


def first_line(exc: BaseException) -> str:
    """The first line of the error's text (libpq's answers add a hint on a second line)."""
    return one_line((str(exc).strip().splitlines() or [type(exc).__name__])[0])


def usage_line(message: str) -> str:
    """A usage mistake's message on one line (click's may span several)."""
    return one_line(message)


def token_refused(said: str, status: int | None, *, url: str | None, needs: str, command: str) -> str:
    """The line for a token the ledger (at `url`, when known) refused: what it said (`said`, its
    answer's text), and which token would do. A 403's answer names that itself; otherwise `command`
    needs `needs`."""
    from ledger.auth import API_TOKENS_VAR, CLIENT_TOKEN_VAR

    if status == 403:
        advice = f"set {CLIENT_TOKEN_VAR} to such a token"
    else:
        advice = (
            f"{command} needs {needs}: set {CLIENT_TOKEN_VAR} to one (an admin token is one of the "
            f"service's {API_TOKENS_VAR} or its api-token file; `ledger token create` mints the others)"
        )
    where = "the ledger service" if url is None else f"the ledger service at {url}"
    return f"{where} refused the API token ({one_line(said)}); {advice}"
