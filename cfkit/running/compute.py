"""The compute floor: FLOPs a method spends per counterfactual, and this CPU's fp32 peak to hold them against.

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

from ..methods.base import CounterfactualMethod


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


def _best_gflops(run: Callable[[], Any], flops: float, threads: int | None, repeats: int) -> float:
    """``flops`` over the fastest of ``repeats`` timed calls of ``run`` after a warm-up, in GFLOP/s."""
    best = math.inf
    with torch_threads(threads):
        run()  # warm-up: thread pool, kernel selection, pages of the output
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
    return flops / max(best, 1e-9) / 1e9


def matmul_peak_gflops(threads: int | None = None, size: int = 2048, repeats: int = 5) -> float:
    """This CPU's fp32 rate in ``torch.mm`` (BLAS: MKL in the torch wheels) in GFLOP/s, the best of ``repeats``
    timed ``size``×``size`` products (2·size³ FLOPs each) after a warm-up, on ``threads`` torch threads (None:
    torch's current count)."""
    if size < 1 or repeats < 1:
        raise ValueError(f"size and repeats must be >= 1, got size={size}, repeats={repeats}.")
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.rand(size, size, generator=generator) for _ in range(2))
    out = torch.empty(size, size)
    return _best_gflops(lambda: torch.mm(a, b, out=out), 2 * size ** 3, threads, repeats)


def conv_peak_gflops(threads: int | None = None, channels: int = 512, side: int = 32, batch: int = 8,
                     repeats: int = 3) -> float:
    """This CPU's fp32 rate in a large 3×3 convolution (oneDNN's implicit matrix multiply, the kernels the zoo's
    networks run on) in GFLOP/s, timed like :func:`matmul_peak_gflops`. On AMD CPUs MKL's ``torch.mm`` takes a
    narrower code path than oneDNN: 217 against 490 GFLOP/s on the 2-core EPYC (2 threads, 2026-12-06)."""
    if min(channels, side, batch, repeats) < 1:
        raise ValueError(f"channels, side, batch and repeats must be >= 1, got {channels}, {side}, {batch}, {repeats}.")
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(batch, channels, side, side, generator=generator)
    weight = torch.rand(channels, channels, 3, 3, generator=generator)
    flops = 2 * batch * channels * channels * 9 * side * side
    with torch.inference_mode():
        return _best_gflops(lambda: torch.nn.functional.conv2d(x, weight, padding=1), flops, threads, repeats)


def peak_gflops(threads: int | None = None) -> dict[str, float]:
    """This CPU's measured fp32 peak on ``threads``: the faster of a large matmul and a large convolution (the
    ``peak``), with both rates, so that a method's achieved rate is never held against an understated peak."""
    rates = {"matmul": matmul_peak_gflops(threads), "conv": conv_peak_gflops(threads)}
    return {**rates, "peak": max(rates.values())}
