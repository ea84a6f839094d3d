"""Tolerances of recorded numbers are measured: the spread across thread counts and seeds, and a share of each
number's own bootstrap interval, never below the base rel/abs."""
from __future__ import annotations

import pytest

from cfkit.running.expected import INTERVAL_SHARE, THREAD_FACTOR, mismatches, tolerances

VALUES = {"cem/4->9/cout": 0.05, "cem/4->9/cout_lo": 0.02, "cem/4->9/cout_hi": 0.08, "errors/n": 6.0,
          "controls/mask_kept": 0.16}


def test_each_number_gets_the_largest_of_its_measured_spreads() -> None:
    tol = tolerances(VALUES, thread_spread={"controls/mask_kept": 0.001}, seed_spread={"controls/mask_kept": 0.004},
                     rel=1e-3, abs_tol=1e-6)
    assert tol["cem/4->9/cout"] == pytest.approx(INTERVAL_SHARE * 0.03), "half of the interval's half-width"
    assert tol["cem/4->9/cout_lo"] == tol["cem/4->9/cout_hi"] == tol["cem/4->9/cout"], "bounds move with the value"
    assert tol["controls/mask_kept"] == pytest.approx(max(THREAD_FACTOR * 0.001, 0.004))
    assert tol["errors/n"] == pytest.approx(1e-6 + 1e-3 * 6), "no spread, no interval: the base tolerance"


def test_mismatches_name_each_number_off_or_missing() -> None:
    expected = {"tolerance": {"rel": 1e-3, "abs": 1e-6}, "values": VALUES,
                "tolerances": tolerances(VALUES, {}, {}, 1e-3, 1e-6)}
    assert mismatches(dict(VALUES), expected) == []
    moved = {**VALUES, "cem/4->9/cout": 0.05 + 0.9 * INTERVAL_SHARE * 0.03}
    assert mismatches(moved, expected) == [], "within its share of the interval: another CPU's rounding"
    far = {**VALUES, "cem/4->9/cout": 0.08}
    del far["errors/n"]
    problems = mismatches(far, expected)
    assert len(problems) == 2 and problems[0].startswith("cem/4->9/cout: got 0.08") and "errors/n: missing" in problems
    legacy = {"tolerance": {"rel": 0.02, "abs": 1e-4}, "values": {"a": 1.0}}
    assert mismatches({"a": 1.015}, legacy) == [] and mismatches({"a": 1.03}, legacy) != []


def test_numbers_without_an_interval_can_get_their_own_base() -> None:
    tol = tolerances(VALUES, {}, {}, rel=1e-3, abs_tol=1e-6, rel_without_interval=0.1)
    assert tol["controls/mask_kept"] == pytest.approx(1e-6 + 0.1 * 0.16)
    assert tol["cem/4->9/cout"] == pytest.approx(INTERVAL_SHARE * 0.03), "an interval's number keeps its rule"
