"""Training precision: the references' float32, or bfloat16 autocast where a long CPU training must fit a session.

Under bfloat16 the convolutions and matrix products of the training forward pass run in bfloat16 while the weights,
the optimiser state and the losses stay float32 (PyTorch's autocast), so the saved models are float32 like any
other. On this kit's CPU (AMD EPYC with avx512_bf16) it halves a step of the reference DCGAN (0.45 -> 0.22 s, 64
images, two threads) and of C3LT's maps on it (5.0 -> 2.5 s, 128 images a class, one thread beside another job).
Scoring and explaining always run in float32.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import InputError

if TYPE_CHECKING:
    import torch

PRECISIONS = ("float32", "bfloat16")
"""float32: what the reference code trains in; bfloat16: autocast, about twice as fast on a CPU with avx512_bf16."""


def check_precision(precision: object) -> str:
    """The precision if it is one of :data:`PRECISIONS`; otherwise an error that lists them."""
    if precision not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}.")
    return precision  # type: ignore[return-value]


def training_autocast(precision: str, device: torch.device | str) -> torch.autocast:
    """The context a training step's forward pass runs in: bfloat16 autocast on ``device``, or a no-op."""
    import torch  # here, so that the command line can list PRECISIONS without loading torch

    kind = torch.device(device).type
    return torch.autocast(kind, dtype=torch.bfloat16, enabled=check_precision(precision) == "bfloat16")


def precision_flag(precision: str) -> str:
    """What a training command adds for ``precision``: nothing for float32, `` --precision bfloat16`` otherwise."""
    return "" if check_precision(precision) == "float32" else f" --precision {precision}"
