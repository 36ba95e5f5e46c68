"""Long-polls woken together over HTTP: each reader gets the bytes of its own page, and those are the
bytes the response model writes, although one read and one encoding serve every reader of a page."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import TypeAdapter

from ledger import shapes
from tests.acceptance.conftest import Server, new_id
from tests.acceptance.rawhttp import get_raw
from tests.acceptance.test_events_api import metric_value

PAGE = TypeAdapter(shapes.EventPage)


async def waiting(server: Server) -> float:
    async with server.async_client() as probe:
        return metric_value((await probe.get("/metrics")).text, "ledger_waiters")


async def wake_groups(
    server: Server, run_id: str, groups: list[tuple[int, int]], wake: list[dict[str, Any]], per_group: int
) -> dict[tuple[int, int], list[tuple[int, bytes]]]:
    """`per_group` long-polls for each (after, limit), woken by appending `wake`: their answers."""
    before = await waiting(server)
    polls = {
        key: [
            asyncio.create_task(
                get_raw(
                    server.base_url,
                    f"/v1/runs/{run_id}/events?after={key[0]}&limit={key[1]}&timeout_ms=30000",
                    server.token,
                )
            )
            for _ in range(per_group)
        ]
        for key in groups
    }
    for _ in range(600):
        if await waiting(server) >= before + per_group * len(groups):
            break
        await asyncio.sleep(0.05)
    else:
        # Without every poll waiting, a late one finds the event on its first read: no wake tested.
        raise AssertionError("the long-polls never all waited")
    async with server.async_client() as writer:
        answer = await writer.post(f"/v1/runs/{run_id}/events", json={"events": wake})
        assert answer.status_code == 200, answer.text
    return {key: list(await asyncio.gather(*tasks)) for key, tasks in polls.items()}


async def check(server: Server, run_id: str, answers: dict[tuple[int, int], list[tuple[int, bytes]]]) -> None:
    for (after, limit), got in answers.items():
        # What a reader asking now, alone, gets: the run has not moved since the wake-up.
        async with server.async_client() as http:
            alone = await http.get(f"/v1/runs/{run_id}/events", params={"after": after, "limit": limit})
        assert alone.status_code == 200
        assert all(status == 200 and body == alone.content for status, body in got), (after, limit)
        # And the bytes the response model writes for that content.
        assert alone.content == PAGE.dump_json(PAGE.validate_python(json.loads(alone.content)))


async def test_long_polls_of_different_cursors_and_limits_woken_together_get_their_own_bytes(
    server: Server,
) -> None:
    run_id = new_id("fan")
    first = [{"type": "log", "line": line} for line in ("a", "b", "c")]
    async with server.async_client() as http:
        assert (await http.post("/v1/runs", json={"run_id": run_id})).status_code == 200
        assert (await http.post(f"/v1/runs/{run_id}/events", json={"events": first})).status_code == 200

    wake = [{"type": "log", "line": "héllo ✓"}, {"type": "log", "line": '\u2028 "quoted" \\ </script>'}]
    answers = await wake_groups(server, run_id, [(3, 1000), (3, 1), (4, 1000)], wake, per_group=8)
    await check(server, run_id, answers)
    assert [e["seq"] for e in json.loads(answers[(3, 1000)][0][1])["events"]] == [4, 5]
    assert [e["seq"] for e in json.loads(answers[(3, 1)][0][1])["events"]] == [4]
    assert [e["seq"] for e in json.loads(answers[(4, 1000)][0][1])["events"]] == [5]

    # The run ends: a terminal state with a result jsonb keeps exactly (beyond 64 bits, floats, unicode).
    result = {
        "big": 2**70,
        "negative": -(2**65),
        "ratio": 0.1,
        "tiny": 1e-300,
        "text": "ü\t\u2028",
        "list": [1.5, None],
    }
    terminal = [{"type": "terminal", "status": "completed", "result": result}]
    answers = await wake_groups(server, run_id, [(5, 1000), (5, 1)], terminal, per_group=8)
    await check(server, run_id, answers)
    page = json.loads(answers[(5, 1)][0][1])
    assert page["terminal"]["result"] == result and page["events"][0]["type"] == "terminal"
