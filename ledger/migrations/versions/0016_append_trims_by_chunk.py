"""The append trims by chunk: `ledger.append_events_v2`.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03 18:30:00.000000

Loads release `0016` of `ledger.sql`: the append moves a run's trim watermark on every call as
before, and readers start above it, but deletes the rows at or below it 1,000 seqs at a time
instead of on every call (`append_events_v2.sql`). A row below the watermark may now still be
stored, which a reader of the release before would show, so the function has a new name and the
old one goes. The downgrade restores 0015's files and deletes what lies at or below each run's
watermark (the terminal event kept), as the old append left it.

It also adds the view `ledger.event_log` (`event_log.sql`): a run's events above its watermark,
what a person querying the log by hand should read now that trimmed rows may still be stored.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from ledger import sql

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SIGNATURE = "(text, jsonb, text, bigint, timestamptz, text, boolean)"

# What the old append's readers count on: nothing stored at or below the watermark but the terminal
# event. One statement over the runs that trimmed, each delete bounded to its run's partition.
_DELETE_BELOW_WATERMARKS = """
DELETE FROM ledger.run_events e USING ledger.runs r
WHERE r.events_trimmed_through > 0 AND e.run_id = r.run_id AND e.run_created_at = r.created_at
  AND e.seq <= r.events_trimmed_through AND e.type <> 'terminal'
"""


# The role is created by revision 0002 but may have been dropped by hand since.
GRANT_READER = """
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ledger_reader') THEN
        GRANT SELECT ON ledger.event_log TO ledger_reader;
    END IF;
END
$$
"""


def upgrade() -> None:
    sql.load(op.execute, "0016")
    op.execute(f"DROP FUNCTION ledger.append_events{SIGNATURE}")
    op.execute(GRANT_READER)


def downgrade() -> None:
    sql.load(op.execute, "0015")
    op.execute(f"DROP FUNCTION ledger.append_events_v2{SIGNATURE}")
    op.execute("DROP VIEW ledger.event_log")
    op.execute(_DELETE_BELOW_WATERMARKS)
