"""SQL in one place: the functions, triggers and views come from `ledger/sql/`, and the pool's time
windows from one function.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 00:30:00.000000

Loads release `0013` of `ledger.sql` (see its docstring for how later changes work). Most files
restate what 0002-0012 made (`CREATE OR REPLACE` with the same definition changes nothing); new or
changed are:

- `ledger.pool_windows()`: the pool's default windows (stale after 7 minutes, entry TTL 8 minutes by
  default and at most, mappings 1 hour, no minimum ready age), read by the views and, for a window
  their caller leaves NULL, by the claim and the collect.
- `ledger.pool_claim_v2` and `ledger.pool_collect_v2` replace `pool_claim` and `pool_collect`
  (dropped here): windows and `now` may be NULL, and the claim takes `collect` before them.
- `ledger.pool_entry_conditions`: each unexpired entry with its condition (available, warming,
  stale), which the dashboard lists; `pool_availability` now counts it instead of restating the
  7 minutes.

The downgrade restores 0012's objects from the migrations that shipped them (their module names are
not identifiers, hence importlib).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from alembic import op

from ledger import sql

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

REPLACED = (
    "ledger.pool_claim(text, text, text, text, timestamptz, bigint, bigint, bigint, boolean)",
    "ledger.pool_collect(text, text, timestamptz, bigint)",
)

ADDED = (
    "ledger.pool_claim_v2(text, text, text, text, boolean, timestamptz, bigint, bigint, bigint)",
    "ledger.pool_collect_v2(text, text, timestamptz, bigint)",
)


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
    sql.load(op.execute, "0013")
    for signature in REPLACED:
        op.execute(f"DROP FUNCTION {signature}")
    op.execute(_grant_reader("ledger.pool_entry_conditions"))


def downgrade() -> None:
    views, collect, claim = (
        importlib.import_module(f"ledger.migrations.versions.{name}")
        for name in ("0002_inspection_views", "0007_claim_function", "0009_one_run_per_instance")
    )
    op.execute(views.POOL_AVAILABILITY.replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1))
    op.execute("DROP VIEW ledger.pool_entry_conditions")
    op.execute(collect.COLLECT.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
    op.execute(claim.CLAIM)
    for signature in ADDED:
        op.execute(f"DROP FUNCTION {signature}")
    op.execute("DROP FUNCTION ledger.pool_windows()")
