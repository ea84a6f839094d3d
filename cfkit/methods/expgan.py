"""ExpGAN: ExplainGAN's masked transformations (Samangouei et al., ECCV 2018), one model per pair.

The pair's generator (:mod:`cfkit.zoo.explaingan`) writes a digit of the target class T_t(x) and a
mask m from the query; the counterfactual keeps the query outside the mask:
x′ = m·T_t(x) + (1 − m)·x. Explaining is one forward pass. ``mask_threshold`` zeroes mask values
below it, to show which part of the edit the decision hangs on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..zoo import explaingan
from .base import PerPairMethod, pair_groups
from .knobs import unit_interval


@dataclass(frozen=True)
class ExpGANConfig:
    mask_threshold: float = 0.0  # mask values below this are set to 0 (0 keeps the mask as trained)

    def __post_init__(self) -> None:
        unit_interval("mask_threshold", self.mask_threshold)


class ExpGAN(PerPairMethod):
    name = "expgan"
    family = explaingan.FAMILY
    config_type = ExpGANConfig

    def _explain_batch(
        self, x: torch.Tensor, target: torch.Tensor, source: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        mask, transformed = torch.empty_like(x), torch.empty_like(x)
        with torch.inference_mode():
            for pair, rows in pair_groups(source, target):
                _, mask[rows], transformed[rows] = self.pair_model(pair).generator(x[rows], to=1)
            mask = torch.where(mask >= self.config.mask_threshold, mask, torch.zeros_like(mask))
            x_cf = mask * transformed + (1 - mask) * x
        return x_cf, {"mask": mask, "transformed": transformed}
