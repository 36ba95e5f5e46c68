"""The pool's and run mappings' pure rules (ledger.pool.rules), edge by edge."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ledger.errors import InvalidInput
from ledger.pool import rules
from ledger.pool.rules import Counts, PoolEntry, PoolSettings, RunMapping

S = PoolSettings()
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
MIN = timedelta(minutes=1)
US = timedelta(microseconds=1)


def entry(
    id: str = "a",
    version: str = "v1",
    ready_ago: timedelta | None = None,
    expires_in: timedelta = 5 * MIN,
    created_ago: timedelta = 2 * MIN,
) -> PoolEntry:
    return PoolEntry(
        id=id,
        version=version,
        state="warming" if ready_ago is None else "ready",
        created_at=NOW - created_ago,
        ready_at=None if ready_ago is None else NOW - ready_ago,
        expires_at=NOW + expires_in,
    )


def mapping(**changes: Any) -> RunMapping:
    base = RunMapping(
        run_id="r1",
        pool="p",
        instance_id="i1",
        state="claimed",
        blocked_instance_id=None,
        version="v1",
        claimed_at=NOW - 5 * MIN,
        started_at=None,
        created_at=NOW - 6 * MIN,
        expires_at=NOW + 10 * MIN,
    )
    return replace(base, **changes)


# -- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: rules.check_pool(""), "pool"),
        (lambda: rules.check_pool("  "), "pool"),
        (lambda: rules.check_pool(3), "pool"),
        (lambda: rules.check_version(None), "version"),
        (lambda: rules.check_version(" \t"), "version"),
        (lambda: rules.check_id("run_id", ""), "run_id"),
        (lambda: rules.check_ids([]), "ids"),
        (lambda: rules.check_ids("abc"), "ids"),
        (lambda: rules.check_ids(None), "ids"),
        (lambda: rules.check_ids(["a", 7]), "ids[1]"),
        (lambda: rules.check_ids(["a", ""]), "ids[1]"),
        (lambda: rules.ttl(-1, S), "ttl_ms"),
        (lambda: rules.ttl("60000", S), "ttl_ms"),
        (lambda: rules.ttl(True, S), "ttl_ms"),
        (lambda: rules.ttl(float("nan"), S), "ttl_ms"),
        (lambda: rules.ttl(float("inf"), S), "ttl_ms"),
        (lambda: rules.min_ready_age(-0.5, S), "min_ready_age_ms"),
        (lambda: rules.min_ready_age("1", S), "min_ready_age_ms"),
        (lambda: rules.ready_request("yes", None), "ready"),
        (lambda: rules.ready_request(False, 1000), "ready_at"),
        (lambda: rules.ready_request(None, -1), "ready_at"),
        (lambda: rules.ready_request(True, 1e20), "ready_at"),
        (lambda: rules.check_flag("started", 1), "started"),
        (lambda: PoolSettings(max_ttl_ms=0), "max_ttl_ms"),
        (lambda: PoolSettings(default_ttl_ms=10, max_ttl_ms=5), "default_ttl_ms"),
        (lambda: PoolSettings(min_ready_age_ms=-1), "min_ready_age_ms"),
        (lambda: PoolSettings(min_ready_age_ms="5"), "min_ready_age_ms"),  # type: ignore[arg-type]
    ],
)
def test_bad_input_names_the_field(call: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        call()
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")


def test_names_are_trimmed_and_ids_kept_deduplicated_in_order() -> None:
    assert rules.check_version("  v1 ") == "v1"
    assert rules.check_pool(" default ") == "default"
    assert rules.check_id("run_id", " r 1 ") == " r 1 "
    assert rules.check_ids(("b", "a", "b")) == ["b", "a"]


def test_a_minimum_ready_age_of_zero_is_allowed() -> None:
    assert PoolSettings(min_ready_age_ms=0).min_ready_age_ms == 0


def test_ttl_defaults_clamps_and_floors() -> None:
    assert rules.ttl(None, S) == 8 * MIN
    assert rules.ttl(0, S) == 8 * MIN  # 0 (also below 1 ms, floored) means the default
    assert rules.ttl(0.4, S) == 8 * MIN
    assert rules.ttl(1.9, S) == timedelta(milliseconds=1)
    assert rules.ttl(60_000, S) == MIN
    assert rules.ttl(10**12, S) == 8 * MIN
    assert rules.ttl(10**6, PoolSettings(default_ttl_ms=1000, max_ttl_ms=2000)) == timedelta(seconds=2)


def test_min_ready_age_is_clamped_to_zero_and_max_ttl() -> None:
    assert rules.min_ready_age(None, S) == timedelta(0)
    assert rules.min_ready_age(0, S) == timedelta(0)
    assert rules.min_ready_age(1500.7, S) == timedelta(milliseconds=1500)
    assert rules.min_ready_age(10**15, S) == 8 * MIN


def test_ready_request() -> None:
    at = datetime(2025, 12, 31, tzinfo=UTC)
    assert rules.ready_request(None, None).ready_at(NOW) is None
    assert rules.ready_request(False, None).ready_at(NOW) is None
    assert rules.ready_request(True, None).ready_at(NOW) == NOW
    assert rules.ready_request(True, at.timestamp() * 1000).ready_at(NOW) == at
    assert rules.ready_request(None, at.timestamp() * 1000).ready_at(NOW) == at


# -- GC and availability ---------------------------------------------------------------------------


def test_garbage_is_expired_stale_ready_or_another_version() -> None:
    assert not rules.is_garbage(entry(ready_ago=7 * MIN), "v1", NOW, S)  # exactly at the limit
    assert rules.is_garbage(entry(ready_ago=7 * MIN + US), "v1", NOW, S)
    assert not rules.is_garbage(entry(ready_ago=None, created_ago=60 * MIN), "v1", NOW, S)
    assert rules.is_garbage(entry(expires_in=timedelta(0)), "v1", NOW, S)
    assert not rules.is_garbage(entry(expires_in=US), "v1", NOW, S)
    assert rules.is_garbage(entry(version="v0"), "v1", NOW, S)


def test_availability_window() -> None:
    age = timedelta(seconds=30)
    assert rules.is_available(entry(ready_ago=30 * timedelta(seconds=1)), NOW, age, S)
    assert not rules.is_available(entry(ready_ago=age - US), NOW, age, S)
    assert rules.is_available(entry(ready_ago=7 * MIN), NOW, age, S)
    assert not rules.is_available(entry(ready_ago=7 * MIN + US), NOW, age, S)
    assert not rules.is_available(entry(ready_ago=None), NOW, timedelta(0), S)
    assert not rules.is_available(entry(ready_ago=-MIN), NOW, timedelta(0), S)  # ready in the future
    assert not rules.is_available(entry(ready_ago=MIN, expires_in=timedelta(0)), NOW, timedelta(0), S)


def test_count_leaves_garbage_out_and_calls_the_rest_warming() -> None:
    entries = [
        entry("a", ready_ago=MIN),
        entry("b", ready_ago=10 * timedelta(seconds=1)),
        entry("c"),
        entry("d", ready_ago=8 * MIN),  # stale
        entry("e", version="v2", ready_ago=MIN),
        entry("f", ready_ago=MIN, expires_in=-MIN),
    ]
    assert rules.count(entries, "v1", NOW, timedelta(0), S) == Counts(2, 1)
    assert rules.count(entries, "v1", NOW, timedelta(seconds=30), S) == Counts(1, 2)


def test_claim_takes_the_newest_available_and_breaks_ties_by_id() -> None:
    entries = [
        entry("old", ready_ago=3 * MIN),
        entry("z", ready_ago=MIN),
        entry("y", ready_ago=MIN),
        entry("fresh", ready_ago=timedelta(seconds=5)),
        entry("stale", ready_ago=8 * MIN),
        entry("other", version="v2", ready_ago=timedelta(seconds=1)),
        entry("warm"),
    ]

    def pick(min_age: timedelta) -> str | None:
        chosen = rules.choose_claim(entries, "v1", NOW, min_age, S)
        return None if chosen is None else chosen.id

    assert pick(timedelta(0)) == "fresh"
    assert pick(timedelta(seconds=30)) == "y"
    assert pick(2 * MIN) == "old"
    assert pick(4 * MIN) is None
    ordered = sorted((e for e in entries if e.ready_at is not None), key=rules.claim_order)
    assert [e.id for e in ordered][:4] == ["other", "fresh", "y", "z"]


# -- add, promote, ready ---------------------------------------------------------------------------


def test_readd_keeps_created_at_and_ready_at_and_restarts_the_lifetime() -> None:
    old = entry(ready_ago=MIN, created_ago=3 * MIN)
    again = rules.added(old, "a", "v1", NOW, 2 * MIN, None)
    assert again == replace(old, expires_at=NOW + 2 * MIN)
    asked = rules.added(old, "a", "v1", NOW, 2 * MIN, NOW - timedelta(seconds=5))
    assert (asked.state, asked.ready_at, asked.created_at) == (
        "ready",
        NOW - timedelta(seconds=5),
        old.created_at,
    )


def test_add_starts_fresh_for_a_new_version_or_an_expired_entry() -> None:
    new = rules.added(None, "a", "v1", NOW, MIN, None)
    assert (new.state, new.created_at, new.ready_at, new.expires_at) == ("warming", NOW, None, NOW + MIN)
    other = rules.added(entry(version="v0", ready_ago=MIN), "a", "v1", NOW, MIN, None)
    assert (other.state, other.created_at, other.ready_at) == ("warming", NOW, None)
    expired = entry(ready_ago=MIN, expires_in=timedelta(0))
    again = rules.added(expired, "a", "v1", NOW, MIN, None)
    assert (again.state, again.ready_at, again.created_at) == ("warming", None, expired.created_at)
    warming = rules.added(entry(), "a", "v1", NOW, MIN, None)
    assert warming.state == "warming"


def test_promote_resets_ready_at_but_ready_keeps_an_earlier_one() -> None:
    ready = entry(ready_ago=MIN)
    assert rules.promoted(ready, NOW).ready_at == NOW
    assert rules.marked_ready(ready, NOW).ready_at == NOW - MIN
    warm = rules.marked_ready(entry(), NOW)
    assert (warm.state, warm.ready_at) == ("ready", NOW)


# -- run mappings ---------------------------------------------------------------------------------


def test_expired_mappings_count_as_absent() -> None:
    assert rules.live(mapping(expires_at=NOW), NOW) is None
    assert rules.live(mapping(expires_at=NOW + US), NOW) is not None
    assert rules.live(None, NOW) is None


def test_claim_is_answered_by_a_same_version_mapping() -> None:
    assert rules.existing_claim(None, "v1") is None
    assert rules.existing_claim(mapping(version="v0"), "v1") is None
    assert rules.existing_claim(mapping(), "v1") == rules.ExistingClaim("i1")
    started = mapping(state="started", started_at=NOW)
    assert rules.existing_claim(started, "v1") == rules.ExistingClaim("i1")
    blocked = mapping(state="blocked", instance_id="", blocked_instance_id="i1")
    assert rules.existing_claim(blocked, "v1") == rules.ExistingClaim(None)
    made = rules.claimed("r1", "p", "i9", "v1", NOW, S)
    assert (made.state, made.claimed_at, made.created_at) == ("claimed", NOW, NOW)
    assert made.expires_at == NOW + 60 * MIN


def test_map_is_refused_only_when_blocked_for_that_instance() -> None:
    blocked = mapping(state="blocked", instance_id="", blocked_instance_id="i1")
    assert rules.mapped(blocked, "r1", "i1", "v1", True, None, NOW, S) is None
    other = rules.mapped(blocked, "r1", "i2", "v1", False, None, NOW, S)
    assert other is not None and (other.instance_id, other.state) == ("i2", "claimed")
    assert other.claimed_at == blocked.claimed_at and other.created_at == blocked.created_at
    new_version = rules.mapped(blocked, "r1", "i1", "v2", False, None, NOW, S)
    assert new_version is not None and new_version.created_at == NOW and new_version.claimed_at == NOW


def test_map_keeps_the_first_start_and_extends_the_lifetime() -> None:
    first = rules.mapped(mapping(), "r1", "i1", "v1", True, None, NOW, S)
    assert first is not None
    assert (first.state, first.started_at, first.claimed_at) == ("started", NOW, NOW - 5 * MIN)
    later = NOW + MIN
    again = rules.mapped(first, "r1", "i1", "v1", False, None, later, S)
    assert again is not None and (again.state, again.started_at) == ("started", NOW)
    assert again.expires_at == later + 60 * MIN
    moved = rules.mapped(first, "r1", "i2", "v1", False, None, later, S)
    assert moved is not None and (moved.state, moved.started_at) == ("claimed", None)


def test_map_pool_is_given_else_kept_else_default() -> None:
    assert rules.mapped(None, "r1", "i1", "v1", False, None, NOW, S).pool == "default"  # type: ignore[union-attr]
    assert rules.mapped(mapping(), "r1", "i1", "v1", False, None, NOW, S).pool == "p"  # type: ignore[union-attr]
    assert rules.mapped(mapping(), "r1", "i1", "v1", False, "q", NOW, S).pool == "q"  # type: ignore[union-attr]


def test_block_loses_only_to_a_start_on_that_instance() -> None:
    started = mapping(state="started", started_at=NOW - MIN)
    assert rules.blocked(started, "r1", "i1", "v1", NOW, S) is None
    assert rules.blocked(started, "r1", "i1", "v2", NOW, S) is not None
    over = rules.blocked(started, "r1", "i2", "v1", NOW, S)
    assert over is not None
    assert (over.state, over.instance_id, over.blocked_instance_id) == ("blocked", "", "i2")
    assert (over.claimed_at, over.created_at, over.started_at) == (started.claimed_at, NOW, None)
    fresh = rules.blocked(None, "r1", "i1", "v1", NOW, S)
    assert fresh is not None and (fresh.pool, fresh.claimed_at) == ("default", NOW)


def test_resolution() -> None:
    assert rules.resolution(None, "v1", NOW) == rules.Resolution(None, None, delete=False)
    assert rules.resolution(mapping(version="v0"), "v1", NOW).delete
    assert rules.resolution(mapping(expires_at=NOW), "v1", NOW) == rules.Resolution(None, None, delete=True)
    started = mapping(state="started", started_at=NOW - MIN)
    assert rules.resolution(started, "v1", NOW) == rules.Resolution("i1", NOW - MIN, delete=False)
    blocked = mapping(state="blocked", instance_id="", blocked_instance_id="i1")
    assert rules.resolution(blocked, "v1", NOW) == rules.Resolution(None, None, delete=False)


# -- one instance, one place -----------------------------------------------------------------------


@pytest.mark.parametrize("ready_ago", [None, 2 * MIN, 10 * 24 * 60 * MIN])
def test_an_entry_holds_its_instance_until_it_expires_ready_warming_or_stale(
    ready_ago: timedelta | None,
) -> None:
    assert rules.holds_instance(entry(ready_ago=ready_ago, expires_in=US), NOW)
    assert not rules.holds_instance(entry(ready_ago=ready_ago, expires_in=timedelta(0)), NOW)
    assert not rules.holds_instance(entry(ready_ago=ready_ago, expires_in=-US), NOW)
    # Of another version it is still there (for a claim of its version, or an add to refresh).
    assert rules.holds_instance(entry(version="v0", ready_ago=ready_ago), NOW)


def test_a_mapping_serves_its_run_while_live_with_an_instance_and_the_run_not_ended() -> None:
    assert rules.serves_live_run(mapping(), False, NOW)
    assert rules.serves_live_run(mapping(expires_at=NOW + US), False, NOW)
    assert not rules.serves_live_run(mapping(), True, NOW)  # the run ended
    assert not rules.serves_live_run(mapping(expires_at=NOW), False, NOW)  # the mapping expired
    assert not rules.serves_live_run(mapping(expires_at=NOW), True, NOW)
    blocked = mapping(state="blocked", instance_id="", blocked_instance_id="i1")
    assert not rules.serves_live_run(blocked, False, NOW)  # a blocked run has no instance
    assert not rules.serves_live_run(mapping(instance_id="", expires_at=NOW), False, NOW)
