"""Idempotency-Key answers keep the headers that are part of the answer.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 22:00:00.000000

- `idempotency_keys.response_headers`: the stored answer's protocol headers as a JSON array of
  `[name, value]` pairs (a Durable Streams write answers with `Stream-Next-Offset`, `Location`,
  `Stream-Closed`, `Producer-Epoch` and `Producer-Seq`; a replay without them is not the same
  answer). Answers stored before it replay with none, as they did.

Adding a column with a constant default rewrites nothing (Postgres 11 and later).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "idempotency_keys",
        sa.Column(
            "response_headers",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        schema="ledger",
    )


def downgrade() -> None:
    op.drop_column("idempotency_keys", "response_headers", schema="ledger")
