"""`ledger report` and signals: the first SIGINT or SIGTERM asks the reporter to land what it has
and stop, a second exits at once; the command line that continues an interrupted attempt."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

from ledger.cli.exits import EXIT_INTERRUPTED

__all__ = [
    "resume_command",
    "signals",
]


def resume_command(run_id: str, contract: Path | None, attempt: int, mode: str) -> str:
    """The command line that continues this reporter's attempt after an interruption."""
    words = ["ledger", "report", "--run-id", run_id, "--resume"]
    if contract is not None:
        words += ["--contract", str(contract)]
    if attempt != 1:
        words += ["--attempt", str(attempt)]
    if mode != "progress_reporter":
        words += ["--mode", mode]
    return shlex.join(words)


@contextlib.contextmanager
def signals(interrupted: asyncio.Future[str], warn: Callable[[str], None], run_id: str) -> Iterator[None]:
    """The first SIGINT or SIGTERM resolves `interrupted` with its name; a second one exits at once."""
    loop = asyncio.get_running_loop()
    heard: list[str] = []

    def on_signal(name: str) -> None:
        heard.append(name)
        if len(heard) == 1:
            if not interrupted.done():
                interrupted.set_result(name)
            return
        warn(f"a second signal ({name}): exiting at once; run {run_id} is left as the ledger had it")
        os._exit(EXIT_INTERRUPTED)

    kinds = (signal.SIGINT, signal.SIGTERM)
    for kind in kinds:
        loop.add_signal_handler(kind, on_signal, kind.name)
    try:
        yield
    finally:
        for kind in kinds:
            loop.remove_signal_handler(kind)
