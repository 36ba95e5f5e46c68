"""Idempotency-Key answers, the producer heartbeat, and a stalled_runs view that counts it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 12:00:00.000000

- `ledger.idempotency_keys`: the HTTP service's stored answers to requests that carried an
  `Idempotency-Key` (token fingerprint, a digest of method + path + key, the request's fingerprint,
  the answer), swept by the watchdog after 24 hours.
- `runs.last_heartbeat_at`: server time of the last status upload that carried
  `last_checkpoint_at`; the watchdog treats it like an event.
- `stalled_runs` is redefined with that rule (the latest of the last event and the heartbeat) and
  shows the heartbeat as a last column. `CREATE OR REPLACE` keeps the view's grants; the downgrade
  must drop a column, so it recreates the previous view and grants it again.

The view SQL is written out literally (not imported from the package) so that this migration stays
frozen.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# GREATEST ignores NULLs: a run that never sent a heartbeat is judged by its last event alone.
STALLED_RUNS = """
CREATE OR REPLACE VIEW ledger.stalled_runs AS
SELECT
    r.run_id,
    r.status,
    coalesce(r.play_name, r.terminal_play_name) AS play_name,
    r.updated_at,
    now() - greatest(r.updated_at, r.last_heartbeat_at) AS idle,
    r.last_seq,
    r.last_heartbeat_at
FROM ledger.runs r
WHERE r.terminal_status IS NULL
  AND greatest(r.updated_at, r.last_heartbeat_at) < now() - interval '5 minutes'
"""

# The view as revision 0002 defined it.
STALLED_RUNS_0002 = """
CREATE VIEW ledger.stalled_runs AS
SELECT
    r.run_id,
    r.status,
    coalesce(r.play_name, r.terminal_play_name) AS play_name,
    r.updated_at,
    now() - r.updated_at AS idle,
    r.last_seq
FROM ledger.runs r
WHERE r.terminal_status IS NULL AND r.updated_at < now() - interval '5 minutes'
"""


def _grant_reader(relation: str) -> str:
    # The role is created by revision 0002 but may have been dropped by hand since.
    return f"""
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ledger_reader') THEN
        GRANT SELECT ON {relation} TO ledger_reader;
    END IF;
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "idempotency_keys",
        sa.Column("token_fingerprint", sa.Text(), nullable=False),
        sa.Column("scope_digest", sa.Text(), nullable=False),
        sa.Column("method", sa.Text(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.Column("request_fingerprint", sa.Text(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("content_type", sa.Text(), nullable=False),
        sa.Column("response_body", postgresql.BYTEA(), nullable=False),
        sa.Column(
            "created_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "status_code BETWEEN 100 AND 499", name=op.f("ck_idempotency_keys_status_code_stored")
        ),
        sa.PrimaryKeyConstraint("token_fingerprint", "scope_digest", name=op.f("pk_idempotency_keys")),
        schema="ledger",
    )
    op.create_index(
        "ix_idempotency_keys_created_at",
        "idempotency_keys",
        ["created_at"],
        unique=False,
        schema="ledger",
    )
    op.add_column(
        "runs",
        sa.Column("last_heartbeat_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        schema="ledger",
    )
    op.execute(STALLED_RUNS)
    op.execute(_grant_reader("ledger.idempotency_keys"))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS ledger.stalled_runs")
    op.execute(STALLED_RUNS_0002)
    op.execute(_grant_reader("ledger.stalled_runs"))
    op.drop_column("runs", "last_heartbeat_at", schema="ledger")
    op.drop_index("ix_idempotency_keys_created_at", table_name="idempotency_keys", schema="ledger")
    op.drop_table("idempotency_keys", schema="ledger")
