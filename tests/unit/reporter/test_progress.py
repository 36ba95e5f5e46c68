"""The node progress merge rule, the wire form and the messages."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.validate import NODE_FIELDS
from reporter.progress import (
    PROGRESS_FIELDS,
    NodeProgress,
    calls_in_flight_message,
    merge_patch,
    rows_processed_message,
)


def test_the_model_has_exactly_the_fields_the_ledger_checks() -> None:
    # A field only one side knows would be dropped by the sanitizer or never reach the wire.
    assert set(NodeProgress.__dataclass_fields__) == set(NODE_FIELDS)
    assert set(PROGRESS_FIELDS) == set(NODE_FIELDS) - {"updated_at"}


def test_patch_overrides_only_the_fields_it_names_and_refreshes_updated_at() -> None:
    node = NodeProgress(completed=5, failed=1, total=10, message="m", started_at=100, updated_at=100)
    merge_patch(node, {"completed": 6}, now_ms=200)
    assert node == NodeProgress(completed=6, failed=1, total=10, message="m", started_at=100, updated_at=200)


def test_none_in_a_patch_means_not_named() -> None:
    node = NodeProgress(total=10, message="keep")
    merge_patch(node, {"total": None, "message": None}, now_ms=1)
    assert node.total == 10
    assert node.message == "keep"


def test_unknown_patch_field_is_an_error() -> None:
    with pytest.raises(KeyError, match="totl"):
        merge_patch(NodeProgress(), {"totl": 3}, now_ms=1)


def test_stale_completed_at_is_dropped_when_completed_falls_below_total() -> None:
    node = NodeProgress(completed=10, total=10, completed_at=50)
    merge_patch(node, {"completed": 4}, now_ms=60)
    assert node.completed_at is None


def test_completed_at_survives_when_the_patch_names_it() -> None:
    node = NodeProgress(completed=10, total=10, completed_at=50)
    merge_patch(node, {"completed": 4, "failed": 6, "completed_at": 70}, now_ms=80)
    assert node.completed_at == 70


def test_completed_at_survives_without_a_total_or_when_complete() -> None:
    no_total = NodeProgress(completed=3, completed_at=50)
    merge_patch(no_total, {"message": "x"}, now_ms=60)
    assert no_total.completed_at == 50
    full = NodeProgress(completed=10, total=10, completed_at=50)
    merge_patch(full, {"message": "x"}, now_ms=60)
    assert full.completed_at == 50


def test_a_total_raised_later_reopens_a_completed_node() -> None:
    node = NodeProgress(completed=10, total=10, completed_at=50)
    merge_patch(node, {"total": 20}, now_ms=60)
    assert node.completed_at is None


def test_wire_form_is_snake_case_without_unset_fields_and_copies_node_io() -> None:
    io = {"attempt": 1}
    node = NodeProgress(completed=1, node_io=io, updated_at=9)
    wire = node.to_wire()
    assert wire == {"completed": 1, "node_io": {"attempt": 1}, "updated_at": 9}
    io["attempt"] = 2
    assert wire["node_io"] == {"attempt": 1}


_values = st.one_of(st.none(), st.integers(min_value=0, max_value=50))


@settings(max_examples=50, deadline=None)
@given(
    start=st.fixed_dictionaries({k: _values for k in ("completed", "failed", "total", "completed_at")}),
    patch=st.dictionaries(
        st.sampled_from(["completed", "failed", "total", "completed_at", "started_rows"]), _values
    ),
)
def test_merge_rule_property(start: dict[str, int | None], patch: dict[str, int | None]) -> None:
    node = NodeProgress(**start)
    before = NodeProgress(**start)
    merge_patch(node, patch, now_ms=999)
    for name in PROGRESS_FIELDS:
        if name == "completed_at":
            continue
        named = patch.get(name)
        assert getattr(node, name) == (named if named is not None else getattr(before, name))
    total, completed = node.total or 0, node.completed or 0
    if patch.get("completed_at") is not None:
        assert node.completed_at == patch["completed_at"]
    elif total > 0 and completed < total:
        assert node.completed_at is None
    else:
        assert node.completed_at == before.completed_at
    assert node.updated_at == 999


def test_messages() -> None:
    assert rows_processed_message(1234, 10_000) == "1,234 / 10,000 rows processed"
    assert rows_processed_message(-3, 10) == "0 / 10 rows processed"
    assert rows_processed_message(5, 0) is None
    assert rows_processed_message(5, None) is None
    assert calls_in_flight_message(25, 1234, 10_000) == "25 calls in flight · 1,234 / 10,000 rows processed"
    assert calls_in_flight_message(1500, 0, 0) == "1,500 calls in flight"


def test_a_time_without_a_state_drops_an_open_state_stored_before() -> None:
    """A node restored from the ledger as pending that a reconciliation completes is read by its
    times, as a node never restored would be; a settled state stays."""
    node = NodeProgress(state="pending")
    merge_patch(node, {"completed_at": 5, "completed": 3, "total": 3}, 6)
    assert (node.state, node.reason, node.completed_at) == (None, None, 5)
    started = NodeProgress(state="pending")
    merge_patch(started, {"started_at": 5}, 6)
    assert started.state is None
    running = NodeProgress(started_at=1, state="running")
    merge_patch(running, {"started_at": 1, "completed": 2}, 6)  # no end: still running
    assert running.state == "running"
    merge_patch(running, {"completed_at": 7}, 8)
    assert running.state is None
    failed = NodeProgress(started_at=1, completed_at=2, state="failed", reason="map failed")
    merge_patch(failed, {"completed": 2, "completed_at": 2}, 7)
    assert (failed.state, failed.reason) == ("failed", "map failed")
