"""The database helpers some tests call directly; they live in the `ledger.testing` plugin."""

from ledger.testing import (
    clone_database,
    create_empty_database,
    drop_database,
    ensure_template,
    with_database,
)

__all__ = ["clone_database", "create_empty_database", "drop_database", "ensure_template", "with_database"]
