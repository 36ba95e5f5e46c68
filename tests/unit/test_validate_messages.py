"""Refusals a caller reads word for word: the field and what is wrong with it."""

from __future__ import annotations

import pytest

from ledger import validate
from ledger.errors import InvalidInput


@pytest.mark.parametrize("run_id", [".", ".."])
def test_a_new_run_named_as_a_url_dot_segment_is_refused_saying_why(run_id: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        validate.new_run_id("run_id", run_id)
    assert (refused.value.field, refused.value.problem) == (
        "run_id",
        "must not be '.' or '..' (a URL path cannot address it)",
    )


@pytest.mark.parametrize("state", ["done", "RUNNING", 1])
def test_a_step_state_outside_the_list_is_refused_naming_the_states(state: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        validate.node_field("live_node_progress.n.state", "state", state)
    assert str(refused.value) == (
        "live_node_progress.n.state: must be one of pending, running, completed, failed, cancelled, "
        f"skipped, got {state!r}"
    )


@pytest.mark.parametrize("state", validate.STEP_STATES)
def test_every_step_state_of_the_list_is_taken(state: str) -> None:
    assert validate.node_field("live_node_progress.n.state", "state", state) == state


def test_a_step_reason_that_is_not_text_is_refused_naming_its_field() -> None:
    with pytest.raises(InvalidInput) as refused:
        validate.node_field("live_node_progress.n.reason", "reason", 5)
    assert refused.value.field == "live_node_progress.n.reason"
