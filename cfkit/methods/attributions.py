"""Attributions that contrast a query with its counterfactual (captum)."""
from __future__ import annotations

import torch
from captum.attr import IntegratedGradients
from torch import nn

from ..common.validate import check_images, check_targets


def counterfactual_attribution(
    classifier: nn.Module, x: torch.Tensor, x_cf: torch.Tensor, target: torch.Tensor | int, steps: int = 32
) -> torch.Tensor:
    """Integrated Gradients along the straight path from the query (baseline) to the counterfactual.

    Per pixel: how much the change x′ − x contributed to the target logit. By completeness the map
    sums to logit_t(x′) − logit_t(x), so it splits exactly the evidence the edit added.
    """
    x, x_cf = check_images(x, "x"), check_images(x_cf, "x_cf")
    target = check_targets(target, len(x))
    ig = IntegratedGradients(classifier)
    with torch.enable_grad():
        return ig.attribute(x_cf, baselines=x, target=target, n_steps=steps, internal_batch_size=1024).detach()


def input_attribution(classifier: nn.Module, x: torch.Tensor, target: torch.Tensor | int, steps: int = 32
                      ) -> torch.Tensor:
    """Integrated Gradients from a black image to ``x``: which ink makes the classifier say ``target``."""
    return counterfactual_attribution(classifier, torch.zeros_like(check_images(x, "x")), x, target, steps)
