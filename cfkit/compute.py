"""The compute floor: FLOPs a method spends per counterfactual, and this CPU's fp32 matmul peak to hold them against.

FLOPs are counted with ``torch.utils.flop_counter``: matrix multiplications and convolutions (``mm``, ``addmm``,
``bmm``, ``convolution`` and their backward ops) at 2 FLOPs per multiply-add, forward and backward alike (only the
gradients autograd is asked for: an input gradient is counted, an unneeded weight gradient is not), inside
``torch.enable_grad``, ``torch.no_grad`` and ``torch.inference_mode``. Not counted: elementwise work (activations,
pooling, normalisation, the optimisers' updates, noise) and ops without a formula such as ``torch.cdist`` (CVE's
nearest-distractor search, about 2 % of its work). So ``achieved / peak`` is the share of the peak that the
matmul/conv work alone reaches.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from .methods.base import CounterfactualMethod


class _GlobalOnly:
    """Stands in for FlopCounterMode's module tracker: its hooks break ``autograd.grad`` on leaf inputs
    (pytorch#131753), which PGD, CEM and LDCE call, and only the global total is needed here."""

    parents = frozenset({"Global"})

    def __enter__(self) -> _GlobalOnly:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def count_flops(fn: Callable[[], Any]) -> int:
    """Matmul/conv FLOPs (forward and backward) of one call of ``fn``: the work a fp32 peak can be compared with."""
    counter = FlopCounterMode(display=False)
    counter.mod_tracker = _GlobalOnly()  # totals only, and autograd.grad keeps working
    with counter:
        fn()
    return counter.get_total_flops()


def flops_per_counterfactual(method: CounterfactualMethod, x: torch.Tensor, target: torch.Tensor | int,
                             source: torch.Tensor | None = None) -> float:
    """Matmul/conv FLOPs of one ``method.explain(x, target, source)`` call divided by ``len(x)``: the method's cost per
    counterfactual, the final validity check included (elementwise work is not counted)."""
    return count_flops(lambda: method.explain(x, target, source=source)) / len(x)


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run the block on ``threads`` torch threads (None: leave the count alone), restoring the count afterwards."""
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def matmul_peak_gflops(threads: int | None = None, size: int = 2048, repeats: int = 5) -> float:
    """This CPU's fp32 matmul rate in GFLOP/s, the best of ``repeats`` timed ``size``×``size`` ``torch.mm`` calls
    (2·size³ FLOPs each) after a warm-up, on ``threads`` torch threads (None: torch's current count): the peak
    a method's achieved rate is a fraction of."""
    if size < 1 or repeats < 1:
        raise ValueError(f"size and repeats must be >= 1, got size={size}, repeats={repeats}.")
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.rand(size, size, generator=generator) for _ in range(2))
    out = torch.empty(size, size)
    best = math.inf
    with torch_threads(threads):
        torch.mm(a, b, out=out)  # warm-up: thread pool, BLAS kernel selection, pages of `out`
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b, out=out)
            best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / max(best, 1e-9) / 1e9
