"""The explorer app's logic without a browser: MNIST preprocessing of drawings, which methods show for a pair and
why the others are greyed out, the quick and table settings, the fast-first order per setting, one panel's numbers,
and the messages for bad input."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from cfkit.data import load_mnist
from cfkit.errors import InputError
from cfkit.interactive import app as explorer
from cfkit.interactive.app import DEFAULT_SETTING, SETTINGS, Availability, Explainer, ExplorerApp, Panel, check_target, fastest_first
from cfkit.interactive.drawing import BLANK, CANVAS, mnist_preprocess, rasterise, upscale
from cfkit.methods import catalog
from cfkit.methods.base import CounterfactualMethod
from cfkit.zoo.checkpoints import load

# ------------------------------------------------------------------------------------------- preprocessing


@pytest.fixture(scope="module")
def test_digits() -> tuple[torch.Tensor, torch.Tensor]:
    x, y = load_mnist("test")
    picked = torch.linspace(0, len(x) - 1, 300).round().long()  # every class, spread over the test set
    return x[picked], y[picked]


def test_mnist_digits_are_fixed_points_of_the_preprocessing(test_digits) -> None:
    """MNIST's own digits already fill a 20×20 box centred by their centre of mass: preprocessing keeps nearly all
    of them exactly (a few have faint edge pixels below the ink threshold, so their box is cropped a little)."""
    x, _ = test_digits
    error = torch.stack([(mnist_preprocess(digit[0]) - digit).abs().max() for digit in x])
    assert (error < 1e-4).float().mean() >= 0.9 and error.max() < 0.1


def test_upscaled_test_digits_come_back_close_and_keep_their_class(test_digits) -> None:
    """A digit drawn canvas-sized (an MNIST digit upscaled to the canvas) is made back into nearly the original."""
    x, _ = test_digits
    back = torch.cat([mnist_preprocess(upscale(digit)) for digit in x])
    assert back.shape == x.shape and back.dtype == torch.float32 and 0 <= back.min() and back.max() <= 1
    assert (back - x).abs().mean() < 0.05, "mean |difference| per pixel (a digit's mean pixel is about 0.12)"
    classifier = load("classifier")
    with torch.inference_mode():
        kept = (classifier(back).argmax(1) == classifier(x).argmax(1)).float().mean()
    assert kept >= 0.97


def test_a_drawing_is_rasterised_deterministically_and_centred() -> None:
    strokes = [[(40, 30), (50, 120), (60, 200)], [(150, 150)]]  # a long stroke and a dot, off centre
    image = rasterise(strokes)
    assert image.shape == (CANVAS, CANVAS) and image.dtype == np.float32
    assert np.array_equal(image, rasterise(strokes))
    assert image.max() == 1 and image[0, 0] == 0
    digit = mnist_preprocess(image)[0, 0]
    rows, cols = np.nonzero(digit.numpy() > 0.05)
    assert max(rows.max() - rows.min(), cols.max() - cols.min()) + 1 in (20, 21), "the long side fills the 20 box"
    grid = torch.arange(28.0)
    centre = ((digit.sum(1) * grid).sum() / digit.sum(), (digit.sum(0) * grid).sum() / digit.sum())
    assert all(abs(c - 14) <= 0.5 for c in centre), f"centre of mass {centre} not at the field's centre"


@pytest.mark.parametrize("strokes", [[], [[]], [[(-50, -50), (-30, -60)]]], ids=["none", "empty", "off-canvas"])
def test_a_blank_drawing_is_a_clear_error(strokes) -> None:
    with pytest.raises(InputError, match="the drawing is blank"):
        Explainer.drawn_digit(strokes)


# ------------------------------------------------------------------------------------------------- logic


@pytest.fixture(scope="module")
def explainer() -> Explainer:
    """One explainer for the module's tests, at the quick setting (the tests' methods run cheaply)."""
    return Explainer(setting="quick")


def reasons(items: list[Availability]) -> dict[str, str | None]:
    return {item.entry.name: item.reason for item in items}


def test_per_pair_methods_show_for_their_trained_pairs_and_say_how_to_train_others(explainer) -> None:
    trained = reasons(explainer.availability(4, 9))
    assert trained["c3lt"] is None and trained["expgan"] is None
    untrained = reasons(explainer.availability(4, 7))
    for family in ("c3lt", "expgan"):
        assert "trained for" in untrained[family] and "4→9" in untrained[family]
        assert f"cfkit train {family} --pair 4 7" in untrained[family]
    per_query = [e.name for e in catalog.entries() if not e.per_pair and not e.reference]
    assert all(untrained[name] is None for name in per_query), "a per-query method explains any pair"
    assert "original_data" not in untrained, "the real-data reference is no explanation"


def test_per_pair_methods_are_greyed_out_for_another_classifier() -> None:
    """Another classifier: the zoo's with one bias nudged, so it still reads digits (an untrained model is
    refused on load) but has weights of its own."""
    nudged = copy.deepcopy(load("classifier"))  # load() is cached: never change the zoo's own copy
    with torch.no_grad():
        [p for p in nudged.parameters() if p.dim() == 1][-1][0] += 1e-3
    other = Explainer(nudged.eval(), latencies={})
    reason = reasons(other.availability(4, 9))["c3lt"]
    assert reason is not None and "trained against classifier" in reason and "--pair-dir" in reason


def test_the_fastest_methods_run_first_and_measurements_reorder_them(explainer) -> None:
    assert fastest_first(["a", "b", "c", "d"], {"c": 0.1, "a": 2.0}) == ["c", "a", "b", "d"]
    names = ["ldce", "cem", "c3lt"]
    seeded = Explainer(latencies={"ldce": 0.07, "c3lt": 0.0002, "cem": 0.07})
    assert seeded.order(names) == seeded.order(names, "table") == ["c3lt", "ldce", "cem"], "both settings seeded"
    seeded.measured("ldce", 3.0)
    seeded.measured("cem", 0.5)
    assert seeded.order(names) == ["c3lt", "cem", "ldce"]
    assert seeded.latencies["ldce"] == 3.0, "the first measurement replaces the seed"
    seeded.measured("ldce", 1.0)
    assert seeded.latencies["ldce"] == 2.0, "later ones are averaged in"
    assert explainer.latencies, "seeded from results/table.csv"


def test_the_order_uses_the_active_settings_latencies() -> None:
    names = ["ldce", "cem", "c3lt"]
    seeded = Explainer(latencies={"ldce": 0.07, "c3lt": 0.0002, "cem": 0.07}, setting="quick")
    seeded.measured("ldce", 0.1)  # at quick: LDCE is quicker than CEM's seed there
    seeded.setting = "table"
    assert seeded.latencies is seeded.latencies_by_setting["table"]
    seeded.measured("c3lt", 9.0)
    assert seeded.order(names) == ["ldce", "cem", "c3lt"], "table: only the table's measurements count"
    assert seeded.order(names, "quick") == ["c3lt", "cem", "ldce"]
    seeded.setting = "quick"
    assert seeded.order(names) == ["c3lt", "cem", "ldce"] and seeded.latencies["c3lt"] == 0.0002


def test_the_table_setting_builds_each_method_as_its_notebook_does(explainer, monkeypatch) -> None:
    entry = catalog.get("ldce")
    quick, table = explainer.method("ldce", "quick"), explainer.method("ldce", "table")
    assert table.config == entry.make(explainer.classifier, device=explainer.device).config
    assert quick.config == entry.make_quick(explainer.classifier, device=explainer.device).config
    assert quick.config != table.config and table.config.denoising_steps > quick.config.denoising_steps
    assert explainer.method("ldce", "quick") is quick and explainer.method("ldce", "table") is table, "built once each"
    assert Explainer.__init__.__defaults__[-1] == DEFAULT_SETTING == "table", "the table's setting is the default"
    monkeypatch.setattr(explainer, "setting", "quick")
    assert explainer.method("ldce") is quick
    monkeypatch.setattr(explainer, "setting", "table")
    assert explainer.method("ldce") is table
    cem = explainer.method("cem")
    assert (cem.config.search_steps, cem.config.iterations) == (3, 40) and explainer.method("cem", "quick") is not cem


def test_a_bad_setting_is_refused_naming_the_two(explainer) -> None:
    assert list(SETTINGS) == ["quick", "table"]
    for bad in (lambda: setattr(explainer, "setting", "slow"), lambda: explainer.method("ldce", "notebook"),
                lambda: Explainer(setting="fast"), lambda: explainer.order(["ldce"], "Quick")):
        with pytest.raises(InputError, match="the 'quick' or the 'table' settings"):
            bad()
    assert explainer.setting == "quick", "a refused setting leaves the active one"


def test_a_panel_has_every_number_it_shows(explainer) -> None:
    x = explainer.test_digit(4, 0)
    panel = explainer.explain("c3lt", x, 4, 9)
    assert isinstance(panel, Panel) and panel.x_cf.shape == (1, 1, 28, 28)
    assert panel.valid == (int(panel.probabilities.argmax()) == 9)
    assert set(panel.scores) == set(explorer.PANEL_COLUMNS) and all(np.isfinite(list(panel.scores.values())))
    assert panel.scores["validity"] == float(panel.valid)
    assert panel.attribution.shape == x.shape and panel.seconds > 0
    assert set(panel.timings) == {"method", "scores", "attribution"}
    heading, table = explorer.panel_html(panel)
    assert "C3LT" in heading and ("valid ✓" in heading or "not valid ✗" in heading) and "oracle says" in table
    assert panel.setting == "quick" and "(quick setting)" in heading
    assert "(table setting)" in explorer.panel_html(explainer.explain("c3lt", x, 4, 9, "table"))[0]


def test_target_equal_to_the_prediction_is_refused() -> None:
    with pytest.raises(InputError, match="already calls this digit a 4"):
        check_target(4, 4)
    with pytest.raises(InputError, match="a digit 0-9"):
        check_target(4, 10)
    assert check_target(4, 9) == 9


# -------------------------------------------------------------------------------------------------- widgets


@pytest.fixture
def app(explainer) -> ExplorerApp:
    explainer.setting = "quick"
    yield ExplorerApp(explainer)
    explainer.setting = "quick"  # the module's explainer goes on at the default setting


def test_the_app_refuses_the_predicted_class_as_target(app) -> None:
    assert app.source == 4 and app.target_buttons[4].disabled and not app.target_buttons[9].disabled
    app.choose_target(4)
    assert "already calls this digit a 4" in app.status.value and app.target != 4


def test_a_blank_drawing_is_a_message_in_the_app(app) -> None:
    app.mode.value = "draw"
    app.explain()
    assert BLANK in app.status.value and "cfkit-error" in app.status.value and not app.panel_box.children
    app.mouse_down(100, 40)
    for y in range(45, 200, 8):
        app.mouse_move(100, y)
    app.mouse_up(100, 200)
    assert app.query is not None and app.source == 1, "a vertical bar reads as a one"
    app.clear_drawing()
    assert app.query is None and app.strokes == []


def test_a_classifier_that_fails_to_load_is_a_message_not_a_traceback(monkeypatch) -> None:
    monkeypatch.setenv(explorer.CLASSIFIER_VARIABLE, "no_such_module:factory")
    page = ExplorerApp.from_environment()
    assert page.explainer is None
    assert "cannot load the classifier" in page.status.value and "no_such_module" in page.status.value


def test_panels_appear_fastest_first_with_the_greyed_out_ones_after(app, monkeypatch) -> None:
    """Two fast per-pair methods and one that fails: the failure is greyed out with its message, after the others."""

    class Broken(CounterfactualMethod):
        name = "broken"

        def _explain_batch(self, x, target, source):
            raise InputError("this method always fails")

    broken = catalog.MethodEntry(Broken, "Broken")
    monkeypatch.setattr("cfkit.interactive.app.explainer.explained_entries",
                        lambda: [catalog.get("expgan"), catalog.get("c3lt"), broken])
    with catalog.registered(broken):
        app.explainer.latencies.update({"c3lt": 0.001, "expgan": 0.002, "broken": 0.0})
        app.choose_target(9)
        app.explain()
    names = [next(c for c in panel._dom_classes if c.startswith("cfkit-method-")) for panel in app.panel_box.children]
    assert names == ["cfkit-method-c3lt", "cfkit-method-expgan", "cfkit-method-broken"]
    assert "cfkit-panel-disabled" in app.panel_box.children[-1]._dom_classes
    assert "failed on this query: this method always fails" in str(app.panel_box.children[-1].children[-1].value)
    assert set(app.timings) == {"c3lt", "expgan"} and all("draw" in t for t in app.timings.values())
    assert "2 methods explained 4→9" in app.status.value


def test_the_settings_toggle_applies_to_the_next_explain(app, monkeypatch) -> None:
    """The toggle changes the header and the explainer's setting but reruns nothing; the next Explain runs at it and
    every panel says so."""
    monkeypatch.setattr("cfkit.interactive.app.explainer.explained_entries", lambda: [catalog.get("c3lt")])
    assert app.settings.description == "settings"
    app.settings.value = "quick"
    assert "catalog <i>quick</i> setting" in app.title.value
    app.choose_target(9)
    app.explain()
    shown = app.panel_box.children
    assert "(quick setting)" in shown[0].children[0].value and "at the quick setting" in app.status.value
    app.settings.value = "table"
    assert app.explainer.setting == "table" and "<i>table</i> setting" in app.title.value
    assert "<i>quick</i>" not in app.title.value
    assert app.panel_box.children == shown and "next Explain" in app.status.value, "nothing reruns by itself"
    app.explain()
    assert "(table setting)" in app.panel_box.children[0].children[0].value
    assert "1 method explained 4→9 at the table setting" in app.status.value
    assert "c3lt" in app.explainer.latencies_by_setting["table"]


@pytest.mark.parametrize("argv, message", [
    (["app", "--classifier", "no_such_file.pt"], "no classifier 'no_such_file.pt'"),
    (["app", "--classifier-state", "weights.pt"], "--classifier-state goes with --classifier"),
    (["app", "--pair-dir", "no/such/folder"], "is not a folder"),
])
def test_cfkit_app_refuses_bad_options_before_starting_voila(argv, message, capsys) -> None:
    from cfkit.running.cli import main

    assert main(argv) == 2
    assert message in capsys.readouterr().err
