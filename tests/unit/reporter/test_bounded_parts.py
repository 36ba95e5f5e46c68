"""What only one part of a split upload carries: the contract's step list only the first (the ledger
keeps it for the parts after it), the reason an interrupted run stopped only the last (with its
status)."""

from __future__ import annotations

from reporter.bounded import split_upload
from tests.unit.reporter.test_bounded import big_upload


def test_the_step_list_travels_only_in_the_first_part() -> None:
    parts = split_upload({**big_upload("completed"), "pipeline_steps": ["load", "enrich"]}, 4_096)
    assert len(parts) > 2
    assert [p.get("pipeline_steps") for p in parts] == [["load", "enrich"]] + [None] * (len(parts) - 1)


def test_the_reason_an_interrupted_run_stopped_travels_only_in_the_last_part() -> None:
    reason = {"reason": "SIGTERM", "message": "the worker was stopped"}
    body = {**big_upload("interrupted"), "interruption": reason}
    del body["error"]
    parts = split_upload(body, 4_096)
    assert len(parts) > 2
    assert [p.get("interruption") for p in parts] == [None] * (len(parts) - 1) + [reason]
    assert [p["status"] for p in parts] == ["running"] * (len(parts) - 1) + ["interrupted"]
