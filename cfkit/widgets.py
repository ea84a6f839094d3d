"""The interactive explorer every notebook builds on: controls wired to a draw function.

Built with ``ipywidgets.interactive_output`` so the controls sit above the figure; sliders of slow
methods use ``continuous_update=False`` so a drag triggers one redraw, not dozens.
"""
from __future__ import annotations

from collections.abc import Callable

import ipywidgets as widgets
import matplotlib.pyplot as plt


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


def choice(options: list, description: str, value: object | None = None) -> widgets.Dropdown:
    return widgets.Dropdown(options=options, value=value if value is not None else options[0],
                            description=description)
