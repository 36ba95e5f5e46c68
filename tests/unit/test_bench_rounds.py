"""`python -m bench --rounds N`: each row is its median round, judged by the ratio, with that
round's own figures (a row is one measurement, never a mix of rounds)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import suite


def rate(name: str, ours: float, baseline: float = 100.0) -> suite.Measure:
    return suite.Measure(name, "events/s", "rate", ours, baseline, "raw")


def latency(name: str, ours: float, baseline: float = 1.0) -> suite.Measure:
    return suite.Measure(name, "ms", "latency", ours, baseline, "raw")


def test_each_row_is_the_round_whose_ratio_is_the_median_with_its_own_figures() -> None:
    rounds = [
        [rate("append", 90, 100), latency("wake", 4.0)],
        [rate("append", 50, 40), latency("wake", 1.0)],  # the append's best ratio, the wake's best
        [rate("append", 30, 50), latency("wake", 2.0)],
    ]
    rows, spread = suite.median_rows(rounds)
    assert [row.measure for row in rows] == ["append", "wake"]
    assert (rows[0].ours, rows[0].baseline) == (90, 100)  # ratios 0.9, 1.25, 0.6: the middle is 0.9
    assert rows[1].ours == 2.0  # latency ratios 0.25, 1.0, 0.5: the middle is 0.5
    assert spread == {"append": [0.9, 1.25, 0.6], "wake": [0.25, 1.0, 0.5]}


def test_an_even_count_takes_the_lower_middle_and_one_round_is_itself() -> None:
    rows, _ = suite.median_rows([[rate("a", 10)], [rate("a", 40)], [rate("a", 20)], [rate("a", 30)]])
    assert rows[0].ours == 20
    only = rate("a", 7)
    assert suite.median_rows([[only]]) == ([only], {"a": [0.07]})


def test_the_table_shows_every_round_only_when_asked() -> None:
    rows, spread = suite.median_rows([[rate("a", 10)], [rate("a", 40)], [rate("a", 20)]])
    assert suite.table_rows(rows) == [("a", "20 events/s", "100 events/s", "0.20")]
    every = ("a", "20 events/s", "100 events/s", "0.20", "0.10 / 0.40 / 0.20")
    assert suite.table_rows(rows, spread) == [every]
