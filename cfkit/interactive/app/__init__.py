"""The live explorer (``make app``, ``cfkit app``): ``explainer`` holds the logic and needs no browser (models
loaded once, which methods can explain a pair, fastest-first order, one panel's numbers), ``render`` draws panels as
PNG and HTML, ``page`` is the ipywidgets page :class:`ExplorerApp` served without code by Voilà (the top-level
``app/explorer.ipynb``), and ``launcher`` holds :func:`serve`, behind ``cfkit app``, and the environment variables
it hands the page. These modules may import the layers below ``cfkit.interactive`` and its ``drawing`` and
``servers``, never the reverse (but for ``cfkit.running.cli`` importing :func:`serve`); inside, ``render`` imports
``explainer``, ``page`` imports the three others, ``launcher`` none of them. The public names are re-exported here:
``from cfkit.interactive.app import ExplorerApp, Explainer, serve``.
"""
from .explainer import (DEFAULT_SETTING, IG_STEPS, PANEL_COLUMNS, SETTINGS, Availability, Explainer, Panel, check_message,
                        check_setting, check_target, explained_entries, fastest_first, seeded_latencies, trained_pairs)
from .launcher import CLASSIFIER_VARIABLE, NOTEBOOK, PAIR_DIR_VARIABLE, STATE_VARIABLE, serve
from .page import ExplorerApp
from .render import DIFFERENCE_MAP, SCALE, grey_png, panel_html, png, probability_html, signed_png

__all__ = ["CLASSIFIER_VARIABLE", "DEFAULT_SETTING", "DIFFERENCE_MAP", "IG_STEPS", "NOTEBOOK", "PAIR_DIR_VARIABLE", "PANEL_COLUMNS",
           "SCALE", "SETTINGS", "STATE_VARIABLE", "Availability", "Explainer", "ExplorerApp", "Panel", "check_message",
           "check_setting", "check_target", "explained_entries", "fastest_first", "grey_png", "panel_html", "png",
           "probability_html", "seeded_latencies", "serve", "signed_png", "trained_pairs"]
