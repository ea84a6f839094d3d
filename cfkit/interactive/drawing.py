"""A digit drawn with the mouse, made into an MNIST digit: rasterise the strokes, then preprocess as MNIST was made.

LeCun et al. made MNIST from NIST's binary digits: the ink's bounding box was size-normalised into a 20×20 box
keeping its aspect ratio (anti-aliased, hence the grey edges), and the result placed in a 28×28 field so that
its centre of mass sits at the field's centre. :func:`mnist_preprocess` does the same to any ink image;
:func:`rasterise` turns mouse strokes (polylines in canvas pixels) into such an image with round pen strokes,
in numpy only, so a drawing always gives the same digit (and a test can draw one).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import InputError

CANVAS = 224
"""The drawing canvas's side in pixels."""
PEN = 9.0
"""The pen's radius in canvas pixels: a digit drawn across most of the canvas gets MNIST's stroke width
(about 2.5 of its 20 pixels)."""
BOX = 20
"""MNIST's size-normalisation box."""
FIELD = 28
INK = 0.05
"""Pixels above this count as ink when the bounding box is taken."""
BLANK = ("the drawing is blank: draw a digit with the mouse (press, move, release) on the black square, "
         "then press Explain")

Stroke = Sequence[tuple[float, float]]


def rasterise(strokes: Sequence[Stroke], size: int = CANVAS, pen: float = PEN) -> np.ndarray:
    """Strokes (each a polyline of (x, y) canvas pixels; a single point is a dot) as a (size, size) float32 image
    in [0, 1]: every pixel within ``pen`` of a stroke is ink, with a one-pixel anti-aliased edge."""
    image = np.zeros((size, size), dtype=np.float32)
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5  # pixel centres
    for stroke in strokes:
        points = np.asarray(stroke, dtype=np.float32).reshape(-1, 2)
        if len(points) == 0:
            continue
        starts, ends = (points[:-1], points[1:]) if len(points) > 1 else (points, points)
        for (x0, y0), (x1, y1) in zip(starts, ends):
            # only the pixels near the segment: its bounding box grown by the pen
            left, right = int(max(0, np.floor(min(x0, x1) - pen - 1))), int(min(size, np.ceil(max(x0, x1) + pen + 2)))
            top, bottom = int(max(0, np.floor(min(y0, y1) - pen - 1))), int(min(size, np.ceil(max(y0, y1) + pen + 2)))
            if left >= right or top >= bottom:
                continue
            px, py = xs[top:bottom, left:right], ys[top:bottom, left:right]
            dx, dy = x1 - x0, y1 - y0
            length = dx * dx + dy * dy
            t = np.clip(((px - x0) * dx + (py - y0) * dy) / length, 0, 1) if length > 0 else 0.0
            distance = np.hypot(px - (x0 + t * dx), py - (y0 + t * dy))
            ink = np.clip(pen + 0.5 - distance, 0, 1)
            np.maximum(image[top:bottom, left:right], ink, out=image[top:bottom, left:right])
    return image


def is_blank(image: np.ndarray) -> bool:
    return not (np.asarray(image) > INK).any()


def mnist_preprocess(image: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A (H, W) ink image in [0, 1] (white ink on black) as MNIST made its digits: the ink's bounding box scaled
    into a 20×20 box keeping the aspect ratio (anti-aliased), placed in 28×28 with its centre of mass at the
    centre. Returns a (1, 1, 28, 28) float32 tensor in [0, 1]; a blank image is an :class:`InputError`."""
    array = np.asarray(image.detach().cpu().numpy() if isinstance(image, torch.Tensor) else image, dtype=np.float32)
    array = np.squeeze(array)
    if array.ndim != 2:
        raise InputError(f"a drawing is one (H, W) image; got shape {array.shape}.")
    array = np.clip(np.nan_to_num(array), 0, 1)
    if is_blank(array):
        raise InputError(BLANK + ".")
    rows, cols = np.nonzero(array > INK)
    crop = array[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
    height, width = crop.shape
    scale = BOX / max(height, width)
    new_h, new_w = max(1, round(height * scale)), max(1, round(width * scale))
    small = F.interpolate(torch.from_numpy(np.ascontiguousarray(crop))[None, None], size=(new_h, new_w),
                          mode="bilinear", antialias=True, align_corners=False)[0, 0].clamp(0, 1)
    field = torch.zeros(FIELD, FIELD)
    top, left = (FIELD - new_h) // 2, (FIELD - new_w) // 2
    field[top:top + new_h, left:left + new_w] = small
    return _centre_mass(field)[None, None]


def _centre_mass(field: torch.Tensor) -> torch.Tensor:
    """Shift a (28, 28) image by whole pixels so that its centre of mass sits at the field's centre, as MNIST's
    makers did (the ink stays inside the field: the shift is clipped to the margins)."""
    total = field.sum()
    grid = torch.arange(FIELD, dtype=torch.float32)  # pixel indices: MNIST put the centre of mass at index 14
    centre_y = (field.sum(1) * grid).sum() / total
    centre_x = (field.sum(0) * grid).sum() / total
    rows, cols = torch.nonzero(field > 0, as_tuple=True)
    dy = int(np.clip(round(FIELD / 2 - centre_y.item()), -rows.min().item(), FIELD - 1 - rows.max().item()))
    dx = int(np.clip(round(FIELD / 2 - centre_x.item()), -cols.min().item(), FIELD - 1 - cols.max().item()))
    return torch.roll(field, shifts=(dy, dx), dims=(0, 1))


def upscale(digit: torch.Tensor, size: int = CANVAS) -> np.ndarray:
    """A (.., 28, 28) digit as a (size, size) canvas-sized image (bilinear): what drawing it big would give."""
    image = torch.as_tensor(digit, dtype=torch.float32).reshape(1, 1, FIELD, FIELD)
    return F.interpolate(image, size=(size, size), mode="bilinear", align_corners=False)[0, 0].clamp(0, 1).numpy()
