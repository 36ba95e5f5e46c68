"""Input the pure rules used to let through to Postgres (or to `from_ms`), found by the API fuzz test.

Each case used to fail only in the database (int4/bigint out of range, NUL, invalid UTF-8) or with
an OverflowError; now the rule refuses it with `InvalidInput` naming the field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ledger.errors import InvalidInput
from ledger.ingest.observations import invocation_seq_from_id, parse_observation
from ledger.ingest.upload import parse_upload
from ledger.pool import rules as pool_rules
from ledger.runlog.events import parse_after, parse_events, parse_terminal_state, validate_run_id
from ledger.validate import INT32_MAX, INT64_MAX, MAX_EPOCH_MS

HUGE = 10**30


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def running(**fields: Any) -> dict[str, Any]:
    return {"status": "running", **fields}


def observation(**fields: Any) -> dict[str, Any]:
    return {"node_id": "n", "attempt": 1, "status": "completed", **fields}


CASES: list[tuple[str, Callable[[], object]]] = [
    # run log: bigint columns of ledger.runs
    (
        "events[0].total_rows",
        lambda: parse_events([{"type": "terminal", "status": "completed", "total_rows": HUGE}]),
    ),
    (
        "events[0].duration_ms",
        lambda: parse_events([{"type": "terminal", "status": "failed", "duration_ms": INT64_MAX + 1}]),
    ),
    (
        "total_rows",
        lambda: parse_terminal_state({"status": "completed", "total_rows": INT64_MAX + 1}, field=""),
    ),
    ("terminal.duration_ms", lambda: parse_terminal_state({"status": "completed", "duration_ms": HUGE})),
    ("after", lambda: parse_after(HUGE)),
    ("after", lambda: parse_after(str(INT64_MAX + 1))),
    ("run_id", lambda: validate_run_id("r\ud800")),
    # observations: int4 columns and times
    (
        "observations[0].attempt",
        lambda: parse_observation("observations[0]", observation(attempt=INT32_MAX + 1)),
    ),
    ("o.invocation_seq", lambda: parse_observation("o", observation(invocation_seq=float(INT32_MAX + 1)))),
    ("o.invocation_id", lambda: parse_observation("o", observation(invocation_id=f"n:1:{INT32_MAX + 1}"))),
    ("o.started_at", lambda: parse_observation("o", observation(started_at=HUGE))),
    ("o.settled_at", lambda: parse_observation("o", observation(settled_at=1e308))),
    ("o.inputs", lambda: parse_observation("o", observation(inputs={"x": "\ud800"}))),
    ("o.node_id", lambda: parse_observation("o", observation(node_id="n\udfff"))),
    # pool: NUL and invalid UTF-8 in names and ids
    ("version", lambda: pool_rules.check_version("v\x00")),
    ("pool", lambda: pool_rules.check_pool("\x00pool")),
    ("instance_id", lambda: pool_rules.check_id("instance_id", "i\x00")),
    ("ids[1]", lambda: pool_rules.check_ids(["a", "b\x00"])),
    ("version", lambda: pool_rules.check_version("\ud800")),
    # status ingestion: int4 / bigint run columns, and what the inspection views cast
    ("producer_attempt", lambda: parse_upload("r", running(producer_attempt=INT32_MAX + 1))),
    ("upload_seq", lambda: parse_upload("r", running(upload_seq=INT64_MAX + 1))),
    ("live_log_total_count", lambda: parse_upload("r", running(live_log_total_count=HUGE))),
    (
        "terminal_log_replay.total_count",
        lambda: parse_upload("r", running(terminal_log_replay={"lines": ["x"], "total_count": HUGE})),
    ),
    (
        "terminal_log_replay",
        lambda: parse_upload(
            "r", running(live_log_total_count=INT64_MAX, terminal_log_replay={"lines": ["x"]})
        ),
    ),
    (
        "live_node_progress.n.completed",
        lambda: parse_upload("r", running(live_node_progress={"n": {"completed": HUGE}})),
    ),
    (
        "live_node_progress.n.started_at",
        lambda: parse_upload("r", running(live_node_progress={"n": {"started_at": MAX_EPOCH_MS + 1}})),
    ),
    ("run_id", lambda: validate_run_id("a/b")),
    ("run_id", lambda: validate_run_id("line\nbreak")),
    ("after", lambda: parse_after("1_0")),
    ("after", lambda: parse_after("\u0661")),
    ("o.inputs", lambda: parse_observation("o", observation(inputs=nested(61)))),
    (
        "dataset_lifecycle_events[0]",
        lambda: parse_upload("r", running(dataset_lifecycle_events=[{"k": "\udfff"}])),
    ),
]


@pytest.mark.parametrize(("field", "call"), CASES, ids=[f"{i}:{field}" for i, (field, _) in enumerate(CASES)])
def test_out_of_range_or_unstorable_input_names_the_field(field: str, call: Callable[[], object]) -> None:
    with pytest.raises(InvalidInput) as info:
        call()
    assert info.value.field == field


def test_the_bounds_themselves_are_accepted() -> None:
    terminal = parse_terminal_state(
        {"status": "completed", "total_rows": INT64_MAX, "duration_ms": INT64_MAX}, field=""
    )
    assert (terminal.total_rows, terminal.duration_ms) == (INT64_MAX, INT64_MAX)
    assert parse_after(INT64_MAX) == INT64_MAX
    parsed = parse_observation("o", observation(attempt=INT32_MAX, invocation_id=f"n:{INT32_MAX}"))
    assert (parsed["attempt"], parsed["invocation_seq"]) == (INT32_MAX, INT32_MAX)
    assert parse_observation("o", observation(settled_at=MAX_EPOCH_MS))["settled_at"] == MAX_EPOCH_MS
    upload = parse_upload(
        "r",
        running(
            producer_attempt=INT32_MAX,
            upload_seq=INT64_MAX,
            live_log_total_count=INT64_MAX,
            live_node_progress={"n": {"completed": INT64_MAX, "completed_at": MAX_EPOCH_MS}},
        ),
    )
    assert (upload.producer_attempt, upload.upload_seq, upload.live_log_total_count) == (
        INT32_MAX,
        INT64_MAX,
        INT64_MAX,
    )
    assert pool_rules.check_version(" v1 ") == "v1"
    # Values kept only inside jsonb payloads have no column bound, as before.
    assert parse_events([{"type": "log.gap", "missing": HUGE}])[0].payload == {"missing": HUGE}
    progress = {"type": "progress", "status": "running", "updated_at": HUGE}
    assert parse_events([progress])[0].payload["updated_at"] == HUGE


def test_free_text_is_repaired_where_structure_would_be_refused() -> None:
    # An observation's error and a log line are free text; their NUL and lone surrogates become
    # U+FFFD. The observation's node id beside it is structure and still refused.
    assert parse_observation("o", observation(error="bad\x00 \ud800"))["error"] == "bad\ufffd \ufffd"
    assert parse_events([{"type": "log", "line": "\udfff"}])[0].payload == {"line": "\ufffd"}
    assert parse_upload("r", running(live_logs=["\ud800"])).live_logs == ("\ufffd",)


def test_a_non_ascii_digit_tail_is_no_invocation_seq() -> None:
    # '²'.isdigit() is True but int('²') raises: such an id used to crash the parse. ASCII digits
    # only, as a JavaScript runner's Number() reads them.
    assert invocation_seq_from_id("node:²") == 0
    assert invocation_seq_from_id("node:٣") == 0
    assert invocation_seq_from_id("node:12") == 12
    assert parse_observation("o", observation(invocation_id="node:²"))["invocation_seq"] == 0
