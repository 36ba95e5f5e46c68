"""The `ledger` command. Each group lives in its own module; this one wires them together."""

from __future__ import annotations

from ledger.cli.app import cli, main

__all__ = ["cli", "main"]
