"""Input checks shared by data loaders, methods and metrics.

Every public entry point that takes images or class ids runs them through here, so a wrong
shape, range or class id fails early with a message that says what to change.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch

from ..errors import InputError

NUM_CLASSES = 10
IMAGE_SHAPE = (1, 28, 28)
RANGE_TOLERANCE = 1e-6


def check_images(x: object, name: str = "x") -> torch.Tensor:
    """Return ``x`` as float32 if it is a non-empty (N, 1, 28, 28) batch in [0, 1]."""
    if not isinstance(x, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor of shape (N, 1, 28, 28), got {type(x).__name__}.")
    if x.ndim == 3 and tuple(x.shape[1:]) == IMAGE_SHAPE[1:]:
        raise InputError(
            f"{name} has shape {tuple(x.shape)}: add the channel axis, e.g. {name}.unsqueeze(1) -> (N, 1, 28, 28)."
        )
    if x.ndim != 4 or tuple(x.shape[1:]) != IMAGE_SHAPE:
        raise InputError(f"{name} must have shape (N, 1, 28, 28), got {tuple(x.shape)}.")
    if x.shape[0] == 0:
        raise InputError(f"{name} is an empty batch (N = 0): pass at least one image.")
    if not torch.is_floating_point(x):
        raise InputError(
            f"{name} has dtype {x.dtype}; cfkit expects float images in [0, 1] (for uint8 pixels use x.float() / 255)."
        )
    x = x.float()
    if not torch.isfinite(x).all():
        raise InputError(f"{name} contains NaN or infinite values.")
    lo, hi = x.min().item(), x.max().item()
    if lo < -RANGE_TOLERANCE or hi > 1 + RANGE_TOLERANCE:
        raise InputError(
            f"{name} has values in [{lo:.3f}, {hi:.3f}]; cfkit images live in [0, 1]. "
            "Undo any normalisation (e.g. x * 0.5 + 0.5 for [-1, 1] images) before passing them."
        )
    return x


def check_class_id(value: object, name: str = "class id") -> int:
    """Return ``value`` as an int if it is a digit class 0..9."""
    if isinstance(value, torch.Tensor) and value.ndim == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{name} must be an integer digit 0-9, got {value!r} ({type(value).__name__}).")
    if not 0 <= value < NUM_CLASSES:
        raise InputError(f"{name} must be a digit 0-9, got {value}.")
    return value


def check_class_ids(values: Iterable[object] | torch.Tensor, name: str = "labels") -> torch.Tensor:
    """Return class ids as a 1-D int64 tensor, each in 0..9."""
    if isinstance(values, torch.Tensor):
        if values.ndim != 1:
            raise InputError(f"{name} must be a 1-D tensor of class ids, got shape {tuple(values.shape)}.")
        if torch.is_floating_point(values) or values.dtype == torch.bool:
            raise InputError(f"{name} must hold integer class ids, got dtype {values.dtype}.")
        ids = values.long()
    else:
        ids = torch.tensor([check_class_id(v, name) for v in values], dtype=torch.long)
    bad = ids[(ids < 0) | (ids >= NUM_CLASSES)]
    if bad.numel():
        raise InputError(f"{name} must be digits 0-9; found {sorted(set(bad.tolist()))}.")
    return ids


def check_targets(target: object, n: int, source: torch.Tensor | None = None) -> torch.Tensor:
    """Broadcast ``target`` (an int or (N,) ids) to (N,) and refuse targets equal to the source class."""
    if isinstance(target, torch.Tensor) and target.ndim == 0 or isinstance(target, int):
        ids = torch.full((n,), check_class_id(target, "target"), dtype=torch.long)
    else:
        ids = check_class_ids(target, "target")
        if ids.shape[0] != n:
            raise InputError(f"target has {ids.shape[0]} class ids but there are {n} images; give one per image.")
    if source is not None:
        same = (ids == source.to(ids.device)).nonzero().flatten()
        if same.numel():
            raise InputError(
                f"target equals the query class for {same.numel()} image(s) (first at index {same[0].item()}, "
                f"class {ids[same[0]].item()}): a counterfactual must change the class, pick another target."
            )
    return ids


def check_pair(pair: object) -> tuple[int, int]:
    """Return a (query class, target class) pair of distinct digits."""
    if isinstance(pair, str) and "->" in pair:
        pair = tuple(int(p) for p in pair.split("->"))
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise InputError(f"a pair must be (query, target) such as (4, 9) or '4->9', got {pair!r}.")
    query, target = check_class_id(pair[0], "query class"), check_class_id(pair[1], "target class")
    if query == target:
        raise InputError(f"pair {query}->{target}: the target class must differ from the query class.")
    return query, target
