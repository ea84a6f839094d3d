"""Distances between image sets in the feature space of the zoo's ``features`` network (torchmetrics).

FID and KID here are *not* Inception-based: they compare within the kit only. They live in the zoo,
beside the network that defines the space, so zoo models (the GAN) can be judged with them too.
"""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import torch
from torch import nn

from ..common.batching import INFERENCE_BATCH
from ..common.devices import model_device
from ..common.validate import check_images
from ..errors import InputError

if TYPE_CHECKING:  # imported where a distance is computed: torchmetrics pulls in torchvision's models (seconds)
    from torchmetrics.image.fid import FrechetInceptionDistance
    from torchmetrics.image.kid import KernelInceptionDistance



class FeatureExtractor(nn.Module):
    """Adapts the ``features`` network to torchmetrics: forward gives embeddings, ``num_features`` their size."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net.eval()
        self.num_features = int(net.num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.embed(x)


class Precomputed(nn.Module):
    """Identity 'extractor' for torchmetrics: feeds features computed once (and cached) instead of images."""

    def __init__(self, num_features: int) -> None:
        super().__init__()
        self.num_features = num_features

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return features


def embed(extractor: nn.Module, images: torch.Tensor, name: str = "images") -> torch.Tensor:
    """Features of ``images`` in the extractor's space, in batches, without gradients."""
    images = check_images(images, name)
    device = model_device(extractor)  # the extractor's device; the features come back to the CPU
    with torch.inference_mode():
        return torch.cat([extractor(chunk.to(device)).cpu() for chunk in images.split(INFERENCE_BATCH)])


def _feed(metric: FrechetInceptionDistance | KernelInceptionDistance, fake: torch.Tensor, real: torch.Tensor) -> None:
    with torch.inference_mode():
        metric.update(real, real=True)
        metric.update(fake, real=False)


def fid_from_features(fake: torch.Tensor, real: torch.Tensor) -> float:
    """torchmetrics' FID between two sets of features (rows)."""
    if min(len(fake), len(real)) < 2:
        raise InputError("FID needs at least two counterfactuals and two reference images.")
    from torchmetrics.image.fid import FrechetInceptionDistance

    metric = FrechetInceptionDistance(feature=Precomputed(fake.shape[1]), reset_real_features=True)
    _feed(metric, fake, real)
    return float(metric.compute())


def kid_from_features(fake: torch.Tensor, real: torch.Tensor, subsets: int = 100, subset_size: int = 1000,
                      seed: int = 0) -> tuple[float, float]:
    """torchmetrics' KID (mean, std over ``subsets`` random subsets, seeded) between two sets of features."""
    from torchmetrics.image.kid import KernelInceptionDistance

    size = min(subset_size, len(fake), len(real))
    if size < 2:
        raise InputError("KID needs at least two counterfactuals and two reference images.")
    with warnings.catch_warnings():  # its note on buffering every feature: a few thousand rows here
        warnings.filterwarnings("ignore", message=".*will save all extracted features.*")
        metric = KernelInceptionDistance(feature=Precomputed(fake.shape[1]), subsets=subsets, subset_size=size)
    _feed(metric, fake, real)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        mean, std = metric.compute()
    return float(mean), float(std)


def fid(extractor: nn.Module, x_cf: torch.Tensor, reference: torch.Tensor) -> float:
    """Fréchet distance between the feature statistics of ``x_cf`` and ``reference`` (torchmetrics)."""
    if min(len(x_cf), len(reference)) < 2:
        raise InputError("FID needs at least two counterfactuals and two reference images.")
    return fid_from_features(embed(extractor, x_cf, "x_cf"), embed(extractor, reference, "reference"))


def kid(
    extractor: nn.Module, x_cf: torch.Tensor, reference: torch.Tensor, subsets: int = 100,
    subset_size: int = 1000, seed: int = 0,
) -> tuple[float, float]:
    """Kernel inception distance (mean, std over ``subsets`` random subsets), seeded (torchmetrics)."""
    if min(len(x_cf), len(reference)) < 2:
        raise InputError("KID needs at least two counterfactuals and two reference images.")
    return kid_from_features(embed(extractor, x_cf, "x_cf"), embed(extractor, reference, "reference"),
                             subsets, subset_size, seed)
