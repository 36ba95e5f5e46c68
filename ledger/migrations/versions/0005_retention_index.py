"""An index for run retention: finished runs by completion time.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 04:30:00.000000

- `ix_runs_finished_completed_at`: `ledger.runs (completed_at) WHERE terminal_status IS NOT NULL`.
  Retention deletes finished runs that completed before a cutoff, oldest first, in small batches;
  the index hands each batch its oldest runs without scanning the table. Running runs are not in
  it (they are never deleted), so it costs appends nothing until a run finishes.

Built with a plain `CREATE INDEX` (it holds writes to `ledger.runs` for the build: about a second
per million runs); build it `CONCURRENTLY` by hand first on a big table and this step is a no-op.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_runs_finished_completed_at",
        "runs",
        ["completed_at"],
        unique=False,
        schema="ledger",
        postgresql_where=sa.text("terminal_status IS NOT NULL"),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index("ix_runs_finished_completed_at", table_name="runs", schema="ledger")
