"""The explorer redraws through the method when a slider moves (run without a browser)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # before anything imports pyplot

from cfkit.data import load_mnist
from cfkit.interactive import widgets
from cfkit.methods.c3lt import C3LT, C3LTConfig
from cfkit.methods.cve import CVE, CVEConfig
from cfkit.zoo.checkpoints import load


def test_method_explorer_rebuilds_the_method_on_every_change() -> None:
    calls = []

    def make(cells):
        calls.append(cells)
        return CVE(load("classifier"), CVEConfig(max_cells=cells))

    queries = load_mnist("test", digits=(4,))[0][:5]
    knob = widgets.knob_slider("max cells", 16, 1, 16, 1)
    box = widgets.method_explorer(make, queries, 4, knob)
    controls = box.children[0].children
    assert [c.description for c in controls] == ["query", "target", "max cells"]
    assert calls == [16]
    knob.value = 3
    controls[1].value = 7  # any digit, not only the protocol's target
    controls[1].value = 4  # the query class itself: refused with a message, nothing drawn
    assert calls == [16, 3, 3]
    assert isinstance(controls[0].max, int) and controls[0].max == 4


def test_pair_explorer_switches_pairs_and_redraws_through_the_method() -> None:
    calls = []

    def make(fraction):
        calls.append(fraction)
        return C3LT(load("classifier"), C3LTConfig(fraction=fraction))

    knob = widgets.knob_slider("fraction", 1.0, 0.0, 1.0, 0.05)
    box = widgets.pair_explorer(make, [(4, 9), (3, 8)], knob, n_queries=5)
    pair, index, _ = box.children[0].children
    assert [c.description for c in box.children[0].children] == ["pair", "query", "fraction"]
    assert pair.value == (4, 9) and index.max == 4
    knob.value = 0.5
    pair.value = (3, 8)
    assert calls == [1.0, 0.5, 0.5]


def test_method_explorer_takes_several_named_knobs_and_case_explorer_its_own_pairs() -> None:
    calls = []

    def make(cells, grid):
        calls.append((cells, grid))
        return CVE(load("classifier"), CVEConfig(max_cells=cells))

    queries = load_mnist("test", digits=(4,))[0][:3]
    knobs = {"cells": widgets.knob_slider("max cells", 4, 1, 16, 1), "grid": widgets.knob_slider("grid", 7, 1, 7, 1)}
    box = widgets.method_explorer(make, queries, 4, knobs)
    assert [c.description for c in box.children[0].children] == ["query", "target", "max cells", "grid"]
    knobs["grid"].value = 2
    assert calls == [(4, 7), (4, 2)]

    x, labels = load_mnist("test")[0][:2], load_mnist("test")[1][:2]
    cases = widgets.case_explorer(make, x, labels, (labels + 1) % 10, knobs, labels=["first", "second"])
    case_slider = cases.children[0].children[0]
    assert case_slider.description == "case" and case_slider.max == 1
    case_slider.value = 1
    assert calls[-1] == (4, 2) and len(calls) == 4
