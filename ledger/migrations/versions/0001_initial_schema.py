"""Initial schema: pool entries, run mappings, runs, run events, sheet rows, node observations.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 15:12:23.984210
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("CREATE SCHEMA IF NOT EXISTS ledger")
    op.create_table(
        "pool_entries",
        sa.Column("pool", sa.Text(), nullable=False),
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("version", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("created_at", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("ready_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("expires_at", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.CheckConstraint(
            "(state = 'ready') = (ready_at IS NOT NULL)", name=op.f("ck_pool_entries_ready_at_iff_ready")
        ),
        sa.CheckConstraint("id <> ''", name=op.f("ck_pool_entries_id_not_empty")),
        sa.CheckConstraint("state IN ('warming', 'ready')", name=op.f("ck_pool_entries_state")),
        sa.CheckConstraint("version <> ''", name=op.f("ck_pool_entries_version_not_empty")),
        sa.PrimaryKeyConstraint("pool", "id", name=op.f("pk_pool_entries")),
        schema="ledger",
    )
    op.create_index(
        "ix_pool_entries_pool_expires_at",
        "pool_entries",
        ["pool", "expires_at"],
        unique=False,
        schema="ledger",
    )
    op.create_index(
        "ix_pool_entries_ready_newest",
        "pool_entries",
        ["pool", "version", sa.literal_column("ready_at DESC")],
        unique=False,
        schema="ledger",
        postgresql_where=sa.text("state = 'ready'"),
    )
    op.create_table(
        "run_mappings",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("pool", sa.Text(), nullable=False),
        sa.Column("instance_id", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("blocked_instance_id", sa.Text(), nullable=True),
        sa.Column("version", sa.Text(), nullable=False),
        sa.Column("claimed_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("started_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("created_at", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("expires_at", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.CheckConstraint("run_id <> ''", name=op.f("ck_run_mappings_run_id_not_empty")),
        sa.CheckConstraint(
            "state <> 'blocked' OR blocked_instance_id IS NOT NULL",
            name=op.f("ck_run_mappings_blocked_has_instance"),
        ),
        sa.CheckConstraint(
            "state <> 'started' OR started_at IS NOT NULL",
            name=op.f("ck_run_mappings_started_has_started_at"),
        ),
        sa.CheckConstraint("state IN ('claimed', 'started', 'blocked')", name=op.f("ck_run_mappings_state")),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_run_mappings")),
        schema="ledger",
    )
    op.create_index(
        "ix_run_mappings_expires_at", "run_mappings", ["expires_at"], unique=False, schema="ledger"
    )
    op.create_table(
        "runs",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), server_default=sa.text("'running'"), nullable=False),
        sa.Column("play_name", sa.Text(), nullable=True),
        sa.Column(
            "created_at", postgresql.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column(
            "updated_at", postgresql.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("last_seq", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("producer_attempt", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_upload_seq", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("live_log_count", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "live_node_progress",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "activity_watermarks",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("replay_digest", sa.Text(), nullable=True),
        sa.Column("terminal_status", sa.Text(), nullable=True),
        sa.Column("terminal_result", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("terminal_error", sa.Text(), nullable=True),
        sa.Column("terminal_total_rows", sa.BigInteger(), nullable=True),
        sa.Column("terminal_duration_ms", sa.BigInteger(), nullable=True),
        sa.Column("terminal_play_name", sa.Text(), nullable=True),
        sa.Column("completed_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.CheckConstraint("run_id <> ''", name=op.f("ck_runs_run_id_not_empty")),
        sa.CheckConstraint("status <> ''", name=op.f("ck_runs_status_not_empty")),
        sa.CheckConstraint(
            "terminal_status IS NULL OR terminal_status IN ('completed', 'failed', 'cancelled')",
            name=op.f("ck_runs_terminal_status"),
        ),
        sa.CheckConstraint(
            "(terminal_status IS NULL) = (completed_at IS NULL)",
            name=op.f("ck_runs_completed_at_iff_terminal"),
        ),
        sa.CheckConstraint("last_seq >= 0", name=op.f("ck_runs_last_seq_non_negative")),
        sa.CheckConstraint("producer_attempt >= 0", name=op.f("ck_runs_producer_attempt_non_negative")),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_runs")),
        schema="ledger",
    )
    op.create_index(
        "ix_runs_active_updated_at",
        "runs",
        ["updated_at"],
        unique=False,
        schema="ledger",
        postgresql_where=sa.text("terminal_status IS NULL"),
    )
    op.create_index("ix_runs_created_at", "runs", ["created_at"], unique=False, schema="ledger")
    op.create_table(
        "node_observations",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("node_id", sa.Text(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("invocation_seq", sa.Integer(), nullable=False),
        sa.Column("invocation_id", sa.Text(), nullable=True),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("inputs", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("outputs", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("settled_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column(
            "recorded_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("node_id <> ''", name=op.f("ck_node_observations_node_id_not_empty")),
        sa.CheckConstraint(
            "attempt >= 0 AND invocation_seq >= 0", name=op.f("ck_node_observations_ordering_non_negative")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["ledger.runs.run_id"],
            name=op.f("fk_node_observations_run_id_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "run_id", "node_id", "attempt", "invocation_seq", name=op.f("pk_node_observations")
        ),
        schema="ledger",
    )
    op.create_table(
        "run_events",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("ts", postgresql.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column(
            "payload",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "type IN ('status', 'log', 'progress', 'terminal', 'step.started', 'step.progress', 'step.completed', 'dataset.lifecycle', 'activity.observed', 'log.gap')",
            name=op.f("ck_run_events_type"),
        ),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_run_events_seq_positive")),
        sa.ForeignKeyConstraint(
            ["run_id"], ["ledger.runs.run_id"], name=op.f("fk_run_events_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "seq", name=op.f("pk_run_events")),
        schema="ledger",
    )
    op.create_table(
        "sheet_rows",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("table_namespace", sa.Text(), nullable=False),
        sa.Column("row_key", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column(
            "updated_at", postgresql.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.CheckConstraint("status IN ('pending', 'completed', 'failed')", name=op.f("ck_sheet_rows_status")),
        sa.CheckConstraint("table_namespace <> ''", name=op.f("ck_sheet_rows_table_namespace_not_empty")),
        sa.ForeignKeyConstraint(
            ["run_id"], ["ledger.runs.run_id"], name=op.f("fk_sheet_rows_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "table_namespace", "row_key", name=op.f("pk_sheet_rows")),
        schema="ledger",
    )


def downgrade() -> None:
    op.drop_table("sheet_rows", schema="ledger")
    op.drop_table("run_events", schema="ledger")
    op.drop_table("node_observations", schema="ledger")
    op.drop_index("ix_runs_created_at", table_name="runs", schema="ledger")
    op.drop_index(
        "ix_runs_active_updated_at",
        table_name="runs",
        schema="ledger",
        postgresql_where=sa.text("terminal_status IS NULL"),
    )
    op.drop_table("runs", schema="ledger")
    op.drop_index("ix_run_mappings_expires_at", table_name="run_mappings", schema="ledger")
    op.drop_table("run_mappings", schema="ledger")
    op.drop_index(
        "ix_pool_entries_ready_newest",
        table_name="pool_entries",
        schema="ledger",
        postgresql_where=sa.text("state = 'ready'"),
    )
    op.drop_index("ix_pool_entries_pool_expires_at", table_name="pool_entries", schema="ledger")
    op.drop_table("pool_entries", schema="ledger")
    # Only drop the schema when nothing else lives in it: it may be shared with objects not ours.
    op.execute("DROP SCHEMA IF EXISTS ledger RESTRICT")
