"""The warm pool through the real service, including concurrent claims from many clients."""

from __future__ import annotations

import asyncio

import httpx

from tests.acceptance.conftest import Server, new_id


def test_add_list_count_promote_ready_delete_clear(client: httpx.Client) -> None:
    pool = new_id("pool")
    base = f"/v1/pools/{pool}"
    added = client.post(base + "/entries", json={"version": "v1", "ids": ["a", "b", "c"]})
    assert added.json() == {"added": 3}
    assert client.get(base + "/counts", params={"version": "v1"}).json() == {"available": 0, "warming": 3}
    assert client.post(base + "/promote", json={"version": "v1", "ids": ["a", "b"]}).json() == {"promoted": 2}
    assert client.post(base + "/ready", json={"version": "v1", "id": "c"}).json() == {"ready": True}
    assert client.post(base + "/ready", json={"version": "v1", "id": "nope"}).json() == {"ready": False}
    entries = client.get(base + "/entries", params={"version": "v1"}).json()["entries"]
    assert [e["id"] for e in entries] == ["a", "b", "c"]
    assert all(e["state"] == "ready" and isinstance(e["ready_at"], int) for e in entries)
    assert set(entries[0]) >= {"id", "state", "created_at", "ready_at", "expires_at"}
    # A ready entry must be at least min_ready_age old to count as available.
    young = client.get(base + "/counts", params={"version": "v1", "min_ready_age_ms": 60_000}).json()
    assert young == {"available": 0, "warming": 3}
    assert client.post(base + "/delete", json={"version": "v1", "ids": ["a"]}).json() == {"deleted": 1}
    assert client.delete(base + "/entries").json() == {"deleted": 2}
    assert client.get(base + "/entries", params={"version": "v1"}).json() == {"entries": []}


def test_a_new_version_retires_the_old_entries(client: httpx.Client) -> None:
    pool = new_id("pool")
    client.post(f"/v1/pools/{pool}/entries", json={"version": "v1", "ids": ["old"], "ready": True})
    client.post(f"/v1/pools/{pool}/entries", json={"version": "v2", "ids": ["new"], "ready": True})
    assert client.get(f"/v1/pools/{pool}/entries", params={"version": "v1"}).json() == {"entries": []}


def test_claim_takes_the_newest_ready_entry_and_is_idempotent_per_run(client: httpx.Client) -> None:
    pool = new_id("pool")
    base = f"/v1/pools/{pool}"
    client.post(base + "/entries", json={"version": "v1", "ids": ["older"], "ready_at": 1_000})
    client.post(base + "/entries", json={"version": "v1", "ids": ["newer"], "ready": True})
    run_id = new_id("run")
    first = client.post(base + "/claim", json={"version": "v1", "run_id": run_id}).json()
    assert first == {"id": "newer", "available": 0, "warming": 0} or first["id"] == "newer"
    again = client.post(base + "/claim", json={"version": "v1", "run_id": run_id}).json()
    assert again["id"] == "newer"
    mapped = client.get(f"/v1/runs/{run_id}/mapping", params={"version": "v1"}).json()
    assert mapped["instance_id"] == "newer"


def test_bad_pool_input_is_422_naming_the_field(client: httpx.Client) -> None:
    base = f"/v1/pools/{new_id('pool')}"
    cases = [
        ({"version": "  ", "ids": ["a"]}, "version: "),
        ({"version": "v1", "ids": []}, "ids: "),
        ({"version": "v1", "ids": "a"}, "ids: "),
        ({"version": "v1", "ids": ["a"], "ttl_ms": "soon"}, "ttl_ms: "),
        ({"version": "v1", "ids": ["a"], "colour": "red"}, "colour: "),
        ({"ids": ["a"]}, "version: "),
    ]
    for body, prefix in cases:
        answer = client.post(base + "/entries", json=body)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["error"].startswith(prefix), (body, answer.json())
    assert client.get(base + "/entries", params={"version": "v1"}).json() == {"entries": []}


async def test_concurrent_claims_never_hand_out_one_instance_twice(server: Server) -> None:
    pool = new_id("pool")
    ids = [f"inst-{n}" for n in range(15)]
    limits = httpx.Limits(max_connections=60)
    async with server.async_client(limits=limits) as client:
        added = await client.post(
            f"/v1/pools/{pool}/entries", json={"version": "v1", "ids": ids, "ready": True}
        )
        assert added.json() == {"added": 15}

        async def claim(n: int) -> str | None:
            answer = await client.post(
                f"/v1/pools/{pool}/claim", json={"version": "v1", "run_id": f"{pool}-run-{n}"}
            )
            assert answer.status_code == 200, answer.text
            instance: str | None = answer.json()["id"]
            return instance

        got = await asyncio.gather(*(claim(n) for n in range(40)))
    claimed = [instance for instance in got if instance is not None]
    assert len(claimed) == len(set(claimed)), "an instance was handed out twice"
    assert sorted(claimed) == sorted(ids), "every ready instance is claimed exactly once"
    assert got.count(None) == 25
