"""The ledger's tables: the one source of truth for Alembic (SQLAlchemy Core, schema `ledger`).

Every statement the ledger runs reads or writes these tables; migrations are generated from and
checked against this module (`tests/migration` fails on drift).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import BYTEA, INTERVAL, JSONB, TIMESTAMP

# The rules own the vocabularies; the checks below only restate them for the database.
from ledger.runlog.events import EVENT_TYPES, TERMINAL_STATUSES

__all__ = [
    "ALL_TABLES",
    "SCHEMA",
    "metadata",
]

SCHEMA = "ledger"

_NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(schema=SCHEMA, naming_convention=_NAMING_CONVENTION)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _ts(name: str, *, nullable: bool = True, default_now: bool = False) -> Column[object]:
    return Column(
        name,
        TIMESTAMP(timezone=True),
        nullable=nullable,
        server_default=text("now()") if default_now else None,
    )


# -- warm pool: pre-started instances per code version -------------------------------------------

_pool_entries = Table(
    "pool_entries",
    metadata,
    Column("pool", Text, nullable=False),
    Column("id", Text, nullable=False),
    Column("version", Text, nullable=False),
    Column("state", Text, nullable=False),
    _ts("created_at", nullable=False),
    _ts("ready_at"),
    _ts("expires_at", nullable=False),
    PrimaryKeyConstraint("pool", "id"),
    CheckConstraint(_in("state", ("warming", "ready")), name="state"),
    CheckConstraint("(state = 'ready') = (ready_at IS NOT NULL)", name="ready_at_iff_ready"),
    CheckConstraint("version <> ''", name="version_not_empty"),
    CheckConstraint("id <> ''", name="id_not_empty"),
    # A claim takes the newest ready entry of a version, ties by id: served by this index in order
    # (an add makes its whole batch ready at one instant, so without `id` a claim sorted the tie).
    Index(
        "ix_pool_entries_ready_newest",
        "pool",
        "version",
        text("ready_at DESC"),
        "id",
        postgresql_where=text("state = 'ready'"),
        # The claim's count of stale entries reads whether they expired from the index alone.
        postgresql_include=["expires_at"],
    ),
    Index("ix_pool_entries_pool_expires_at", "pool", "expires_at"),
    # The counts a claim answers with read a version's live entries from this index alone.
    Index(
        "ix_pool_entries_version_expires_at", "pool", "version", "expires_at", postgresql_include=["ready_at"]
    ),
    # An instance id names one instance across pools: whether it is a live entry of any pool.
    Index("ix_pool_entries_id", "id", postgresql_include=["expires_at"]),
)

# How many entries (and ready ones) each pool and version holds, garbage included: kept by
# triggers on pool_entries (migration 0007), one row per writing backend (`slot`, its pid) so
# concurrent writers never wait on each other; claims fold the rows now and then. The counts read
# these instead of every entry and scan only what is garbage or too young.
_pool_tallies = Table(
    "pool_tallies",
    metadata,
    Column("pool", Text, nullable=False),
    Column("version", Text, nullable=False),
    Column("slot", Integer, nullable=False),
    Column("entries", BigInteger, nullable=False),
    Column("ready", BigInteger, nullable=False),
    PrimaryKeyConstraint("pool", "version", "slot"),
)

# -- run mappings: which instance serves a run ---------------------------------------------------

_run_mappings = Table(
    "run_mappings",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("pool", Text, nullable=False),
    Column("instance_id", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("blocked_instance_id", Text),
    Column("version", Text, nullable=False),
    _ts("claimed_at"),
    _ts("started_at"),
    _ts("created_at", nullable=False),
    _ts("expires_at", nullable=False),
    PrimaryKeyConstraint("run_id"),
    CheckConstraint(_in("state", ("claimed", "started", "blocked")), name="state"),
    CheckConstraint("state <> 'blocked' OR blocked_instance_id IS NOT NULL", name="blocked_has_instance"),
    CheckConstraint("state <> 'started' OR started_at IS NOT NULL", name="started_has_started_at"),
    CheckConstraint("run_id <> ''", name="run_id_not_empty"),
    Index("ix_run_mappings_expires_at", "expires_at"),
    # The runs an instance serves: checked by every map, add, ready and claim.
    Index("ix_run_mappings_instance_id", "instance_id"),
)

# -- runs, their gapless events, terminal state and live progress -------------------------------

_runs = Table(
    "runs",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("status", Text, nullable=False, server_default=text("'running'")),
    Column("play_name", Text),
    _ts("created_at", nullable=False, default_now=True),
    # Time of the last event: what the watchdog and "age" read.
    _ts("updated_at", nullable=False, default_now=True),
    Column("last_seq", BigInteger, nullable=False, server_default=text("0")),
    # Retention has trimmed every non-terminal event at or below this seq: the trim and a read's
    # first seq start above it instead of walking dead rows vacuum has not cleared yet.
    Column("events_trimmed_through", BigInteger, nullable=False, server_default=text("0")),
    # Status ingestion (2.7): the fenced producer attempt and its positional channels.
    Column("producer_attempt", Integer, nullable=False, server_default=text("0")),
    Column("last_upload_seq", BigInteger, nullable=False, server_default=text("0")),
    Column("live_log_count", BigInteger, nullable=False, server_default=text("0")),
    Column("live_node_progress", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("activity_watermarks", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("replay_digest", Text),
    # Server time of the last status upload that carried `last_checkpoint_at`: the producer is
    # alive even when it appends nothing, so the watchdog counts it like an event.
    _ts("last_heartbeat_at"),
    # Terminal state (2.4): null until the first terminal wins.
    Column("terminal_status", Text),
    Column("terminal_result", JSONB),
    Column("terminal_error", Text),
    Column("terminal_total_rows", BigInteger),
    Column("terminal_duration_ms", BigInteger),
    Column("terminal_play_name", Text),
    _ts("completed_at"),
    PrimaryKeyConstraint("run_id"),
    CheckConstraint("run_id <> ''", name="run_id_not_empty"),
    CheckConstraint("status <> ''", name="status_not_empty"),
    CheckConstraint("last_seq >= 0", name="last_seq_non_negative"),
    CheckConstraint("producer_attempt >= 0", name="producer_attempt_non_negative"),
    CheckConstraint(
        f"terminal_status IS NULL OR {_in('terminal_status', TERMINAL_STATUSES)}", name="terminal_status"
    ),
    CheckConstraint("(terminal_status IS NULL) = (completed_at IS NULL)", name="completed_at_iff_terminal"),
    # The watchdog scans non-terminal runs by idleness.
    Index("ix_runs_active_updated_at", "updated_at", postgresql_where=text("terminal_status IS NULL")),
    # The run list: newest first, ties by run id.
    Index("ix_runs_newest_first", text("created_at DESC"), "run_id"),
    # Retention deletes finished runs oldest first.
    Index(
        "ix_runs_finished_completed_at", "completed_at", postgresql_where=text("terminal_status IS NOT NULL")
    ),
)

# Partitioned by the run's creation time (`run_created_at`, copied from `runs.created_at` by the
# append): one partition per UTC day or month in the schema `ledger_partitions`, created by
# `ledger.ensure_run_events_partition` (a trigger on `runs` calls it for new runs), dropped whole
# by retention (`ledger.runlog.partitions`).
# No foreign key to `runs`: detaching a partition would lock `runs`; triggers on `runs` delete (or
# move) a run's events instead.
_run_events = Table(
    "run_events",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("seq", BigInteger, nullable=False),
    _ts("run_created_at", nullable=False),
    Column("type", Text, nullable=False),
    _ts("ts", nullable=False, default_now=True),
    Column("payload", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    PrimaryKeyConstraint("run_id", "seq", "run_created_at"),
    CheckConstraint("seq >= 1", name="seq_positive"),
    CheckConstraint(_in("type", EVENT_TYPES), name="type"),
    postgresql_partition_by="RANGE (run_created_at)",
)

# The period new partitions of `run_events` cover (`day` or `month`): one row.
_run_event_partitioning = Table(
    "run_event_partitioning",
    metadata,
    Column("id", Boolean, nullable=False, server_default=text("true")),
    Column("period", Text, nullable=False),
    PrimaryKeyConstraint("id"),
    CheckConstraint("id", name="one_row"),
    CheckConstraint("period IN ('day', 'month')", name="period"),
)

# The watchdog's stall limit, in one place: the watchdog writes it when it starts, the view of
# stalled runs reads it. One row.
_watchdog_settings = Table(
    "watchdog_settings",
    metadata,
    Column("id", Boolean, nullable=False, server_default=text("true")),
    Column("stall_after", INTERVAL, nullable=False),
    Column("updated_at", TIMESTAMP(timezone=True), nullable=False, server_default=text("now()")),
    PrimaryKeyConstraint("id"),
    CheckConstraint("id", name="one_row"),
    CheckConstraint("stall_after > interval '0'", name="stall_after_positive"),
)

# -- data plane outcomes: sheet rows and durable node observations -------------------------------

_sheet_rows = Table(
    "sheet_rows",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("table_namespace", Text, nullable=False),
    Column("row_key", Text, nullable=False),
    Column("status", Text, nullable=False),
    _ts("updated_at", nullable=False, default_now=True),
    PrimaryKeyConstraint("run_id", "table_namespace", "row_key"),
    ForeignKeyConstraint(["run_id"], ["ledger.runs.run_id"], ondelete="CASCADE"),
    CheckConstraint(_in("status", ("pending", "completed", "failed")), name="status"),
    CheckConstraint("table_namespace <> ''", name="table_namespace_not_empty"),
)

_node_observations = Table(
    "node_observations",
    metadata,
    Column("run_id", Text, nullable=False),
    Column("node_id", Text, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("invocation_seq", Integer, nullable=False),
    Column("invocation_id", Text),
    Column("status", Text, nullable=False),
    Column("inputs", JSONB),
    Column("outputs", JSONB),
    Column("error", Text),
    _ts("started_at"),
    _ts("settled_at"),
    _ts("recorded_at", nullable=False, default_now=True),
    PrimaryKeyConstraint("run_id", "node_id", "attempt", "invocation_seq"),
    ForeignKeyConstraint(["run_id"], ["ledger.runs.run_id"], ondelete="CASCADE"),
    CheckConstraint("node_id <> ''", name="node_id_not_empty"),
    CheckConstraint("attempt >= 0 AND invocation_seq >= 0", name="ordering_non_negative"),
)

# -- Idempotency-Key answers of the HTTP service ---------------------------------------------------

# One row per (token, method + path + key): the request's fingerprint and the answer given, kept
# 24 hours. The token is stored only as a SHA-256 fingerprint; method, path and key are hashed into
# `scope_digest` (a path or key may be longer than an index entry can hold) and kept as text beside
# it for people reading the table.
_idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("token_fingerprint", Text, nullable=False),
    Column("scope_digest", Text, nullable=False),
    Column("method", Text, nullable=False),
    Column("path", Text, nullable=False),
    Column("idempotency_key", Text, nullable=False),
    Column("request_fingerprint", Text, nullable=False),
    Column("status_code", Integer, nullable=False),
    Column("content_type", Text, nullable=False),
    Column("response_body", BYTEA, nullable=False),
    _ts("created_at", nullable=False, default_now=True),
    # The answer's protocol headers (`[name, value]` pairs), given again with it.
    Column("response_headers", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    PrimaryKeyConstraint("token_fingerprint", "scope_digest"),
    CheckConstraint("status_code BETWEEN 100 AND 499", name="status_code_stored"),
    # The watchdog sweeps expired keys oldest first.
    Index("ix_idempotency_keys_created_at", "created_at"),
)

# -- Durable Streams: append-only byte logs addressed by name ------------------------------------

# One row per stream. Positions count bytes (JSON streams: messages); `tail` is the next position
# to write. A fork reads `forked_from` below `fork_offset` and its own rows from there on; a source
# deleted while forks still read through it keeps its row with `deleted_at` set.
_streams = Table(
    "streams",
    metadata,
    Column("name", Text, nullable=False),
    Column("content_type", Text, nullable=False),
    _ts("created_at", nullable=False, default_now=True),
    Column("ttl_s", BigInteger),
    _ts("expires_at"),
    # Last read or write: a TTL counts from here (a sliding window).
    _ts("touched_at", nullable=False, default_now=True),
    Column("closed", Boolean, nullable=False, server_default=text("false")),
    # The producer (id, epoch, seq) whose append closed the stream: its retry is a duplicate.
    Column("closed_by", JSONB),
    Column("tail", BigInteger, nullable=False, server_default=text("0")),
    Column("last_stream_seq", Text),
    # Idempotent producers: {"<producer id>": {"epoch": e, "seq": s}}.
    Column("producers", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("forked_from", Text),
    Column("fork_offset", BigInteger),
    Column("fork_sub_offset", BigInteger, nullable=False, server_default=text("0")),
    _ts("deleted_at"),
    PrimaryKeyConstraint("name"),
    CheckConstraint("name <> ''", name="name_not_empty"),
    CheckConstraint("tail >= 0", name="tail_non_negative"),
    CheckConstraint("ttl_s IS NULL OR expires_at IS NULL", name="ttl_or_expiry"),
    CheckConstraint("(forked_from IS NULL) = (fork_offset IS NULL)", name="fork_offset_iff_forked"),
    Index("ix_streams_forked_from", "forked_from", postgresql_where=text("forked_from IS NOT NULL")),
)

# One row per append (JSON streams: per message), covering positions [offset, end_offset).
_stream_data = Table(
    "stream_data",
    metadata,
    Column("name", Text, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("end_offset", BigInteger, nullable=False),
    Column("payload", BYTEA, nullable=False),
    PrimaryKeyConstraint("name", "offset"),
    ForeignKeyConstraint(["name"], ["ledger.streams.name"], ondelete="CASCADE"),
    CheckConstraint('"offset" >= 0 AND end_offset > "offset"', name="range_not_empty"),
)

# Children before parents: the order a committed test deletes rows in.
ALL_TABLES = (
    _run_events,
    _sheet_rows,
    _node_observations,
    _runs,
    _run_mappings,
    _pool_entries,
    # After pool_entries: deleting entries writes (negative) tallies.
    _pool_tallies,
    _idempotency_keys,
    _stream_data,
    _streams,
    # Without its row the stall limit is the default.
    _watchdog_settings,
)
