"""How sure is each number? Seeded bootstrap over queries: intervals for every metric, paired method tests.

Every set of a pair has the same queries in the same order, so resampling *query positions* with one seeded
index matrix per (n, seed) pairs the methods automatically: replicate b of method A and replicate b of
method B saw the same queries. Per-image metrics (IM1, validity, …) are means of per-image scores; FID and
KID are recomputed on each resample from cached features (closed forms below, against a fixed reference).

Intervals are *centred percentile* intervals: the replicates are shifted so their mean equals the point
estimate, then the 2.5 % and 97.5 % quantiles are read. Resampling with replacement duplicates queries,
which biases set statistics such as FID upward; centring removes that shift and keeps the interval around
the number the table shows.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from ..errors import InputError

RESAMPLES = 500
"""Bootstrap replicates per set: enough for a 95 % percentile interval to move by < 1 % of its width."""
LEVEL = 0.95
KERNEL_DEGREE = 3  # KID's polynomial kernel (x·y/d + 1)^3, as torchmetrics and Bińkowski et al.


@lru_cache(maxsize=8)
def _indices(n: int, resamples: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, n, (resamples, n), generator=generator)


def resample_indices(n: int, resamples: int = RESAMPLES, seed: int = 0) -> torch.Tensor:
    """(resamples, n) query positions drawn with replacement; the same for every set of size n and seed."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise InputError(f"a bootstrap needs at least 2 queries, got n={n!r}.")
    return _indices(n, resamples, seed)


def counts(indices: torch.Tensor) -> torch.Tensor:
    """How often each query is drawn in each replicate: (resamples, n) float64."""
    n = indices.shape[1]
    out = torch.zeros(indices.shape[0], n, dtype=torch.float64)
    return out.scatter_add_(1, indices, torch.ones_like(indices, dtype=torch.float64))


def mean_replicates(scores: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The mean of per-image ``scores`` on each resample."""
    return scores.double()[indices].mean(1)


def ratio_replicates(numerator: torch.Tensor, denominator: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Σ numerator / Σ denominator on each resample: a set-level ratio such as IM1's ratio of sums."""
    weights = counts(indices)
    return (weights @ numerator.double()) / (weights @ denominator.double())


def interval(point: float, replicates: torch.Tensor, level: float = LEVEL,
             bounds: tuple[float | None, float | None] = (None, None)) -> tuple[float, float]:
    """Centred percentile interval: quantiles of the replicates shifted to have mean ``point``, clipped to
    the metric's ``bounds`` (a share cannot exceed 1 however the replicates are shifted)."""
    centred = replicates.double() - replicates.double().mean() + point
    tail = (1 - level) / 2
    low, high = torch.quantile(centred, torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
    floor, ceiling = bounds
    if floor is not None:
        low, high = max(low, floor), max(high, floor)
    if ceiling is not None:
        low, high = min(low, ceiling), min(high, ceiling)
    return low, high


# ----------------------------------------------------------------- FID
def _moments(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    features = features.double()
    return features.mean(0), torch.cov(features.T)


def _psd_sqrt(matrix: torch.Tensor) -> torch.Tensor:
    values, vectors = torch.linalg.eigh(matrix)
    return (vectors * values.clamp(min=0).sqrt()) @ vectors.T


class FrechetReference:
    """The reference side of FID, computed once: mean, trace of the covariance and its square root."""

    def __init__(self, features: torch.Tensor) -> None:
        if len(features) < 2:
            raise InputError("FID needs at least two reference images.")
        self.mean, covariance = _moments(features)
        self.trace = covariance.trace()
        self.root = _psd_sqrt(covariance)

    def state(self) -> dict[str, torch.Tensor]:
        """What :meth:`from_state` needs: the square root is the costly part (seconds at 2048 features)."""
        return {"mean": self.mean, "trace": self.trace, "root": self.root}

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor]) -> FrechetReference:
        """The reference :meth:`state` describes, without recomputing its square root."""
        reference = cls.__new__(cls)
        reference.mean, reference.trace, reference.root = state["mean"], state["trace"], state["root"]
        return reference

    def distances(self, features: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """FID of each weighted resample of ``features`` (weights: (B, n) counts summing to n) to the reference.

        ‖μ_w − μ_r‖² + tr Σ_w + tr Σ_r − 2 tr (Σ_r^½ Σ_w Σ_r^½)^½, and the last trace is the nuclear norm of the
        centred, Σ_r^½-whitened resample: its singular values come from the smaller of its two Gram matrices.
        """
        features = features.double()
        n, d = features.shape
        if n < 2:
            raise InputError("FID needs at least two counterfactuals.")
        projected = features @ self.root  # rows h_i = Σ_r^½ f_i
        gram_all = projected @ projected.T if n <= d else None
        means = weights @ features / n  # (B, d)
        centred_sq = weights @ features.pow(2).sum(1) - n * means.pow(2).sum(1)  # (n - 1) tr Σ_w
        out = []
        for w, mean, sq in zip(weights.split(50), means.split(50), centred_sq.split(50)):
            if gram_all is not None:  # n×n: √w_i √w_j (h_i − m)·(h_j − m), m the resample's mean of h
                along = w @ gram_all / n  # h_i · m
                middle = (along * w).sum(1) / n  # m · m
                centred = gram_all - along.unsqueeze(2) - along.unsqueeze(1) + middle[:, None, None]
                gram = w.sqrt().unsqueeze(2) * centred * w.sqrt().unsqueeze(1)
            else:  # d×d: Σ_i w_i h_i h_iᵀ − n m mᵀ
                projected_mean = mean @ self.root
                gram = torch.einsum("bn,nd,ne->bde", w, projected, projected) - n * torch.einsum(
                    "bd,be->bde", projected_mean, projected_mean)
            singular = torch.linalg.eigvalsh(gram / (n - 1)).clamp(min=0).sqrt().sum(1)
            out.append((mean - self.mean).pow(2).sum(1) + sq / (n - 1) + self.trace - 2 * singular)
        return torch.cat(out)

    def distance(self, features: torch.Tensor) -> float:
        return self.distances(features, torch.ones(1, len(features), dtype=torch.float64)).item()


# ----------------------------------------------------------------- KID
def _kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a @ b.T / a.shape[1] + 1) ** KERNEL_DEGREE


class KernelReference:
    """The reference side of KID, computed once: its features and the real-real term of the unbiased MMD²."""

    def __init__(self, features: torch.Tensor) -> None:
        m = len(features)
        if m < 2:
            raise InputError("KID needs at least two reference images.")
        self.features = features.double()
        k = _kernel(self.features, self.features)
        self.real_term = (k.sum() - k.trace()) / (m * (m - 1))

    def distances(self, features: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Unbiased MMD² (polynomial kernel) of each weighted resample of ``features`` to the reference."""
        features = features.double()
        n = len(features)
        if n < 2:
            raise InputError("KID needs at least two counterfactuals.")
        k_ff = _kernel(features, features)
        fake_term = ((weights @ k_ff * weights).sum(1) - weights @ k_ff.diagonal()) / (n * (n - 1))
        cross_term = weights @ _kernel(features, self.features).sum(1) / (n * len(self.features))
        return fake_term + self.real_term - 2 * cross_term


# ----------------------------------------------------------------- comparisons
def paired_difference(point_a: float, replicates_a: torch.Tensor, point_b: float, replicates_b: torch.Tensor,
                      level: float = LEVEL) -> dict[str, float]:
    """A − B on the same resampled queries: the difference, its centred interval and a two-sided bootstrap
    p-value (twice the share of centred replicates on the far side of zero; its resolution is 2 / resamples,
    so 0 reads "below 0.004" at 500 resamples)."""
    if replicates_a.shape != replicates_b.shape:
        raise InputError("paired replicates must come from the same resamples (same n and seed).")
    difference = point_a - point_b
    spread = replicates_a.double() - replicates_b.double()
    centred = spread - spread.mean() + difference
    low, high = interval(difference, spread, level)
    p_value = min(1.0, 2 * min((centred <= 0).double().mean().item(), (centred >= 0).double().mean().item()))
    return {"difference": difference, "lo": low, "hi": high, "p_value": p_value,
            "significant": bool(low > 0 or high < 0)}
