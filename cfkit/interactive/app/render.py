"""The explorer's panels as PNG images and HTML: grey digits, signed maps in the difference colour map (red: ink
added, blue: removed), the classifier's probabilities as a bar chart, and a panel's heading and table of numbers."""
from __future__ import annotations

import io
import math
from html import escape

import numpy as np
import torch

from ...scoring import columns as table_columns
from .explainer import PANEL_COLUMNS, Panel

DIFFERENCE_MAP = "RdBu_r"
"""The colour map of differences and attributions, as in cfkit.scoring.plots: red where ink is added, blue where removed."""
SCALE = 4
"""Screen pixels per MNIST pixel in the panels' images."""


def png(image: np.ndarray) -> bytes:
    """An (H, W) grey image in [0, 1] or an (H, W, 3) RGB one as PNG bytes, each pixel SCALE×SCALE."""
    from PIL import Image

    array = np.clip(image, 0, 1)
    array = np.kron(array, np.ones((SCALE, SCALE) + (1,) * (array.ndim - 2)))
    buffer = io.BytesIO()
    Image.fromarray((array * 255).round().astype(np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def signed_png(values: torch.Tensor, scale: float = 1.0) -> bytes:
    """A signed map on [-scale, scale] in the difference colour map (red positive, blue negative)."""
    from matplotlib import colormaps

    data = values.detach().cpu().squeeze().numpy() / (scale or 1.0)
    return png(colormaps[DIFFERENCE_MAP]((np.clip(data, -1, 1) + 1) / 2)[..., :3])


def grey_png(image: torch.Tensor) -> bytes:
    return png(image.detach().cpu().squeeze().numpy())


def probability_html(probabilities: torch.Tensor, highlight: tuple[int, ...] = ()) -> str:
    """The ten probabilities as a small bar chart (highlighted classes in red, as cfkit.scoring.plots draws them)."""
    bars = []
    for digit, p in enumerate(probabilities.tolist()):
        colour = "#d62728" if digit in highlight else "#8c8c8c"
        bars.append(f'<div title="p({digit}) = {p:.3f}" style="display:flex;flex-direction:column;align-items:center;'
                    'justify-content:flex-end;width:18px;height:64px">'
                    f'<div style="width:12px;height:{max(1, round(48 * p))}px;'
                    f'background:{colour}"></div><div style="font-size:11px;line-height:14px">{digit}</div></div>')
    return (f'<div class="cfkit-probabilities" style="display:flex;gap:1px;align-items:flex-end">{"".join(bars)}'
            "</div>")


def _fmt(value: float) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.3g}"


def _short_title(column: table_columns.Column) -> str:
    """A column's title without its note: ``proximity ↓``."""
    return column.title.partition(" (")[0]


def panel_html(panel: Panel) -> tuple[str, str]:
    """A panel's heading (the method and the setting it ran at) and its table of numbers, as HTML."""
    verdict = ('<span class="cfkit-validity" style="color:#2a7d2a">valid ✓</span>' if panel.valid else
               '<span class="cfkit-validity" style="color:#c62828">not valid ✗</span>')
    heading = (f'<div style="font-size:15px;font-weight:600">{escape(panel.label)} <span class="cfkit-setting" '
               f'style="font-size:12px;font-weight:400;color:#666">({escape(panel.setting)} setting)</span></div>'
               f'<div style="font-size:13px">→ {panel.target}: {verdict}, {panel.seconds:.2f} s</div>')
    oracle = panel.oracle_class == panel.target
    columns = {c: table_columns.get(c) for c in PANEL_COLUMNS}
    rows = [("classifier says", f"{int(panel.probabilities.argmax())} (p={float(panel.probabilities.max()):.2f})"),
            ("oracle says", f"{panel.oracle_class} {'✓ agrees' if oracle else '✗ disagrees'}"),
            (_short_title(columns["proximity"]), _fmt(panel.scores["proximity"])),
            (_short_title(columns["im1_calibrated"]) + " calibrated", _fmt(panel.scores["im1_calibrated"])),
            ("seconds (method)", f"{panel.seconds:.2f}"),
            ("seconds (panel)", f"{sum(panel.timings.values()):.2f}")]
    table = "".join(f'<tr><td style="padding:0 6px 0 0;color:#555;white-space:nowrap">{escape(k)}</td>'
                    f'<td style="white-space:nowrap">{escape(v)}</td></tr>' for k, v in rows)
    return heading, f'<table style="font-size:12px;line-height:16px">{table}</table>'
