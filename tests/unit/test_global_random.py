"""The product never draws from the process's global `random`.

A library that moves its host's shared generator changes what the host's seeded code draws next;
Hypothesis, which seeds that generator for each example and compares its state around each draw,
fails the example as flaky when a retry or a cursor of ours jittered on another thread meanwhile.
Our jitter comes from generators of our own (`random.Random()`), and tenacity's waits that draw
from the global one are not used.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("ledger", "reporter")
# What the `random` module offers besides functions of its global generator.
OWN_GENERATORS = frozenset({"Random", "SystemRandom"})
# tenacity's waits that call the global `random`.
GLOBAL_WAITS = frozenset(
    {"wait_random", "wait_random_exponential", "wait_full_jitter", "wait_exponential_jitter"}
)


def _use(node: ast.AST) -> list[str]:
    """What `node` takes from the global generator, if anything."""
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "random" and node.attr not in OWN_GENERATORS:
            return [f"random.{node.attr}"]
        return [f".{node.attr}"] if node.attr in GLOBAL_WAITS else []
    if isinstance(node, ast.ImportFrom) and node.module == "random":
        return [f"from random import {a.name}" for a in node.names if a.name not in OWN_GENERATORS]
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tenacity"):
        return [f"from tenacity import {a.name}" for a in node.names if a.name in GLOBAL_WAITS]
    return []


def global_draws(source: str) -> list[str]:
    """Each use in `source` of the global generator, in line order: `random.f` and
    `from random import f` for an `f` that is not a generator class, and tenacity's waits that
    draw from it."""
    nodes = sorted(ast.walk(ast.parse(source)), key=lambda node: getattr(node, "lineno", 0))
    return [f"line {node.lineno}: {use}" for node in nodes for use in _use(node)]


def test_the_finder_sees_each_way_of_reaching_the_global_generator() -> None:
    source = "\n".join(
        [
            "import random",
            "random.uniform(0, 1)",
            "from random import randint, Random",
            "from tenacity import wait_random_exponential, stop_after_attempt",
            "tenacity.wait_full_jitter()",
            "own = random.Random()",
            "safe = random.SystemRandom()",
        ]
    )
    assert global_draws(source) == [
        "line 2: random.uniform",
        "line 3: from random import randint",
        "line 4: from tenacity import wait_random_exponential",
        "line 5: .wait_full_jitter",
    ]


def test_no_module_of_ours_draws_from_the_global_random() -> None:
    offenders = {
        str(path.relative_to(REPO)): draws
        for root in SCANNED
        for path in sorted((REPO / root).rglob("*.py"))
        if (draws := global_draws(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}
