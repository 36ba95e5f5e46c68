"""Pools opening connections on threads of their own leave the global `random` alone.

Hypothesis seeds the global generator for each example and fails the example as flaky when its
state changes mid-draw; the session's services open pool connections at any moment, so the test
suite gives psycopg_pool a generator of its own (tests/conftest.py). This pins that it still takes.
"""

from __future__ import annotations

import random

from psycopg_pool import ConnectionPool


def test_opening_pool_connections_leaves_the_global_random_state_alone(database_url: str) -> None:
    before = random.getstate()
    with ConnectionPool(database_url, min_size=3, max_size=3, open=False) as pool:
        pool.open(wait=True, timeout=60)  # three connections, each with a jittered lifetime
        assert pool.get_stats()["pool_size"] == 3
    assert random.getstate() == before
