"""The reporter's sanitizer against the ledger's own parser: whatever junk a runner produced, the
sanitized upload is accepted whole, text is repaired rather than lost, and well-formed values pass
through unchanged."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.ingest.upload import parse_upload
from reporter.sanitize import Sanitizer, sanitize_upload

JUNK_TEXT = st.text(
    alphabet=st.sampled_from(["a", " ", "\x00", "\ud800", "\udfff", "é", "/", "\n"]), max_size=8
)


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    JUNK_TEXT,
)
JUNK_JSON = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.dictionaries(JUNK_TEXT, SCALARS, max_size=3),
    st.integers(min_value=55, max_value=80).map(nested),
)
NODE = st.dictionaries(
    st.sampled_from(
        [
            "completed",
            "total",
            "started_at",
            "completed_at",
            "message",
            "artifact_table_namespace",
            "node_io",
            "x",
        ]
    ),
    st.one_of(
        JUNK_JSON, st.dictionaries(st.sampled_from(["error", "inputs", "\x00"]), JUNK_JSON, max_size=3)
    ),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(
    logs=st.lists(JUNK_TEXT, max_size=5),
    nodes=st.dictionaries(JUNK_TEXT, NODE, max_size=3),
    lifecycle=st.lists(JUNK_JSON, max_size=3),
    observations=st.lists(
        st.fixed_dictionaries({"activityId": JUNK_JSON, "observedAt": JUNK_JSON, "payload": JUNK_JSON}),
        max_size=3,
    ),
    replay=st.one_of(st.none(), st.lists(JUNK_TEXT, max_size=3)),
)
def test_any_sanitized_upload_is_accepted_whole_by_the_ledger(
    logs: list[str],
    nodes: dict[str, dict[str, Any]],
    lifecycle: list[Any],
    observations: list[dict[str, Any]],
    replay: list[str] | None,
) -> None:
    payload = {
        "run_id": "r",
        "upload_seq": 1,
        "status": "running",
        "producer_attempt": 1,
        "live_node_progress": nodes,
        "live_logs": logs,
        "live_log_total_count": len(logs),
        "dataset_lifecycle_events": lifecycle,
        "activity_observations": observations,
        "terminal_log_replay": None if replay is None else {"lines": replay, "dedupe_mode": "positional"},
        "last_checkpoint_at": 1,
    }
    clean = sanitize_upload(payload, Sanitizer("r"))
    parsed = parse_upload("r", clean)  # raises InvalidInput if anything would be refused
    assert len(parsed.live_logs) == len(logs)  # text is repaired, never dropped
    assert all("\x00" not in line for line in parsed.live_logs)


def test_well_formed_values_pass_unchanged() -> None:
    node = {
        "completed": 3,
        "total": 3,
        "started_at": 1,
        "completed_at": 2,
        "message": "3 / 3 rows processed",
        "node_io": {"error": None, "inputs": {"deep": nested(50)}},
    }
    payload = {
        "live_logs": ["ok"],
        "live_node_progress": {"n": node},
        "dataset_lifecycle_events": [{"datasetId": "d", "phase": "created"}],
        "activity_observations": [{"activityId": "a", "observedAt": 5}],
        "terminal_log_replay": None,
    }
    sanitizer = Sanitizer("r")
    assert sanitize_upload(payload, sanitizer) == payload
    assert not sanitizer.counts


def test_a_node_error_survives_even_when_the_rest_of_its_io_cannot_be_stored() -> None:
    payload = {
        "live_logs": [],
        "live_node_progress": {
            "n": {"completed_at": 1, "node_io": {"error": "boom\x00", "inputs": nested(70)}}
        },
        "dataset_lifecycle_events": [],
        "activity_observations": [],
    }
    sanitizer = Sanitizer("r")
    clean = sanitize_upload(payload, sanitizer)
    assert clean["live_node_progress"]["n"]["node_io"] == {"error": "boom\ufffd"}
    assert sanitizer.counts == {"node I/O value": 1}
