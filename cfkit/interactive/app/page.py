"""The explorer page (ipywidgets, served without code by Voilà from ``app/explorer.ipynb``): one query, one target,
every method that can explain them.

A query is a test digit (class and index, or random) or a digit drawn with the mouse (rasterised and made into an MNIST
digit by :mod:`cfkit.interactive.drawing`). The classifier's probabilities are shown; the target is any other digit. Every catalog
method runs on the pair (see :mod:`cfkit.interactive.app.explainer`) at the settings chosen on the page (``quick``, the catalog's
cheap settings, or ``table``, the notebooks'; a change applies to the next Explain) and each one's panel appears as soon
as it finishes, naming the setting it ran at: the counterfactual, the difference (red: ink added, blue: removed), the
Integrated Gradients attribution of the change, the classifier's probabilities, validity, the oracle's verdict,
proximity, the calibrated IM1 and the seconds it took. Per-pair methods (C3LT, ExpGAN) show for their trained pairs and
are greyed out, with the reason and the command that trains one, otherwise. The classifier comes from the environment
(:data:`CLASSIFIER_VARIABLE`, …), set by ``cfkit app --classifier``.
"""
from __future__ import annotations

import os
import random
import time
from html import escape

import torch

from ...errors import CfkitError, InputError
from ...methods import catalog
from ...zoo.classifiers import DEFAULT
from ..drawing import BLANK, CANVAS, PEN, is_blank, rasterise
from .explainer import SETTINGS, Availability, Explainer, Panel, check_message, check_target
from .launcher import CLASSIFIER_VARIABLE, PAIR_DIR_VARIABLE, STATE_VARIABLE
from .render import grey_png, panel_html, probability_html, signed_png


ACTIVE_SETTING = {
    "quick": "at its catalog <i>quick</i> setting",
    "table": "at its <i>table</i> setting (its notebook's, as <code>make reproduce</code> runs it: slower)",
}
"""How the page's header names the active setting (keys: :data:`~cfkit.interactive.app.explainer.SETTINGS`)."""


class ExplorerApp:
    """The explorer page: query, probabilities, target, and one panel per method. ``root`` is the widget to show;
    displaying the app shows it. Built by :meth:`from_environment` in the Voilà notebook."""

    PANEL_WIDTH = "262px"
    STYLE = """<style>
    .cfkit-app .widget-html-content { line-height: 1.35; }
    .cfkit-app .widget-html { margin-top: 0; margin-bottom: 0; }
    .cfkit-panel-disabled { background: #f0f0f0; opacity: 0.75; }
    .cfkit-panel-disabled .widget-html-content { color: #666; }
    </style>"""

    def __init__(self, explainer: Explainer | None = None, error: str | None = None) -> None:
        import ipywidgets as widgets

        self.explainer = explainer
        self.widgets = widgets
        self.strokes: list[list[tuple[float, float]]] = []
        self.pressed = False
        self.query: torch.Tensor | None = None
        self.source: int | None = None
        self.target: int | None = None
        self.panels: dict[str, Panel] = {}
        self.timings: dict[str, dict[str, float]] = {}
        self.status = widgets.HTML(layout=widgets.Layout(min_height="24px"))
        self.status.add_class("cfkit-status")
        if explainer is None:
            self.status.value = self._error_html(error or "the explorer could not start.")
            self.title = widgets.HTML(self._title_html())
            self.root = widgets.VBox([widgets.HTML(self.STYLE), self.title, self.status])
            self.root.add_class("cfkit-app")
            return
        self._build()
        self.show_test_digit()

    @classmethod
    def from_environment(cls, device: str = "cpu") -> ExplorerApp:
        """The app for the classifier in :data:`CLASSIFIER_VARIABLE` (and its state, and the per-pair folder):
        on an error loading it, a page that says what went wrong and how to fix it (no traceback)."""
        spec = os.environ.get(CLASSIFIER_VARIABLE) or DEFAULT
        try:
            explainer = Explainer(spec, os.environ.get(STATE_VARIABLE) or None,
                                  os.environ.get(PAIR_DIR_VARIABLE) or None, device=device)
        except Exception as error:  # a factory of the user's may raise anything: a message, never a traceback
            detail = str(error) if isinstance(error, CfkitError) else f"{type(error).__name__}: {error}"
            return cls(error=f"cannot load the classifier {spec!r} (or the models that score it): {detail}")
        return cls(explainer)

    def _repr_mimebundle_(self, **kwargs):
        return self.root._repr_mimebundle_(**kwargs)

    # layout
    def _title_html(self) -> str:
        """The header: what the page does, for which classifier, at which setting (the active one)."""
        name = self.explainer.classifier_name if self.explainer else "–"
        runs = f"runs ({ACTIVE_SETTING[self.explainer.setting]})" if self.explainer else "runs"
        return (
            '<h2 style="margin:4px 0">Counterfactual explorer</h2><div style="font-size:13px;color:#444">'
            f"What is the smallest realistic change that makes the classifier (<code>{escape(name)}</code>) say "
            "another digit? Pick or draw a digit, pick a target, press Explain: every method that can explain the "
            f"pair {runs}, fastest first. Differences: "
            '<span style="color:#c62828">red = ink added</span>, <span style="color:#1f5fa8">blue = ink removed'
            "</span>; attribution: Integrated Gradients of the change toward the target.</div>")

    def _build(self) -> None:
        w = self.widgets
        self.title = w.HTML(self._title_html())
        self.settings = w.ToggleButtons(options=list(SETTINGS), value=self.explainer.setting, description="settings",
                                        tooltips=[f"{key}: {text}" for key, text in SETTINGS.items()])
        self.settings.add_class("cfkit-settings")
        settings_note = w.HTML(
            '<div style="font-size:12px;color:#555;line-height:16px;max-width:520px"><b>table</b> (the default): the '
            "settings of the results table and the notebooks (<code>make reproduce</code>), e.g. LDCE 34 DDIM steps, "
            "CEM 3×40 iterations: about 2 s a query. <b>quick</b>: each method's catalog quick setting, under a "
            "second. A change applies to the next Explain.</div>", layout=w.Layout(margin="0 0 0 8px"))
        self.mode = w.ToggleButtons(options=["test digit", "draw"], value="test digit", description="query")
        self.digit = w.Dropdown(options=list(range(10)), value=4, description="class", layout=w.Layout(width="140px"))
        self.index = w.BoundedIntText(value=0, min=0, max=self.explainer.count(4) - 1, description="index",
                                      layout=w.Layout(width="170px"))
        self.random = w.Button(description="random", icon="random", layout=w.Layout(width="100px"))
        self.test_box = w.HBox([self.digit, self.index, self.random])
        self.canvas = self._canvas()
        self.clear = w.Button(description="clear", icon="eraser", layout=w.Layout(width="100px"))
        self.clear.add_class("cfkit-clear")
        hint = w.HTML('<div style="font-size:12px;color:#555;max-width:230px">Draw one digit with the mouse, large, '
                      "white on black. It is cropped, scaled into 20×20 and centred by its centre of mass in 28×28, "
                      "as MNIST's digits were.</div>")
        self.draw_box = w.HBox([self.canvas, w.VBox([self.clear, hint])], layout=w.Layout(display="none"))
        self.query_image = w.Image(format="png", width=112, height=112, layout=w.Layout(margin="0 12px 0 0"))
        self.query_image.add_class("cfkit-query")
        self.query_text = w.HTML()
        self.query_probabilities = w.HTML()
        query_view = w.HBox([self.query_image, w.VBox([self.query_text, self.query_probabilities])],
                            layout=w.Layout(align_items="center"))
        self.target_buttons = [w.Button(description=str(d), layout=w.Layout(width="40px")) for d in range(10)]
        for digit, button in enumerate(self.target_buttons):
            button.add_class(f"cfkit-target-{digit}")
            button.on_click(lambda _, d=digit: self.choose_target(d))
        self.target_note = w.HTML(layout=w.Layout(margin="0 0 0 8px"))
        self.explain_button = w.Button(description="Explain", button_style="primary", icon="play",
                                       layout=w.Layout(width="120px"))
        self.explain_button.add_class("cfkit-explain")
        self.progress = w.IntProgress(value=0, min=0, max=1, layout=w.Layout(width="220px", visibility="hidden",
                                                                             margin="0 0 0 10px"))
        self.progress.add_class("cfkit-progress")
        self.panel_box = w.Box(layout=w.Layout(display="flex", flex_flow="row wrap",
                                               align_items="flex-start"))
        self.panel_box.add_class("cfkit-panels")
        self.settings.observe(lambda change: self.choose_setting(change["new"]), "value")
        self.mode.observe(lambda change: self._switch(change["new"]), "value")
        self.digit.observe(lambda change: self._digit_changed(), "value")
        self.index.observe(lambda change: self.show_test_digit(), "value")
        self.random.on_click(lambda _: self.random_digit())
        self.clear.on_click(lambda _: self.clear_drawing())
        self.explain_button.on_click(lambda _: self.explain())
        self.root = w.VBox([
            w.HTML(self.STYLE), self.title, w.HBox([self.settings, settings_note], layout=w.Layout(
                align_items="center")), self.mode, self.test_box, self.draw_box, query_view,
            w.HBox([w.HTML('<b style="line-height:32px">target&nbsp;</b>'), *self.target_buttons, self.target_note]),
            w.HBox([self.explain_button, self.progress], layout=w.Layout(align_items="center")),
            self.status, self.panel_box,
        ], layout=w.Layout(padding="0 8px"))
        self.root.add_class("cfkit-app")

    def _canvas(self):
        from ipycanvas import Canvas

        canvas = Canvas(width=CANVAS, height=CANVAS, layout=self.widgets.Layout(width=f"{CANVAS}px",
                                                                                 height=f"{CANVAS}px"))
        canvas.add_class("cfkit-canvas")
        canvas.on_client_ready(self._redraw)  # a view shown later gets the background and the strokes again
        canvas.on_mouse_down(self.mouse_down)
        canvas.on_mouse_move(self.mouse_move)
        canvas.on_mouse_up(self.mouse_up)
        canvas.on_mouse_out(self.mouse_up)
        return canvas

    def _redraw(self) -> None:
        self._blank_canvas(self.canvas)
        for stroke in self.strokes:
            self.canvas.fill_circle(*stroke[0], PEN)
            for (x0, y0), (x1, y1) in zip(stroke, stroke[1:]):
                self.canvas.stroke_line(x0, y0, x1, y1)

    @staticmethod
    def _blank_canvas(canvas) -> None:
        canvas.clear()
        canvas.fill_style = "black"
        canvas.fill_rect(0, 0, CANVAS, CANVAS)
        canvas.stroke_style = "white"
        canvas.fill_style = "white"
        canvas.line_width = 2 * PEN
        canvas.line_cap = "round"

    def choose_setting(self, setting: str) -> None:
        """Make ``setting`` the one the next Explain runs at (nothing reruns now); the header says it."""
        try:
            self.explainer.setting = setting
        except InputError as error:
            self._fail(str(error))
            return
        if self.settings.value != setting:
            self.settings.value = setting
        self.title.value = self._title_html()
        self.status.value = (f'<span class="cfkit-setting-note" style="font-size:13px">the next Explain runs every '
                             f"method at its <i>{escape(setting)}</i> setting</span>")

    # query
    def _switch(self, mode: str) -> None:
        drawing = mode == "draw"
        self.test_box.layout.display = "none" if drawing else "flex"
        self.draw_box.layout.display = "flex" if drawing else "none"
        if drawing:
            self.use_drawing()
        else:
            self.show_test_digit()

    def _digit_changed(self) -> None:
        self.index.max = self.explainer.count(self.digit.value) - 1
        self.show_test_digit()

    def random_digit(self, seed: int | None = None) -> None:
        chooser = random.Random(seed)
        digit = chooser.randrange(10)
        index = chooser.randrange(self.explainer.count(digit))
        with self.index.hold_trait_notifications(), self.digit.hold_trait_notifications():
            self.index.max = self.explainer.count(digit) - 1
            self.digit.value, self.index.value = digit, index
        self.show_test_digit()

    def show_test_digit(self) -> None:
        try:
            x = self.explainer.test_digit(self.digit.value, self.index.value)
        except CfkitError as error:
            self._fail(str(error))
            return
        self.set_query(x, f"test digit {self.index.value} of class {self.digit.value}")

    def mouse_down(self, x: float, y: float) -> None:
        self.pressed = True
        self.strokes.append([(x, y)])
        self.canvas.fill_circle(x, y, PEN)

    def mouse_move(self, x: float, y: float) -> None:
        if not self.pressed:
            return
        x0, y0 = self.strokes[-1][-1]
        self.strokes[-1].append((x, y))
        self.canvas.stroke_line(x0, y0, x, y)

    def mouse_up(self, x: float, y: float) -> None:
        if self.pressed:
            self.pressed = False
            self.use_drawing()

    def clear_drawing(self) -> None:
        self.strokes = []
        self._blank_canvas(self.canvas)
        self.use_drawing()

    def use_drawing(self) -> None:
        """The strokes so far as the query (a blank drawing clears the query and says how to draw)."""
        if is_blank(rasterise(self.strokes)):
            self.query = self.source = None
            self.query_image.value = grey_png(torch.zeros(28, 28))
            self.query_text.value = f'<div style="font-size:13px"><i>no digit drawn yet: {escape(BLANK)}</i></div>'
            self.query_probabilities.value = self.target_note.value = ""
            self._clear_panels()
            return
        self.set_query(self.explainer.drawn_digit(self.strokes), "your drawing, as an MNIST digit")

    def set_query(self, x: torch.Tensor, description: str) -> None:
        """Show ``x``, its probabilities, and enable every target but the predicted class."""
        self.query = x
        probabilities = self.explainer.probabilities(x)
        self.source = int(probabilities.argmax())
        self.query_image.value = grey_png(x)
        self.query_text.value = (f'<div style="font-size:13px">{escape(description)}</div><div style="font-size:15px">'
                                 f'classifier says <b class="cfkit-query-class">{self.source}</b> '
                                 f"(p={float(probabilities.max()):.2f})</div>")
        self.query_probabilities.value = probability_html(probabilities, (self.source,))
        for digit, button in enumerate(self.target_buttons):
            button.disabled = digit == self.source
            button.tooltip = ("the classifier's prediction: pick another digit" if digit == self.source
                              else f"explain {self.source}→{digit}")
        self.target_note.value = (f'<span style="font-size:12px;color:#555;line-height:32px">{self.source} is the '
                                  "classifier's prediction: not a target</span>")
        if self.target == self.source:
            self.target = None
        self.choose_target(self.target if self.target is not None else (9 if self.source != 9 else 4), quiet=True)
        self._clear_panels()
        self.status.value = ""

    def choose_target(self, digit: int, quiet: bool = False) -> None:
        if self.source is not None and digit == self.source:
            self._fail(check_message(self.source, digit))
            return
        self.target = digit
        for d, button in enumerate(self.target_buttons):
            button.button_style = "info" if d == digit else ""
        if not quiet:
            self.status.value = ""

    # explanation
    def explain(self) -> None:
        """Run every method that can explain the query toward the target; each panel shows as it finishes."""
        if self.query is None:
            self._fail(BLANK + ".")
            return
        try:
            target = check_target(self.source, self.target if self.target is not None else -1)
        except InputError as error:
            self._fail(str(error))
            return
        self._clear_panels()
        setting = self.explainer.setting
        available = [a for a in self.explainer.availability(self.source, target, setting) if a.enabled]
        self.progress.max, self.progress.value = max(1, len(available)), 0
        self.progress.layout.visibility = "visible"
        self.explain_button.disabled = True
        try:
            runs = self.explainer.run(self.query, target, setting)
            order = self.explainer.order([a.entry.name for a in available], setting)
            self._running(order, 0, setting)
            explained, greyed = [], []
            for item in runs:
                if isinstance(item, Availability):
                    greyed.append(self.greyed_panel(item))
                    self.panel_box.children = (*explained, *greyed)
                    continue
                start = time.perf_counter()
                explained.append(self.panel_widget(item))
                self.panel_box.children = (*explained, *greyed)  # explained first, the greyed-out ones after
                item.timings["draw"] = time.perf_counter() - start
                self.panels[item.name] = item
                self.timings[item.name] = dict(item.timings)
                self.progress.value += 1
                self._running(order, self.progress.value, setting)
        except CfkitError as error:
            self._fail(str(error))
            return
        finally:
            self.explain_button.disabled = False
            self.progress.layout.visibility = "hidden"
        total = sum(sum(t.values()) for t in self.timings.values())
        methods = f"{len(self.panels)} method{'' if len(self.panels) == 1 else 's'}"
        self.status.value = (f'<span class="cfkit-done">{methods} explained {self.source}→{target} at the '
                             f"{escape(setting)} setting in {total:.1f} s.</span>")

    def _running(self, order: list[str], done: int, setting: str) -> None:
        if done < len(order):
            self.status.value = (f"running {escape(catalog.label(order[done]))} ({done + 1} of {len(order)}, "
                                 f"{escape(setting)} setting) … each panel appears when its method finishes")

    def panel_widget(self, panel: Panel):
        """One method's panel: heading, counterfactual, difference, attribution, probabilities, numbers."""
        w = self.widgets
        heading, table = panel_html(panel)
        scale = float(panel.attribution.abs().max()) or 1.0

        def picture(data: bytes, caption: str, css: str):
            image = w.Image(value=data, format="png", width=78, height=78)
            image.add_class(css)
            return w.VBox([image, w.HTML(f'<div style="font-size:11px;text-align:center">{caption}</div>')],
                          layout=w.Layout(align_items="center"))

        images = w.HBox([picture(grey_png(panel.x_cf), "counterfactual", "cfkit-cf"),
                         picture(signed_png(panel.x_cf - panel.x), "difference", "cfkit-difference"),
                         picture(signed_png(panel.attribution, scale), "IG attribution", "cfkit-attribution")])
        box = w.VBox([w.HTML(heading), images,
                      w.HTML(probability_html(panel.probabilities, (panel.source, panel.target))), w.HTML(table)],
                     layout=self._panel_layout("solid"))
        box.add_class("cfkit-panel")
        box.add_class(f"cfkit-method-{panel.name}")
        return box

    def _panel_layout(self, border: str):
        return self.widgets.Layout(width=self.PANEL_WIDTH, border=f"1px {border} #bbb", padding="6px",
                                   margin="0 10px 10px 0")

    def greyed_panel(self, item: Availability):
        w = self.widgets
        box = w.VBox([w.HTML(f'<div style="font-size:15px;font-weight:600;color:#777">{escape(item.entry.label)}</div>'
                             '<div style="font-size:13px;color:#777">not shown for this query</div>'),
                      w.HTML(f'<div class="cfkit-reason" style="font-size:12px;color:#666;white-space:normal;'
                             f'word-break:break-word">{escape(item.reason)}</div>')],
                     layout=self._panel_layout("dashed"))
        box.add_class("cfkit-panel-disabled")
        box.add_class(f"cfkit-method-{item.entry.name}")
        return box

    def _clear_panels(self) -> None:
        self.panel_box.children = ()
        self.panels, self.timings = {}, {}

    def _fail(self, message: str) -> None:
        self.status.value = self._error_html(message)

    @staticmethod
    def _error_html(message: str) -> str:
        """``message`` (plain text) as the red error line."""
        return f'<div class="cfkit-error" style="color:#b00020;font-size:14px;padding:4px 0">{escape(message)}</div>'
