"""Step states in the views, numeric row sums, the stall limit's one home, the step events.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03 12:00:00.000000

Loads release `0014` of `ledger.sql`. New or changed:

- `ledger.step_state(node)`: a step's state, as its node of the live progress carries it (or read
  from its fields, for a node stored before steps had states).
- `ledger.step_progress` gains `state`, `reason` and `position`.
- `ledger.run_overview` gains `steps_failed`, `steps_cancelled` and `steps_skipped`; `steps_done`
  counts completed steps only; `rows_completed`, `rows_failed` and `rows_total` are numeric, so
  no run's steps can overflow them (a column's type cannot change in place: the view is made anew).
- `ledger.watchdog_settings`: one row holding the watchdog's stall limit, written by the service and
  `ledger watchdog` when they start; `ledger.stalled_runs` reads it instead of restating 5 minutes.
- The event log takes the step settlement events (`step.failed`, `step.cancelled`,
  `step.skipped`) and the reporter's `reporter.interrupted` / `reporter.resumed`.

The downgrade restores 0013's objects; events of the new types are kept as the nearest type 0013
knows (a settlement as `step.completed`, a reporter event as a `log` line saying it).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from ledger import sql

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TYPES_0013 = (
    "status",
    "log",
    "progress",
    "terminal",
    "step.started",
    "step.progress",
    "step.completed",
    "dataset.lifecycle",
    "activity.observed",
    "log.gap",
)
_SETTLEMENT_TYPES = ("step.failed", "step.cancelled", "step.skipped")
_REPORTER_TYPES = ("reporter.interrupted", "reporter.resumed")


def _type_check(types: Sequence[str]) -> str:
    listed = ", ".join(f"'{kind}'" for kind in types)
    return f"ALTER TABLE ledger.run_events ADD CONSTRAINT ck_run_events_type CHECK (type IN ({listed}))"


WATCHDOG_SETTINGS = """
CREATE TABLE ledger.watchdog_settings (
    id boolean DEFAULT true NOT NULL,
    stall_after interval NOT NULL,
    updated_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT pk_watchdog_settings PRIMARY KEY (id),
    CONSTRAINT ck_watchdog_settings_one_row CHECK (id),
    CONSTRAINT ck_watchdog_settings_stall_after_positive CHECK (stall_after > interval '0')
)
"""

# The role is created by revision 0002 but may have been dropped by hand since.
GRANT_READER = """
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ledger_reader') THEN
        GRANT SELECT ON ledger.run_overview, ledger.step_progress, ledger.watchdog_settings
            TO ledger_reader;
    END IF;
END
$$
"""

GRANT_READER_0013 = GRANT_READER.replace(", ledger.watchdog_settings", "")


def upgrade() -> None:
    op.execute("ALTER TABLE ledger.run_events DROP CONSTRAINT ck_run_events_type")
    op.execute(_type_check((*_TYPES_0013, *_SETTLEMENT_TYPES, *_REPORTER_TYPES)))
    op.execute(WATCHDOG_SETTINGS)
    op.execute("INSERT INTO ledger.watchdog_settings (stall_after) VALUES (interval '5 minutes')")
    # Their columns change type or place: made anew (nothing in the schema depends on them).
    op.execute("DROP VIEW ledger.run_overview")
    op.execute("DROP VIEW ledger.step_progress")
    sql.load(op.execute, "0014")
    op.execute(GRANT_READER)


def downgrade() -> None:
    op.execute("DROP VIEW ledger.run_overview")
    op.execute("DROP VIEW ledger.step_progress")
    sql.load(op.execute, "0013")
    op.execute("DROP FUNCTION ledger.step_state(jsonb)")
    op.execute("DROP TABLE ledger.watchdog_settings")
    op.execute(GRANT_READER_0013)
    op.execute("ALTER TABLE ledger.run_events DROP CONSTRAINT ck_run_events_type")
    settlement = ", ".join(f"'{kind}'" for kind in _SETTLEMENT_TYPES)
    op.execute(f"UPDATE ledger.run_events SET type = 'step.completed' WHERE type IN ({settlement})")
    reporter = ", ".join(f"'{kind}'" for kind in _REPORTER_TYPES)
    op.execute(
        "UPDATE ledger.run_events SET type = 'log',"
        " payload = jsonb_build_object('line', type || ' ' || payload::text)"
        f" WHERE type IN ({reporter})"
    )
    op.execute(_type_check(_TYPES_0013))
