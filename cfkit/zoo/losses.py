"""Loss terms shared by the counterfactual generators the zoo trains (C3LT maps, ExplainGAN).

Both ask for the same things of a counterfactual: that the classifier calls it the target, that
the pixels it changes form a small, smooth, nearly binary mask, and that a discriminator takes it
for a real digit. Each term returns a scalar averaged over the batch.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import InputError


def check_weights(weights: object) -> None:
    """Every numeric field of a loss-weight dataclass must be a number >= 0 (a clear error names the first
    that is not)."""
    for field in dataclasses.fields(weights):
        value = getattr(weights, field.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise InputError(f"{type(weights).__name__}.{field.name} must be a number >= 0, got {value!r}.")


def target_nll(classifier: nn.Module, images: torch.Tensor, target: int) -> torch.Tensor:
    """Negative log-likelihood of ``target`` under the classifier (which returns logits)."""
    labels = torch.full((len(images),), target, dtype=torch.long, device=images.device)
    return F.cross_entropy(classifier(images), labels)


def difference_mask(x: torch.Tensor, x_cf: torch.Tensor) -> torch.Tensor:
    """Squared pixel change, rescaled per image to [0, 1] (C3LT's "mse" mask)."""
    change = (x_cf - x).pow(2).flatten(1)
    low = change.min(1, keepdim=True).values
    high = change.max(1, keepdim=True).values
    return ((change - low) / (high - low + 1e-12)).view_as(x)


def smoothness(mask: torch.Tensor) -> torch.Tensor:
    """Mean squared difference between neighbouring mask values: low for blob-like masks."""
    vertical = (mask[..., 1:, :] - mask[..., :-1, :]).pow(2).flatten(1).mean(1)
    horizontal = (mask[..., :, 1:] - mask[..., :, :-1]).pow(2).flatten(1).mean(1)
    return ((vertical + horizontal) / 2).mean()


def binary_entropy(mask: torch.Tensor) -> torch.Tensor:
    """min(m, 1 − m) averaged: zero for a mask of only 0s and 1s."""
    return torch.minimum(mask, 1 - mask).mean()


def looks_real(critic_logits: torch.Tensor) -> torch.Tensor:
    """Non-saturating generator loss: the critic should call these images real."""
    return F.binary_cross_entropy_with_logits(critic_logits, torch.ones_like(critic_logits))


def critic_loss(real_logits: torch.Tensor, fake_logits: torch.Tensor) -> torch.Tensor:
    """The discriminator's loss: real images real, generated ones fake."""
    return (F.binary_cross_entropy_with_logits(real_logits, torch.ones_like(real_logits))
            + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits)))
