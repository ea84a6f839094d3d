"""The interactive explorer every notebook builds on: controls wired to a draw function.

Built with ``ipywidgets.interactive_output`` so the controls sit above the figure; sliders of slow
methods use ``continuous_update=False`` so a drag triggers one redraw, not dozens.
"""
from __future__ import annotations

from collections.abc import Callable

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch

from ..scoring import plots
from ..scoring.evaluation import protocol_queries


def explorer(draw: Callable[..., object], **controls: widgets.ValueWidget) -> widgets.VBox:
    """Return a box with ``controls`` and an output area where ``draw(**values)`` renders on every change."""

    def render(**values: object) -> None:
        figure = draw(**values)
        if figure is not None:
            plt.show()

    output = widgets.interactive_output(render, controls)
    return widgets.VBox([widgets.HBox(list(controls.values())), output])


def index_slider(n: int, description: str = "query", value: int = 0) -> widgets.IntSlider:
    return widgets.IntSlider(value=value, min=0, max=max(0, n - 1), description=description,
                             continuous_update=False)


def class_slider(description: str = "target", value: int = 9) -> widgets.IntSlider:
    return widgets.IntSlider(value=value, min=0, max=9, description=description, continuous_update=False)


def knob_slider(description: str, value: float, low: float, high: float, step: float) -> widgets.ValueWidget:
    """A slider for a method's main knob: an IntSlider when every bound is an int, else a FloatSlider."""
    if all(isinstance(v, int) for v in (value, low, high, step)):
        return widgets.IntSlider(value=value, min=low, max=high, step=step, description=description,
                                 continuous_update=False)
    return widgets.FloatSlider(value=value, min=low, max=high, step=step, description=description,
                               continuous_update=False)


def choice(options: list, description: str, value: object | None = None) -> widgets.Dropdown:
    return widgets.Dropdown(options=options, value=value if value is not None else options[0],
                            description=description)


def _draw_one(method, x: torch.Tensor, source: int, target: int, note: str):
    """Explain one query and draw query, counterfactual, difference and both probability bars."""

    result = method.explain(x, target, source=torch.tensor([source]))
    with torch.inference_mode():
        probs = torch.softmax(method.classifier(torch.cat([x, result.x_cf]).to(method.device)), 1).cpu()
    verdict = "valid" if bool(result.valid[0]) else "not valid"
    return plots.explain_one(x[0], result.x_cf[0], probs[0], probs[1], source, target,
                             note=f"{method.name}, {note}: {verdict}, {result.seconds:.2f} s")


def method_explorer(
    make_method: Callable[..., object], queries: torch.Tensor, source: int,
    knob: widgets.ValueWidget | dict[str, widgets.ValueWidget], target: int = 9,
) -> widgets.VBox:
    """Query index, target class (any digit) and the method's knobs; redraws query, counterfactual,
    difference and the classifier's probabilities for both.

    ``knob`` is one slider (``make_method(value)`` builds the method) or a dict of named sliders
    (``make_method(**values)``), e.g. LDCE's guidance scale, strength and consensus angle.
    """
    knobs = knob if isinstance(knob, dict) else {"knob": knob}

    def draw(index: int, target: int, **values: float):
        if target == source:
            print(f"the target must differ from the query class {source}: pick another digit")
            return None
        method = make_method(**values) if isinstance(knob, dict) else make_method(values["knob"])
        note = ", ".join(f"{knobs[k].description}={v:g}" for k, v in values.items())
        return _draw_one(method, queries[index : index + 1], source, target, note)

    if {"index", "target"} & set(knobs):
        raise ValueError("knob names 'index' and 'target' are taken by the query and target sliders.")
    return explorer(draw, index=index_slider(len(queries)), target=class_slider("target", target), **knobs)


def pair_explorer(
    make_method: Callable[[float], object], pairs: list[tuple[int, int]], knob: widgets.ValueWidget,
    n_queries: int = 200,
) -> widgets.VBox:
    """For methods trained per pair (C3LT, ExpGAN): a pair selector, the query index among the pair's test
    queries, and the method's knob; redraws like :func:`method_explorer`."""

    queries = {pair: protocol_queries(pair, n_queries)[0] for pair in pairs}

    def draw(pair: tuple[int, int], index: int, knob: float):
        x = queries[pair][min(index, len(queries[pair]) - 1)][None]
        return _draw_one(make_method(knob), x, pair[0], pair[1], f"{pair[0]}->{pair[1]}, {knob_name}={knob:g}")

    knob_name = knob.description
    selector = widgets.Dropdown(options=[(f"{q}->{t}", (q, t)) for q, t in pairs], value=pairs[0], description="pair")
    return explorer(draw, pair=selector, index=index_slider(n_queries), knob=knob)


def case_explorer(
    make_method: Callable[..., object], x: torch.Tensor, source: torch.Tensor, target: torch.Tensor,
    knobs: dict[str, widgets.ValueWidget], labels: list[str] | None = None,
) -> widgets.VBox:
    """Cases that each carry their own (source, target), e.g. misclassified digits toward their true label:
    a case slider and the method's knobs (``make_method(**values)``); redraws like :func:`method_explorer`."""

    def draw(index: int, **values: float):
        note = (labels[index] + ", " if labels else "") + ", ".join(
            f"{knobs[k].description}={v:g}" for k, v in values.items())
        return _draw_one(make_method(**values), x[index : index + 1], int(source[index]), int(target[index]), note)

    return explorer(draw, index=index_slider(len(x), "case"), **knobs)
