"""The warm pool through the real service, including concurrent claims from many clients, and one
instance in one place (a pool, or one live run) whatever the order of maps, adds and claims."""

from __future__ import annotations

import asyncio

import httpx
import psycopg
from psycopg.rows import dict_row

from tests.acceptance.conftest import Server, new_id
from tests.faults.invariants import instance_problems, places


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


# -- one instance, one place ------------------------------------------------------------------------


def _run_token(server: Server, run_id: str) -> dict[str, str]:
    answer = httpx.post(
        server.base_url + "/v1/tokens",
        json={"scope": "run", "run_id": run_id, "max_attempt": 1},
        headers=server.headers,
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def _refused(answer: httpx.Response, message: str) -> None:
    assert answer.status_code == 409, answer.text
    assert answer.json()["code"] == "instance_mapped"
    assert message in answer.json()["error"], answer.json()


def _pool_ids(client: httpx.Client, pool: str, version: str = "v1") -> list[str]:
    entries = client.get(f"/v1/pools/{pool}/entries", params={"version": version}).json()["entries"]
    return [e["id"] for e in entries]


def _mapped(client: httpx.Client, run_id: str) -> str | None:
    instance: str | None = client.get(f"/v1/runs/{run_id}/mapping", params={"version": "v1"}).json()[
        "instance_id"
    ]
    return instance


def test_a_map_never_takes_an_instance_out_of_a_pool_and_the_claim_hands_it_out_once(
    server: Server, client: httpx.Client
) -> None:
    pool, other_pool = new_id("pool"), new_id("pool")
    ready, warming = new_id("inst"), new_id("inst")
    run_a, run_b = new_id("run-a"), new_id("run-b")
    client.post(f"/v1/pools/{pool}/entries", json={"version": "v1", "ids": [ready], "ready": True})
    client.post(f"/v1/pools/{other_pool}/entries", json={"version": "v0", "ids": [warming]})
    # Map first: refused for the admin and for the run's own token, whichever pool, version or
    # state the entry has; the entry stays, and the run has no instance.
    for instance in (ready, warming):
        for headers in (server.headers, _run_token(server, run_a)):
            body = {"instance_id": instance, "version": "v1", "started": True}
            answer = httpx.put(
                f"{server.base_url}/v1/runs/{run_a}/mapping", json=body, headers=headers, timeout=30
            )
            _refused(answer, "is a live entry of a pool")
    assert _pool_ids(client, pool) == [ready] and _pool_ids(client, other_pool, "v0") == [warming]
    assert _mapped(client, run_a) is None
    # So the claim hands the instance to one run only, and another pool never hands it out.
    claimed = client.post(f"/v1/pools/{pool}/claim", json={"version": "v1", "run_id": run_b}).json()
    assert claimed["id"] == ready
    # Claim first: the map is refused just the same.
    answer = client.put(f"/v1/runs/{run_a}/mapping", json={"instance_id": ready, "version": "v1"})
    _refused(answer, "is mapped to another live run")
    assert (_mapped(client, run_a), _mapped(client, run_b)) == (None, ready)
    # The claiming run's own worker reports it started.
    started = {"instance_id": ready, "version": "v1", "started": True}
    assert client.put(f"/v1/runs/{run_b}/mapping", json=started).json() == {"mapped": True}


def test_adding_or_readying_an_instance_that_serves_a_live_run_is_refused_and_writes_nothing(
    client: httpx.Client,
) -> None:
    pool, other_pool = new_id("pool"), new_id("pool")
    busy, fresh, waiting = new_id("busy"), new_id("fresh"), new_id("waiting")
    run = new_id("run")
    assert client.put(f"/v1/runs/{run}/mapping", json={"instance_id": busy, "version": "v1"}).json() == {
        "mapped": True
    }
    client.post(f"/v1/pools/{other_pool}/entries", json={"version": "v1", "ids": [waiting]})
    refusals = [
        ("/entries", {"version": "v1", "ids": [fresh, busy], "ready": True}, "is mapped to a live run"),
        ("/promote", {"version": "v1", "ids": [busy]}, "is mapped to a live run"),
        ("/ready", {"version": "v1", "id": busy}, "is mapped to a live run"),
        ("/entries", {"version": "v1", "ids": [fresh, waiting]}, "is a live entry of another pool"),
    ]
    for path, body, message in refusals:
        _refused(client.post(f"/v1/pools/{pool}{path}", json=body), message)
    assert _pool_ids(client, pool) == [] and _pool_ids(client, other_pool) == [waiting]
    # Its own pool refreshes it; once the run ends, its instance may wait in a pool again.
    assert client.post(
        f"/v1/pools/{other_pool}/entries", json={"version": "v1", "ids": [waiting]}
    ).json() == {"added": 1}
    assert client.post("/v1/runs", json={"run_id": run}).status_code == 200
    assert client.put(f"/v1/runs/{run}/terminal", json={"status": "completed"}).status_code == 200
    added = client.post(
        f"/v1/pools/{pool}/entries", json={"version": "v1", "ids": [fresh, busy], "ready": True}
    )
    assert added.json() == {"added": 2}
    assert client.post(f"/v1/pools/{pool}/ready", json={"version": "v1", "id": busy}).json() == {
        "ready": True
    }


async def test_maps_adds_and_claims_racing_over_http_place_each_instance_once(
    server: Server, database_url: str
) -> None:
    pool, other_pool = new_id("pool"), new_id("pool")
    pooled = [f"{pool}-p{n}" for n in range(8)]
    fresh = [f"{pool}-f{n}" for n in range(8)]
    async with server.async_client(limits=httpx.Limits(max_connections=64)) as client:
        added = await client.post(
            f"/v1/pools/{pool}/entries", json={"version": "v1", "ids": pooled, "ready": True}
        )
        assert added.json() == {"added": 8}
        requests = [
            *(
                ("PUT", f"/v1/runs/{pool}-m{n}/mapping", {"instance_id": i, "version": "v1"})
                for n, i in enumerate(pooled + fresh)
            ),
            *(
                ("POST", f"/v1/pools/{pool}/entries", {"version": "v1", "ids": [i], "ready": True})
                for i in fresh
            ),
            *(
                ("POST", f"/v1/pools/{other_pool}/entries", {"version": "v1", "ids": [i]})
                for i in pooled + fresh
            ),
            *(
                ("POST", f"/v1/pools/{pool}/claim", {"version": "v1", "run_id": f"{pool}-c{n}"})
                for n in range(12)
            ),
        ]
        answers = await asyncio.gather(*(client.request(m, p, json=b) for m, p, b in requests))
    for answer in answers:
        assert answer.status_code in (200, 409), answer.text
        if answer.status_code == 409:
            assert answer.json()["code"] == "instance_mapped"
    claimed = [a.json()["id"] for a in answers if "/claim" in str(a.request.url) and a.json()["id"]]
    assert len(claimed) == len(set(claimed))
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        assert instance_problems(conn) == []
        # Every instance is in exactly one place: a pool, or one run.
        assert places(conn, pooled + fresh) == dict.fromkeys(pooled + fresh, 1)
