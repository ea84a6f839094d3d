"""The explorer redraws through the method when a slider moves (run without a browser)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # before anything imports pyplot

from cfkit import widgets
from cfkit.data import load_mnist
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
