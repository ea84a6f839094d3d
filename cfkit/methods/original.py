"""The "Original Data" reference row: real training images of the target class, no optimisation.

Not an explanation method but the floor every metric is read against: what real digits of the
target class score. Each query is paired with a distinct, randomly drawn (seeded) training image
of its target class, so proximity, sparsity and COUT are those of a random real digit.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..data import load_mnist
from ..errors import InputError
from .base import CounterfactualMethod


class OriginalData(CounterfactualMethod):
    name = "original_data"

    def __init__(self, classifier: nn.Module, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(classifier, batch_size=10**9, **kwargs)  # one draw per call: batching-independent
        self.seed = seed

    def _explain_batch(
        self, x: torch.Tensor, target: torch.Tensor, source: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        generator = torch.Generator().manual_seed(self.seed)
        x_cf = torch.empty_like(x)
        index = torch.empty(len(x), dtype=torch.long)
        train_x, train_y = load_mnist("train")
        for digit in target.unique().tolist():
            rows = (target == digit).nonzero().flatten().cpu()
            pool = (train_y == digit).nonzero().flatten()
            if len(rows) > len(pool):
                raise InputError(f"asked for {len(rows)} real images of digit {digit}; only {len(pool)} exist.")
            chosen = pool[torch.randperm(len(pool), generator=generator)[: len(rows)]]
            x_cf[rows.to(x.device)] = train_x[chosen].to(x.device)
            index[rows] = chosen
        return x_cf, {"train_index": index}
