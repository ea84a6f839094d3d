"""Each metric against an independent computation whose answer is known or computed another way."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch

from cfkit.errors import InputError
from cfkit.scoring import metrics
from cfkit.scoring.metrics import (
    FeatureExtractor,
    MetricModels,
    agreement_scores,
    cout_scores,
    fid,
    im1_ratio_of_sums,
    im1_scores,
    im2_scores,
    kid,
    proximity_scores,
    sparsity_scores,
)
from cfkit.scoring.pairs import evaluate_pair, mean_row
from cfkit.zoo.checkpoints import load


def _images(n: int = 6, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 1, 28, 28, generator=torch.Generator().manual_seed(seed))


def test_im1_with_hand_built_autoencoders(scale) -> None:
    x = _images()
    norm = x.flatten(1).pow(2).sum(1)
    # AE_t(x) = 0.5x -> ‖0.5x‖²; AE_o(x) = 0 -> ‖x‖²: IM1 = 0.25 exactly
    scores = im1_scores(x, torch.full((6,), 9), torch.full((6,), 4), {9: scale(0.5), 4: scale(0.0)})
    assert torch.allclose(scores, 0.25 * norm / (norm + metrics.EPS))
    # swapping the roles gives 4
    scores = im1_scores(x, torch.full((6,), 4), torch.full((6,), 9), {9: scale(0.5), 4: scale(0.0)})
    assert torch.allclose(scores, 4 * torch.ones(6), rtol=1e-5)
    # a perfect target autoencoder scores 0
    assert im1_scores(x, torch.full((6,), 9), torch.full((6,), 4), {9: scale(1.0), 4: scale(0.0)}).max() == 0


def test_im1_routes_each_image_to_its_own_class_autoencoders(scale) -> None:
    x = _images(4)
    target, source = torch.tensor([9, 8, 9, 8]), torch.tensor([4, 3, 4, 3])
    aes = {9: scale(1.0), 8: scale(0.0), 4: scale(0.0), 3: scale(0.0)}
    scores = im1_scores(x, target, source, aes)
    assert scores[[0, 2]].max() == 0 and torch.allclose(scores[[1, 3]], torch.ones(2), rtol=1e-5)
    with pytest.raises(InputError, match="no target autoencoder for class 7"):
        im1_scores(x, torch.full((4,), 7), source, aes)


def test_im1_ratio_of_sums_against_a_numpy_computation(scale) -> None:
    """Σ‖x − AE_t(x)‖² / Σ‖x − AE_o(x)‖² over the set, computed image by image in numpy; below the mean of
    per-image ratios here because the denominators vary."""
    x = _images(5).numpy()
    x[0] *= 0.1  # one faint image: small numerator and denominator, a ratio that counts fully in the mean
    target, source = np.array([9, 9, 8, 9, 8]), np.array([4, 4, 3, 4, 3])
    factors = {9: 0.5, 8: 0.2, 4: 0.1, 3: 0.6}  # AE_d(x) = factor_d · x
    numerators = [((x[i] - factors[target[i]] * x[i]) ** 2).sum() for i in range(5)]
    denominators = [((x[i] - factors[source[i]] * x[i]) ** 2).sum() for i in range(5)]
    aes = {d: scale(f) for d, f in factors.items()}
    expected = sum(numerators) / sum(denominators)
    got = im1_ratio_of_sums(torch.tensor(x), torch.tensor(target), torch.tensor(source), aes)
    assert got == pytest.approx(expected, rel=1e-5)
    assert got != pytest.approx(im1_scores(torch.tensor(x), torch.tensor(target), torch.tensor(source), aes)
                                .mean().item(), rel=1e-3)


def test_im1_sum_column_and_its_interval_resample_the_terms(fours_and_nines) -> None:
    fours, nines = fours_and_nines
    models = MetricModels.from_zoo(inception=False)
    row = evaluate_pair(fours, nines, 4, 9, nines, models)
    target, source = torch.full((64,), 9), torch.full((64,), 4)
    assert row["im1_sum"] == pytest.approx(im1_ratio_of_sums(nines, target, source, models.autoencoders), rel=1e-6)
    assert row["im1_sum_lo"] < row["im1_sum"] < row["im1_sum_hi"]
    # the calibrated column follows its setting's aggregation
    models.calibrated_aggregation = "sum"
    summed = evaluate_pair(fours, nines, 4, 9, nines, models)
    assert summed["im1_calibrated"] == pytest.approx(
        im1_ratio_of_sums(nines, target, source, models.calibrated), rel=1e-6)
    models.calibrated_aggregation = "mean"
    assert evaluate_pair(fours, nines, 4, 9, nines, models)["im1_calibrated"] == pytest.approx(
        im1_scores(nines, target, source, models.calibrated).mean().item(), rel=1e-6)


def test_im2_with_hand_built_autoencoders(scale) -> None:
    x = _images()
    # AE_t(x) = x, AE_all(x) = 0 -> ‖x‖² / ‖x‖₁
    expected = x.flatten(1).pow(2).sum(1) / (x.flatten(1).abs().sum(1) + metrics.EPS)
    assert torch.allclose(im2_scores(x, torch.full((6,), 9), {9: scale(1.0)}, scale(0.0)), expected)
    assert im2_scores(x, torch.full((6,), 9), {9: scale(0.3)}, scale(0.3)).max() == 0


def test_im1_of_real_digits_favours_their_own_autoencoder(fours_and_nines) -> None:
    fours, nines = fours_and_nines
    aes = {d: load(f"ae_{d}") for d in range(10)}
    nines_as_nines = im1_scores(nines, torch.full((64,), 9), torch.full((64,), 4), aes).mean()
    fours_as_nines = im1_scores(fours, torch.full((64,), 9), torch.full((64,), 4), aes).mean()
    assert nines_as_nines < 1 < fours_as_nines


def test_proximity_and_sparsity_by_hand() -> None:
    x = torch.zeros(2, 1, 28, 28)
    x_cf = x.clone()
    x_cf[0, 0, :2, :] = 0.5  # 56 pixels changed by 0.5
    x_cf[1, 0, 0, :14] = 0.05  # 14 pixels changed by 0.05, below the sparsity threshold
    assert torch.allclose(proximity_scores(x, x_cf), torch.tensor([56 * 0.5 / 784, 14 * 0.05 / 784]))
    assert torch.allclose(sparsity_scores(x, x_cf), torch.tensor([56 / 784, 0.0]))
    with pytest.raises(InputError, match="one x_cf per x"):
        proximity_scores(x, x_cf[:1])


class Brightness(torch.nn.Module):
    """Hand-built classifier: logit of class 9 grows with total ink, class 4 fixed at 0."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = torch.full((x.shape[0], 10), -50.0)
        logits[:, 4] = 0.0
        logits[:, 9] = x.flatten(1).sum(1) - 100.0
        return logits


def test_agreement_uses_the_models_argmax(fours_and_nines) -> None:
    x = torch.zeros(3, 1, 28, 28)
    x[1] = 1.0  # 784 ink -> class 9
    assert agreement_scores(Brightness(), x, 9).tolist() == [False, True, False]
    fours, nines = fours_and_nines
    assert agreement_scores(load("classifier"), nines, 9).float().mean() > 0.95
    assert agreement_scores(load("oracle"), fours, 9).float().mean() < 0.05


def _reference_cout(model, x, x_cf, source, target, steps=50):
    """C3LT's COUT written the slow way: one image at a time, NumPy trapezoid over the inserted fraction."""
    out = []
    pixels = 784
    chunk = pixels // steps
    for i in range(len(x)):
        diff = (x_cf[i] - x[i]).abs().flatten().numpy()
        order = np.argsort(-diff, kind="stable")
        counts = list(range(0, pixels, chunk)) + [pixels]
        pt, ps = [], []
        for count in counts:
            mask = np.zeros(pixels, dtype=np.float32)
            mask[order[:count]] = 1
            mask = torch.from_numpy(mask).view(1, 1, 28, 28)
            probs = torch.softmax(model(x_cf[i : i + 1] * mask + x[i : i + 1] * (1 - mask)), 1)[0]
            pt.append(probs[target].item())
            ps.append(probs[source].item())
        fraction = np.array(counts) / pixels
        out.append(np.trapezoid(pt, fraction) - np.trapezoid(ps, fraction))
    return np.array(out)


def test_cout_against_a_per_image_reference(fours_and_nines) -> None:
    fours, nines = fours_and_nines
    classifier = load("classifier")
    got = cout_scores(classifier, fours[:5], nines[:5], 4, 9).numpy()
    assert np.allclose(got, _reference_cout(classifier, fours[:5], nines[:5], 4, 9), atol=1e-5)


def test_cout_known_answers() -> None:
    x = torch.zeros(1, 1, 28, 28)
    # identical images: the curve never moves, COUT = p9(x) - p4(x) = 0 - 1 = -1 for the Brightness model
    assert cout_scores(Brightness(), x, x, 4, 9).item() == pytest.approx(-1.0, abs=1e-6)
    # inserting white pixels 15 at a time: p9 jumps from ~0 (90 inserted) to ~1 (105): AUC9 = (784 - 97.5) / 784
    x_cf = torch.ones(1, 1, 28, 28)
    value = cout_scores(Brightness(), x, x_cf, 4, 9).item()
    assert -1 < value < 1 and value == pytest.approx(1 - 2 * 97.5 / 784, abs=0.01)
    with pytest.raises(InputError, match="target equals the query class"):
        cout_scores(Brightness(), x, x_cf, 4, 4)


def _features(extractor, x):
    with torch.inference_mode():
        return extractor(x).double().numpy()


def test_fid_against_scipy_frechet_distance(fours_and_nines) -> None:
    extractor = FeatureExtractor(load("features"))
    fours, nines = fours_and_nines
    a, b = _features(extractor, nines), _features(extractor, fours)
    mu_a, mu_b = a.mean(0), b.mean(0)
    cov_a, cov_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    covmean = scipy.linalg.sqrtm(cov_a @ cov_b).real
    expected = ((mu_a - mu_b) ** 2).sum() + np.trace(cov_a + cov_b - 2 * covmean)
    assert fid(extractor, fours, nines) == pytest.approx(expected, rel=1e-3)
    assert fid(extractor, nines[:32], nines[32:]) < fid(extractor, fours, nines)


def _mmd2_unbiased(a, b):
    d = a.shape[1]
    k = lambda u, v: (u @ v.T / d + 1) ** 3
    kaa, kbb, kab = k(a, a), k(b, b), k(a, b)
    m = len(a)
    return ((kaa.sum() - np.trace(kaa)) / (m * (m - 1)) + (kbb.sum() - np.trace(kbb)) / (m * (m - 1))
            - 2 * kab.mean())


def test_kid_against_numpy_mmd(fours_and_nines) -> None:
    extractor = FeatureExtractor(load("features"))
    fours, nines = fours_and_nines
    expected = _mmd2_unbiased(_features(extractor, fours), _features(extractor, nines))
    mean, std = kid(extractor, fours, nines, subsets=1, subset_size=64)
    assert mean == pytest.approx(expected, rel=1e-4)
    assert expected > 0.05


def test_kid_of_a_set_with_itself_is_near_zero(fours_and_nines) -> None:
    extractor = FeatureExtractor(load("features"))
    fours, nines = fours_and_nines
    same, _ = kid(extractor, nines, nines, subsets=50, subset_size=32)
    different, _ = kid(extractor, fours, nines, subsets=50, subset_size=32)
    assert abs(same) < 0.05 * different
    assert kid(extractor, fours, nines, subset_size=32, seed=3) == kid(extractor, fours, nines, subset_size=32, seed=3)


def test_fid_and_kid_refuse_tiny_sets(fours_and_nines) -> None:
    extractor = FeatureExtractor(load("features"))
    fours, _ = fours_and_nines
    with pytest.raises(InputError, match="at least two"):
        fid(extractor, fours[:1], fours)
    with pytest.raises(InputError, match="at least two"):
        kid(extractor, fours[:1], fours)


def test_evaluate_pair_row(fours_and_nines) -> None:
    fours, nines = fours_and_nines
    row = evaluate_pair(fours, nines, 4, 9, nines, MetricModels.from_zoo(inception=False), seconds=3.2)
    assert row["n"] == 64 and row["seconds_per_cf"] == pytest.approx(3.2 / 64)
    assert 0.95 <= row["validity"] <= 1 and 0.95 <= row["oracle_agreement"] <= 1
    assert row["im1"] < 1 and 0 < row["cout"] <= 1
    # x_cf is the reference set itself: FID vanishes, KID's unbiased estimate sits just below zero
    assert row["fid"] == pytest.approx(0, abs=1e-3)
    assert abs(row["kid"]) < 0.02 * kid(MetricModels.from_zoo(inception=False).features, fours, nines)[0]
    assert evaluate_pair(fours, nines, 4, 9, nines, MetricModels.from_zoo(inception=False))["seconds_per_cf"] is None
    with pytest.raises(InputError, match="target equals the query class"):
        evaluate_pair(fours, nines, 9, 9, nines, MetricModels.from_zoo(inception=False))


def test_mean_row() -> None:
    rows = [{"n": 2, "im1": 1.0, "seconds_per_cf": None}, {"n": 4, "im1": 2.0, "seconds_per_cf": None}]
    mean = mean_row(rows)
    assert mean["n"] == 6 and mean["im1"] == 1.5 and mean["seconds_per_cf"] is None
