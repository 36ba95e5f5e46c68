"""The run list's index: runs newest first, ties by run id.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 06:00:00.000000

- `ix_runs_newest_first`: `ledger.runs (created_at DESC, run_id)`, exactly the run list's order
  (`run_overview` newest first, ties by run id). A page of the list, the first or one deep behind
  a cursor, is read off this index: its cost does not grow with the number of runs.
- It replaces `ix_runs_created_at` (`created_at` alone): nothing else reads runs by creation time,
  and the ledger keeps the number of indexes every run insert maintains.

Built with a plain `CREATE INDEX` (it holds writes to `ledger.runs` for the build: about a second
per million runs); build it `CONCURRENTLY` by hand first on a big table and this step only drops
the old index.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_runs_newest_first",
        "runs",
        [sa.text("created_at DESC"), "run_id"],
        unique=False,
        schema="ledger",
        if_not_exists=True,
    )
    op.drop_index("ix_runs_created_at", table_name="runs", schema="ledger", if_exists=True)


def downgrade() -> None:
    op.create_index(
        "ix_runs_created_at", "runs", ["created_at"], unique=False, schema="ledger", if_not_exists=True
    )
    op.drop_index("ix_runs_newest_first", table_name="runs", schema="ledger")
