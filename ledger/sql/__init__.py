"""The current definition of every database function, trigger and view, in `.sql` files here.

Design note. Each file holds one object or a small family (a trigger function with its triggers),
headed by a comment saying why it exists, in the form the database keeps: `CREATE OR REPLACE`
statements, each ending with a `;` at the end of a line outside a `$$` body. Migrations run them
through `load`, in the fixed order of a release: `RELEASES` maps the revision of each migration that
loads files to the files it loads, dependencies first. The newest release (`HEAD`) is the schema's
current state, and a test holds the database migrated to head to exactly what its files define,
comparing the catalog's renderings (`pg_get_functiondef`, `pg_get_viewdef`, `pg_get_triggerdef`)
of both, nothing missing and nothing extra.

How a later change works. A migration must do on a fresh database in a year what it did the day it
shipped, so a file, once a shipped release loads it, never changes: `read` refuses a file whose
SHA-256 differs from `SHIPPED`, and a change is a new file instead.

- A function whose signature or meaning changes gets a new versioned name (`pool_claim` became
  `pool_claim_v2`) in a new file; its callers move to it, and the migration that loads it drops
  the old one (and its downgrade restores it). Callers never meet a function that changed under
  the name they know. An old one whose meaning still holds may stay beside the new one, for the
  code of the release before while a deploy rolls (`append_events_v2` beside `append_events_v3`,
  which only adds to it); the downgrade then drops the new one alone.
- A view keeps its name (people and `ledger_reader` query it), and so does `pool_windows()` (new
  numbers are meant to reach every reader); the new definition goes into a new file
  (`<name>_2.sql`) and the old file leaves the newest release.
- The migration adds a release under its own revision listing the then-current files (unchanged
  ones again: `CREATE OR REPLACE` with the same definition changes nothing), calls
  `load(op.execute, "<revision>")` and drops what the new files replace. A file that has left the
  newest release stays for the migrations that load it.
- A shipped migration is never edited: `0013` loads `RELEASES["0013"]` whatever came after.

The pool's default time windows have one home, `POOL_WINDOWS` below: Python reads it as data
(`pool_windows()`, the defaults of `ledger.pool.rules.PoolSettings`) and the head release's
`pool_windows` file, which defines `ledger.pool_windows()` for the views and the SQL functions, is
rendered from it (`render_pool_windows()`; a test holds the file to the rendering). A change of a
window is made in `POOL_WINDOWS`, rendered into a new file and loaded by a new migration.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Final

__all__ = [
    "HEAD",
    "POOL_WINDOWS",
    "RELEASES",
    "SHIPPED",
    "load",
    "pool_windows",
    "read",
    "render_pool_windows",
    "statements",
]

# Each revision that loads files, with the files in the order they are run: what a file refers to
# at creation (a view's relations and functions, a trigger's function) comes before it.
RELEASES: Final[Mapping[str, tuple[str, ...]]] = {
    "0013": (
        "pool_windows.sql",
        "append_events.sql",
        "run_event_partitions.sql",
        "run_events_follow_runs.sql",
        "run_overview.sql",
        "step_progress.sql",
        "stalled_runs.sql",
        "pool_tallies.sql",
        "pool_counts.sql",
        "pool_collect_v2.sql",
        "instance_runs.sql",
        "pool_claim_v2.sql",
        "pool_entry_conditions.sql",
        "pool_availability.sql",
    ),
    "0014": (
        "pool_windows.sql",
        "append_events.sql",
        "run_event_partitions.sql",
        "run_events_follow_runs.sql",
        "step_state.sql",
        "run_overview_2.sql",
        "step_progress_2.sql",
        "stalled_runs_2.sql",
        "pool_tallies.sql",
        "pool_counts.sql",
        "pool_collect_v2.sql",
        "instance_runs.sql",
        "pool_claim_v2.sql",
        "pool_entry_conditions.sql",
        "pool_availability.sql",
    ),
    "0015": (
        "pool_windows_2.sql",
        "append_events.sql",
        "run_event_partitions.sql",
        "run_events_follow_runs.sql",
        "step_state.sql",
        "run_overview_2.sql",
        "step_progress_2.sql",
        "stalled_runs_2.sql",
        "pool_tallies.sql",
        "pool_counts.sql",
        "pool_collect_v2.sql",
        "instance_runs.sql",
        "pool_claim_v2.sql",
        "pool_entry_conditions.sql",
        "pool_availability.sql",
    ),
    "0016": (
        "pool_windows_2.sql",
        "append_events_v2.sql",
        "run_event_partitions.sql",
        "run_events_follow_runs.sql",
        "step_state.sql",
        "run_overview_2.sql",
        "step_progress_2.sql",
        "stalled_runs_2.sql",
        "pool_tallies.sql",
        "pool_counts.sql",
        "pool_collect_v2.sql",
        "instance_runs.sql",
        "pool_claim_v2.sql",
        "pool_entry_conditions.sql",
        "pool_availability.sql",
        "event_log.sql",
    ),
    "0017": (
        "pool_windows_2.sql",
        "append_events_v2.sql",
        "append_events_v3.sql",
        "run_event_partitions.sql",
        "run_events_follow_runs.sql",
        "step_state.sql",
        "run_overview_2.sql",
        "step_progress_2.sql",
        "stalled_runs_2.sql",
        "pool_tallies.sql",
        "pool_counts.sql",
        "pool_collect_v2.sql",
        "instance_runs.sql",
        "pool_claim_v2.sql",
        "pool_entry_conditions.sql",
        "pool_availability.sql",
        "event_log.sql",
    ),
}

# The release the schema at head is made of.
HEAD: Final = max(RELEASES)

# The content of every file a release loads, as shipped.
SHIPPED: Final[Mapping[str, str]] = {
    "append_events.sql": "1e4711c99e6ecefe63e7923ae2f68321b8769625f40432317e95c96f234cba0d",
    "append_events_v2.sql": "7ee0be13bc9200cc6e9928357e98b0cbdff4ce01f145893708a8a0766c38882f",
    "append_events_v3.sql": "ad0d2b34ef4bdf0f64f150517373869d776774e4e08bdd7226de91253fa6c8ca",
    "event_log.sql": "df35d3be8d25dd2200a1b774679e0de5576d7cd4b10255f7952408a88fca8915",
    "instance_runs.sql": "5dd548e86867ccfb252b4726755fde093edefad491006d97c4044d0f4b9f153a",
    "pool_availability.sql": "f957549ba7f08009c36cf20f8770afd7abf3133ee596d917bc4425668b531ee9",
    "pool_claim_v2.sql": "447f2485c80c302c23941a176f91c886a11726fd221971cfd94b7f0665289637",
    "pool_collect_v2.sql": "3f0dfc5e64a48ab69b50a7d677d21aa2695006cba97814a7122bb282912529c6",
    "pool_counts.sql": "6ec5d78b797ad67ea63cf6862e89baa89bccbf946a5b150e3f68c27d3a327d1f",
    "pool_entry_conditions.sql": "fc9703fa6240354ed575cb9d9120a19207e812a64fa9782b36af1a273887b1ec",
    "pool_tallies.sql": "698d81e03831fafac13a75209eeba3813c234cf2db1e86add6782550153acec5",
    "pool_windows.sql": "da3362aeb1b051e1118088496f21d5c259a29ae3c0cbcc3ce7e54bd640096cec",
    "pool_windows_2.sql": "d6f0132a177da69129918f895f518a06cb49edca33446100db59d3e28d8798e7",
    "run_event_partitions.sql": "646d1e1378929c5d9a33d0617333e826d84c1c7608343c190c4b8ccd50bf4869",
    "run_events_follow_runs.sql": "1273aa242bc8885f0f8aaaf638baf504873683b967f2ac7b157dde38e9d69536",
    "run_overview.sql": "a5fe1211004172b97eb3da55d50a07273b8f16a0b1ae17308cbff70a76e1236c",
    "stalled_runs.sql": "e6f07dccf3e9023f799c26e28b0be939288b289cce18b050fc6a13a0ae968704",
    "step_progress.sql": "1ddc7a423215eaa65f9b7daaef0ab9903db922a514d42699228a076015c50ee7",
    "run_overview_2.sql": "d5cfaebec666e9964101c872e0532b2f5d7dc4f60584d7a7e6c2773d485e5ae8",
    "stalled_runs_2.sql": "3a63edb8d3eecde874701eab9bb84707ea67d85a392007444e4c694bfb72d557",
    "step_progress_2.sql": "ffabb12202dc2b58dc6a8f6e298454a8bda92eae8dc1a8d033a62c5541c764e8",
    "step_state.sql": "de7abf0acf9e55547be8890c66054ad2be87551761c2bec3e21afc1028104bf7",
}

# The pool's default windows in milliseconds, in the order `ledger.pool_windows()` returns them:
#   ready_max_age_ms  an entry ready longer than this is stale: its instance is presumed recycled
#   default_ttl_ms    an entry's lifetime when an add names none
#   max_ttl_ms        the longest lifetime an add may ask (and the largest minimum ready age)
#   mapping_ttl_ms    how long a run's mapping to its instance lives
#   min_ready_age_ms  how long an entry must have been ready to count, when a caller names none
POOL_WINDOWS: Final[Mapping[str, int]] = {
    "ready_max_age_ms": 7 * 60_000,
    "default_ttl_ms": 8 * 60_000,
    "max_ttl_ms": 8 * 60_000,
    "mapping_ttl_ms": 60 * 60_000,
    "min_ready_age_ms": 0,
}

_POOL_WINDOWS_HEADER = """\
-- The warm pool's time windows, as the database reads them. The views, and the claim and collect
-- functions for a window their caller leaves NULL, take the numbers from here, so "available" and
-- "stale" cannot mean one thing to the dashboard and another to the claim.
-- Rendered by `ledger.sql.render_pool_windows()` from `ledger.sql.POOL_WINDOWS`, the one home of
-- these numbers, which `ledger.pool.rules.PoolSettings` reads for its defaults: a change is made
-- there and rendered into a new file.
"""


def read(name: str) -> str:
    """The text of the file `name`; `ValueError` when it is not the content a release shipped."""
    text = resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    digest = hashlib.sha256(text.encode()).hexdigest()
    if SHIPPED.get(name) != digest:
        raise ValueError(
            f"ledger/sql/{name} is not the file a migration shipped (sha256 {digest}): a shipped file"
            " never changes, a change is a new file loaded by a new migration (see ledger.sql)"
        )
    return text


def statements(text: str) -> list[str]:
    """The statements of a file: each ends with a `;` at the end of a line outside a `$$` body."""
    found: list[str] = []
    lines: list[str] = []
    quoted = False
    for line in text.splitlines():
        lines.append(line)
        if line.lstrip().startswith("--"):
            continue
        quoted ^= line.count("$$") % 2 == 1
        if not quoted and line.rstrip().endswith(";"):
            found.append("\n".join(lines).rstrip().removesuffix(";"))
            lines = []
    if quoted or not _only_comments(lines):
        raise ValueError("a statement does not end with a ';' at the end of a line outside $$")
    return found


def _only_comments(lines: list[str]) -> bool:
    return all(not line.strip() or line.lstrip().startswith("--") for line in lines)


def load(execute: Callable[[str], object], revision: str, *, reader: Callable[[str], str] = read) -> None:
    """Run the files of the release `revision`, statement by statement, through `execute`."""
    for name in RELEASES[revision]:
        for statement in statements(reader(name)):
            execute(statement)


def pool_windows() -> dict[str, int]:
    """The pool's default windows in milliseconds, by name, as `ledger.pool_windows()` returns them."""
    return dict(POOL_WINDOWS)


def render_pool_windows() -> str:
    """The text of the file defining `ledger.pool_windows()` from `POOL_WINDOWS`."""
    outs = ",\n".join(f"    OUT {name} bigint" for name in POOL_WINDOWS)
    columns = ",\n".join(f"        {value}::bigint AS {name}" for name, value in POOL_WINDOWS.items())
    return (
        f"{_POOL_WINDOWS_HEADER}CREATE OR REPLACE FUNCTION ledger.pool_windows(\n{outs}\n)\n"
        f"LANGUAGE sql IMMUTABLE PARALLEL SAFE\nAS $$\n    SELECT\n{columns}\n$$;\n"
    )
