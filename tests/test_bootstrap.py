"""Bootstrap intervals: known answers, the closed-form FID/KID replicates against direct computation,
paired comparisons between methods."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from cfkit.errors import InputError
from cfkit.scoring import bootstrap
from cfkit.zoo.feature_space import fid_from_features


def _fid_numpy(a: np.ndarray, b: np.ndarray) -> float:
    mu1, mu2 = a.mean(0), b.mean(0)
    s1, s2 = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(scipy.linalg.sqrtm(s1 @ s2).real))


def _mmd_numpy(x: np.ndarray, y: np.ndarray) -> float:
    d = x.shape[1]
    kxx, kyy, kxy = ((x @ x.T) / d + 1) ** 3, ((y @ y.T) / d + 1) ** 3, ((x @ y.T) / d + 1) ** 3
    n, m = len(x), len(y)
    return float((kxx.sum() - np.trace(kxx)) / (n * (n - 1)) + (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
                 - 2 * kxy.mean())


@pytest.mark.parametrize(("p", "n"), [(0.3, 1000), (0.9, 400)])
def test_interval_of_a_share_matches_the_normal_approximation(p: float, n: int) -> None:
    """A validity of p over n queries: the 95 % interval is p ± 1.96·√(p(1−p)/n), within bootstrap noise."""
    scores = torch.zeros(n, dtype=torch.float64)
    scores[: round(p * n)] = 1
    low, high = bootstrap.interval(p, bootstrap.mean_replicates(scores, bootstrap.resample_indices(n, 2000)))
    half = 1.96 * math.sqrt(p * (1 - p) / n)
    assert low < p < high
    assert (high - low) / 2 == pytest.approx(half, rel=0.12)
    assert (low + high) / 2 == pytest.approx(p, abs=0.2 * half)


def test_interval_of_a_normal_mean_matches_its_standard_error() -> None:
    generator = torch.Generator().manual_seed(1)
    scores = 2 + 3 * torch.randn(900, generator=generator, dtype=torch.float64)
    mean, error = scores.mean().item(), scores.std().item() / 30
    low, high = bootstrap.interval(mean, bootstrap.mean_replicates(scores, bootstrap.resample_indices(900, 2000)))
    assert low == pytest.approx(mean - 1.96 * error, abs=0.15 * error)
    assert high == pytest.approx(mean + 1.96 * error, abs=0.15 * error)


def test_intervals_are_seeded_and_clipped_to_the_metric_range() -> None:
    scores = torch.tensor([1.0] * 39 + [0.0], dtype=torch.float64)
    first = bootstrap.mean_replicates(scores, bootstrap.resample_indices(40, seed=3))
    again = bootstrap.mean_replicates(scores, bootstrap.resample_indices(40, seed=3))
    other = bootstrap.mean_replicates(scores, bootstrap.resample_indices(40, seed=4))
    assert torch.equal(first, again) and not torch.equal(first, other)
    low, high = bootstrap.interval(0.975, first, bounds=(0, 1))
    assert high == 1 and low < 0.975
    with pytest.raises(InputError, match="at least 2 queries"):
        bootstrap.resample_indices(1)


@pytest.mark.parametrize(("n", "d"), [(300, 16), (20, 64)])  # the d×d and the n×n route of the closed form
def test_fid_replicates_equal_fid_of_the_resampled_features(n: int, d: int) -> None:
    generator = torch.Generator().manual_seed(0)
    fake = torch.randn(n, d, generator=generator, dtype=torch.float64) + 0.3
    real = 1.2 * torch.randn(2 * n, d, generator=generator, dtype=torch.float64)
    reference = bootstrap.FrechetReference(real)
    assert reference.distance(fake) == pytest.approx(_fid_numpy(fake.numpy(), real.numpy()), rel=1e-6)
    assert reference.distance(fake) == pytest.approx(fid_from_features(fake, real), rel=1e-4)
    indices = bootstrap.resample_indices(n, 20, seed=5)
    replicates = reference.distances(fake, bootstrap.counts(indices))
    for b in (0, 7, 19):
        assert replicates[b].item() == pytest.approx(_fid_numpy(fake[indices[b]].numpy(), real.numpy()), rel=1e-6)


def test_kid_replicates_equal_the_unbiased_mmd_of_the_resampled_features() -> None:
    generator = torch.Generator().manual_seed(2)
    fake = torch.randn(50, 8, generator=generator, dtype=torch.float64)
    real = torch.randn(70, 8, generator=generator, dtype=torch.float64) + 0.5
    reference = bootstrap.KernelReference(real)
    indices = bootstrap.resample_indices(50, 10, seed=1)
    replicates = reference.distances(fake, bootstrap.counts(indices))
    full = reference.distances(fake, torch.ones(1, 50, dtype=torch.float64)).item()
    assert full == pytest.approx(_mmd_numpy(fake.numpy(), real.numpy()), rel=1e-9)
    assert replicates[3].item() == pytest.approx(_mmd_numpy(fake[indices[3]].numpy(), real.numpy()), rel=1e-9)


def test_paired_difference_finds_a_real_shift_and_not_a_null_one() -> None:
    generator = torch.Generator().manual_seed(0)
    base = torch.rand(500, generator=generator, dtype=torch.float64)
    indices = bootstrap.resample_indices(500)
    shifted = base + 0.05 + 0.01 * torch.randn(500, generator=generator, dtype=torch.float64)
    a, b = (bootstrap.mean_replicates(s, indices) for s in (shifted, base))
    verdict = bootstrap.paired_difference(shifted.mean().item(), a, base.mean().item(), b)
    assert verdict["significant"] and verdict["p_value"] < 0.01 and verdict["lo"] > 0
    assert verdict["difference"] == pytest.approx(0.05, abs=0.003)
    same = bootstrap.paired_difference(base.mean().item(), b, base.mean().item(), b)
    assert not same["significant"] and same["p_value"] == 1.0 and same["lo"] == same["hi"] == 0
    with pytest.raises(InputError, match="same resamples"):
        bootstrap.paired_difference(0.0, a, 0.0, a[:10])


def test_sample_size_note_warns_where_fids_do_not_compare() -> None:
    from cfkit.scoring.metrics import sample_size_note

    full = [{"pair": "4->9", "n": 982, "n_inception": 100}, {"pair": "4->9", "n": 982, "n_inception": 100}]
    assert sample_size_note(full) == "Sample sizes. 4->9: FID/KID at n = 982; Inception at n = 100"
    small = sample_size_note([{"pair": "4->9", "n": 20}, {"pair": "4->9", "n": 40}, {"pair": "mean", "n": 60}])
    assert "n = 20, 40" in small and "UNEQUAL n" in small and "not comparable with the full-size table" in small


def test_ratio_replicates_equal_the_ratio_of_sums_of_each_resample() -> None:
    generator = torch.Generator().manual_seed(3)
    numerator, denominator = torch.rand(40, generator=generator), torch.rand(40, generator=generator) + 0.5
    indices = bootstrap.resample_indices(40, 50, seed=1)
    direct = torch.tensor([numerator[row].sum() / denominator[row].sum() for row in indices], dtype=torch.float64)
    assert torch.allclose(bootstrap.ratio_replicates(numerator, denominator, indices), direct)
