"""Pool rules at their edges: the mappings claim and block write, what counts as available, and the
settings' bounds.

Each test names the rule it checks; with test_rules.py they are what the mutation run
(`python -m tests.mutation ledger/pool/rules.py`) measures.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from ledger.pool import rules
from ledger.pool.rules import Counts, PoolSettings, RunMapping
from tests.unit.pool.test_rules import MIN, NOW, S, entry, mapping

MAPPING_TTL = timedelta(milliseconds=S.mapping_ttl_ms)


def test_a_claim_writes_the_run_pool_instance_and_version() -> None:
    """The mapping a claim creates names the run, pool, instance and version, claimed now, for the
    mapping lifetime."""
    assert rules.claimed("r1", "p", "i1", "v2", NOW, S) == RunMapping(
        run_id="r1",
        pool="p",
        instance_id="i1",
        state="claimed",
        blocked_instance_id=None,
        version="v2",
        claimed_at=NOW,
        started_at=None,
        created_at=NOW,
        expires_at=NOW + MAPPING_TTL,
    )


def test_a_block_over_another_version_keeps_the_pool_and_restarts_the_claim() -> None:
    """A block replaces the run's mapping: it keeps the mapping's pool, names the run, the blocked
    instance and the new version, and (the old mapping being of another version) is claimed now;
    it lives the mapping lifetime from now."""
    written = rules.blocked(mapping(version="v0", pool="p"), "r1", "i1", "v1", NOW, S)
    assert written == RunMapping(
        run_id="r1",
        pool="p",
        instance_id="",
        state="blocked",
        blocked_instance_id="i1",
        version="v1",
        claimed_at=NOW,
        started_at=None,
        created_at=NOW,
        expires_at=NOW + MAPPING_TTL,
    )


def test_map_names_the_run() -> None:
    """What map writes names the run it maps."""
    written = rules.mapped(None, "r7", "i1", "v1", False, None, NOW, S)
    assert written is not None and written.run_id == "r7"


def test_promote_makes_an_entry_ready_now() -> None:
    """promote: the entry is ready, as of now."""
    promoted = rules.promoted(entry(), NOW)
    assert (promoted.state, promoted.ready_at) == ("ready", NOW)


def test_only_a_ready_entry_is_available() -> None:
    """An entry that is not in the ready state is warming, whatever its `ready_at` says."""
    not_ready = replace(entry(ready_ago=2 * MIN), state="warming")
    assert not rules.is_available(not_ready, NOW, MIN, S)
    assert rules.is_available(entry(ready_ago=2 * MIN), NOW, MIN, S)


def test_garbage_does_not_stop_the_count() -> None:
    """Entries after a garbage one (another version) are still counted."""
    entries = [entry("old", version="v0"), entry("a", ready_ago=2 * MIN), entry("b")]
    assert rules.count(entries, "v1", NOW, MIN, S) == Counts(available=1, warming=1)


def test_gc_bounds_are_taken_at_now() -> None:
    """GC runs as of now; ready entries older than the stale limit are stale."""
    bounds = rules.gc_bounds(NOW, S)
    assert (bounds.now, bounds.stale_before) == (NOW, NOW - timedelta(milliseconds=S.ready_max_age_ms))


def test_settings_accept_one_millisecond_and_a_default_ttl_equal_to_the_maximum() -> None:
    """Every limit is a positive number of milliseconds (1 is positive); the default TTL may equal
    the maximum."""
    settings = PoolSettings(default_ttl_ms=1, max_ttl_ms=1, ready_max_age_ms=1, mapping_ttl_ms=1)
    assert settings.default_ttl_ms == settings.max_ttl_ms == 1
