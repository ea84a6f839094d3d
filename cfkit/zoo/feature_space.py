"""Distances between image sets in the feature space of the zoo's ``features`` network (torchmetrics).

FID and KID here are *not* Inception-based: they compare within the kit only. They live in the zoo,
beside the network that defines the space, so zoo models (the GAN) can be judged with them too.
"""
from __future__ import annotations

import warnings

import torch
from torch import nn
from torchmetrics.image.fid import FrechetInceptionDistance
from torchmetrics.image.kid import KernelInceptionDistance

from ..errors import InputError
from ..validate import check_images

BATCH = 1000


class FeatureExtractor(nn.Module):
    """Adapts the ``features`` network to torchmetrics: forward gives embeddings, ``num_features`` their size."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net.eval()
        self.num_features = int(net.num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.embed(x)


def _feed(metric: FrechetInceptionDistance | KernelInceptionDistance, fake: torch.Tensor, real: torch.Tensor) -> None:
    fake, real = check_images(fake, "x_cf"), check_images(real, "reference")
    with torch.inference_mode():
        for chunk in real.split(BATCH):
            metric.update(chunk, real=True)
        for chunk in fake.split(BATCH):
            metric.update(chunk, real=False)


def fid(extractor: nn.Module, x_cf: torch.Tensor, reference: torch.Tensor) -> float:
    """Fréchet distance between the feature statistics of ``x_cf`` and ``reference`` (torchmetrics)."""
    if min(len(x_cf), len(reference)) < 2:
        raise InputError("FID needs at least two counterfactuals and two reference images.")
    metric = FrechetInceptionDistance(feature=extractor, reset_real_features=True)
    _feed(metric, x_cf, reference)
    return float(metric.compute())


def kid(
    extractor: nn.Module, x_cf: torch.Tensor, reference: torch.Tensor, subsets: int = 100,
    subset_size: int = 1000, seed: int = 0,
) -> tuple[float, float]:
    """Kernel inception distance (mean, std over ``subsets`` random subsets), seeded (torchmetrics)."""
    size = min(subset_size, len(x_cf), len(reference))
    if size < 2:
        raise InputError("KID needs at least two counterfactuals and two reference images.")
    with warnings.catch_warnings():  # its note on buffering every feature: a few thousand 128-d rows here
        warnings.filterwarnings("ignore", message=".*will save all extracted features.*")
        metric = KernelInceptionDistance(feature=extractor, subsets=subsets, subset_size=size)
    _feed(metric, x_cf, reference)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        mean, std = metric.compute()
    return float(mean), float(std)
