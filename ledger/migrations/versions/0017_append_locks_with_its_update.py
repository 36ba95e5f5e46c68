"""The append takes its run's lock with its update: `ledger.append_events_v3`.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03 21:30:00.000000

Loads release `0017` of `ledger.sql`: `append_events_v3.sql` advances the run with the `UPDATE`
that locks it instead of a `SELECT ... FOR UPDATE` first (a statement and a WAL record less per
append), and writes a status upload's ingestion state with the same statement when asked (a round
trip less per upload). Every rule of the append is as before, so `append_events_v2` stays: the
code of the release before calls it while a deploy rolls. The downgrade drops `append_events_v3`
alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from ledger import sql

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SIGNATURE = "(text, jsonb, text, bigint, timestamptz, text, boolean, jsonb)"


def upgrade() -> None:
    sql.load(op.execute, "0017")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION ledger.append_events_v3{SIGNATURE}")
