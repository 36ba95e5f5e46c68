"""Durable Streams: named append-only byte logs (`ledger.streams`) and their data (`ledger.stream_data`).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 03:00:00.000000

- `ledger.streams`: one row per stream: content type, TTL or absolute expiry (a TTL counts from
  `touched_at`, the last read or write), closed state (and the producer whose append closed it),
  the next position to write (`tail`), the last `Stream-Seq`, idempotent producer state, the fork
  source and position, and `deleted_at` for a source deleted while forks still read through it.
- `ledger.stream_data`: one row per append (per message in JSON streams) covering the positions
  `[offset, end_offset)`, its bytes as `bytea`; deleted with its stream.

Both are granted to `ledger_reader` like the other tables.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


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
        "streams",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("content_type", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("ttl_s", sa.BigInteger(), nullable=True),
        sa.Column("expires_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column(
            "touched_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("closed", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("closed_by", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("tail", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_stream_seq", sa.Text(), nullable=True),
        sa.Column(
            "producers",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("forked_from", sa.Text(), nullable=True),
        sa.Column("fork_offset", sa.BigInteger(), nullable=True),
        sa.Column("fork_sub_offset", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("deleted_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.CheckConstraint("name <> ''", name=op.f("ck_streams_name_not_empty")),
        sa.CheckConstraint("tail >= 0", name=op.f("ck_streams_tail_non_negative")),
        sa.CheckConstraint("ttl_s IS NULL OR expires_at IS NULL", name=op.f("ck_streams_ttl_or_expiry")),
        sa.CheckConstraint(
            "(forked_from IS NULL) = (fork_offset IS NULL)", name=op.f("ck_streams_fork_offset_iff_forked")
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_streams")),
        schema="ledger",
    )
    op.create_index(
        "ix_streams_forked_from",
        "streams",
        ["forked_from"],
        unique=False,
        schema="ledger",
        postgresql_where=sa.text("forked_from IS NOT NULL"),
    )
    op.create_table(
        "stream_data",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("end_offset", sa.BigInteger(), nullable=False),
        sa.Column("payload", postgresql.BYTEA(), nullable=False),
        sa.CheckConstraint(
            '"offset" >= 0 AND end_offset > "offset"', name=op.f("ck_stream_data_range_not_empty")
        ),
        sa.ForeignKeyConstraint(
            ["name"],
            ["ledger.streams.name"],
            name=op.f("fk_stream_data_name_streams"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("name", "offset", name=op.f("pk_stream_data")),
        schema="ledger",
    )
    op.execute(_grant_reader("ledger.streams"))
    op.execute(_grant_reader("ledger.stream_data"))


def downgrade() -> None:
    op.drop_table("stream_data", schema="ledger")
    op.drop_index("ix_streams_forked_from", table_name="streams", schema="ledger")
    op.drop_table("streams", schema="ledger")
