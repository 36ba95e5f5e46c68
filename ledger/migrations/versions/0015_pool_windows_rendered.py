"""The pool's windows rendered from their one home.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03 16:00:00.000000

Loads release `0015` of `ledger.sql`: `ledger.pool_windows()` now comes from `pool_windows_2.sql`,
rendered from `ledger.sql.POOL_WINDOWS` (which Python reads as data instead of parsing the SQL).
The function's definition is unchanged, so the database is the same as at 0014; the downgrade
loads 0014's files again.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from ledger import sql

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    sql.load(op.execute, "0015")


def downgrade() -> None:
    sql.load(op.execute, "0014")
