"""Counterfactual metrics: IM1, IM2, FID, KID, validity, oracle agreement, proximity, sparsity, COUT.

Per-image functions (``*_scores``) return one value per counterfactual so that means, intervals
and significance tests can be built on them; :mod:`cfkit.scoring.columns` declares the table's columns with
them and :func:`cfkit.scoring.pairs.evaluate_pair` turns a pair's counterfactuals into one row. IM1 and IM2 are
lower-is-better (Van Looveren & Klaise).
FID/KID live in the feature space of the kit's own ``features`` network (comparable within cfkit
only) and, when its extractor can be had, in Inception-v3's on a fixed subsample (``*_inception``, with
its n). Every metric carries a seeded 95 % bootstrap interval over queries (``<metric>_lo``/``_hi``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..common.batching import INFERENCE_BATCH
from ..common.devices import model_device, resolve_device
from ..common.validate import check_class_ids, check_images, check_targets
from ..errors import InputError
from ..zoo.checkpoints import CALIBRATED_AE, load, read_manifest
from ..zoo.classifiers import fingerprint, load_classifier
from ..zoo.feature_space import FeatureExtractor, fid, kid  # noqa: F401
from ..zoo.inception import INCEPTION_CFS, INCEPTION_REFERENCE, InceptionExtractor, inception_extractor

EPS = 1e-7
SPARSITY_THRESHOLD = 0.1
COUT_STEPS = 50


def _batched(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``model`` on ``x`` in batches on the model's device, the outputs back on the CPU."""
    device = model_device(model)
    with torch.inference_mode():
        return torch.cat([model(chunk.to(device)).cpu() for chunk in x.split(INFERENCE_BATCH)])


def _per_class(
    x: torch.Tensor, classes: torch.Tensor, models: Mapping[int, nn.Module], role: str
) -> torch.Tensor:
    """Apply ``models[c]`` to the images whose class is c, keeping the order of ``x``."""
    out = torch.empty_like(x)
    for c in classes.unique().tolist():
        if c not in models:
            raise InputError(f"no {role} autoencoder for class {c}; pass one in the autoencoders mapping.")
        rows = classes == c
        out[rows] = _batched(models[c], x[rows])
    return out


def _sq_norm(x: torch.Tensor) -> torch.Tensor:
    return x.flatten(1).pow(2).sum(1)


def im1_terms(
    x_cf: torch.Tensor, target: torch.Tensor, source: torch.Tensor, autoencoders: Mapping[int, nn.Module]
) -> tuple[torch.Tensor, torch.Tensor]:
    """IM1's numerator ‖x′ − AE_t(x′)‖² and denominator ‖x′ − AE_o(x′)‖², per image."""
    x_cf = check_images(x_cf, "x_cf")
    target, source = check_class_ids(target, "target"), check_class_ids(source, "source")
    recon_target = _per_class(x_cf, target, autoencoders, "target")
    recon_source = _per_class(x_cf, source, autoencoders, "source")
    return _sq_norm(x_cf - recon_target), _sq_norm(x_cf - recon_source)


def per_image_ratios(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """IM1's terms as one ratio per image (the mean of these is the table's ``im1``)."""
    return numerator / (denominator + EPS)


def ratio_of_sums(numerator: torch.Tensor, denominator: torch.Tensor) -> float:
    """IM1's terms as one ratio for the whole set (``im1_sum``)."""
    return (numerator.double().sum() / (denominator.double().sum() + EPS)).item()


def im1_scores(
    x_cf: torch.Tensor, target: torch.Tensor, source: torch.Tensor, autoencoders: Mapping[int, nn.Module]
) -> torch.Tensor:
    """IM1 per image: ‖x′ − AE_t(x′)‖² / (‖x′ − AE_o(x′)‖² + ε). Below 1: x′ looks more like the target class."""
    return per_image_ratios(*im1_terms(x_cf, target, source, autoencoders))


def im1_ratio_of_sums(
    x_cf: torch.Tensor, target: torch.Tensor, source: torch.Tensor, autoencoders: Mapping[int, nn.Module]
) -> float:
    """IM1 of a whole set as Σ‖x′ − AE_t(x′)‖² / Σ‖x′ − AE_o(x′)‖²: what a batch-level ``mse(x′, AE_t(x′)) /
    mse(x′, AE_o(x′))`` computes. Images that both autoencoders reconstruct badly weigh more than in the mean of
    per-image ratios, so it is lower whenever the denominators vary."""
    return ratio_of_sums(*im1_terms(x_cf, target, source, autoencoders))


def im2_scores(
    x_cf: torch.Tensor, target: torch.Tensor, autoencoders: Mapping[int, nn.Module], ae_all: nn.Module
) -> torch.Tensor:
    """IM2 per image: ‖AE_t(x′) − AE_all(x′)‖² / (‖x′‖₁ + ε)."""
    x_cf = check_images(x_cf, "x_cf")
    target = check_class_ids(target, "target")
    recon_target = _per_class(x_cf, target, autoencoders, "target")
    return _sq_norm(recon_target - _batched(ae_all, x_cf)) / (x_cf.flatten(1).abs().sum(1) + EPS)


def agreement_scores(model: nn.Module, x_cf: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per image, whether ``model`` predicts the target (validity for the classifier, agreement for the oracle)."""
    x_cf = check_images(x_cf, "x_cf")
    target = check_targets(target, x_cf.shape[0])
    return _batched(model, x_cf).argmax(1) == target


def check_same(x: torch.Tensor, x_cf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, x_cf = check_images(x, "x"), check_images(x_cf, "x_cf")
    if x.shape != x_cf.shape:
        raise InputError(f"x has shape {tuple(x.shape)} but x_cf has {tuple(x_cf.shape)}; pass one x_cf per x.")
    return x, x_cf


def proximity_scores(x: torch.Tensor, x_cf: torch.Tensor) -> torch.Tensor:
    """Mean absolute pixel change per image (lower: closer to the query)."""
    x, x_cf = check_same(x, x_cf)
    return (x_cf - x).abs().flatten(1).mean(1)


def sparsity_scores(x: torch.Tensor, x_cf: torch.Tensor, threshold: float = SPARSITY_THRESHOLD) -> torch.Tensor:
    """Share of pixels changed by more than ``threshold`` per image (lower: sparser edit)."""
    x, x_cf = check_same(x, x_cf)
    return ((x_cf - x).abs().flatten(1) > threshold).float().mean(1)


def cout_scores(
    classifier: nn.Module,
    x: torch.Tensor,
    x_cf: torch.Tensor,
    source: torch.Tensor | int,
    target: torch.Tensor | int,
    steps: int = COUT_STEPS,
) -> torch.Tensor:
    """Counterfactual transition (C3LT): insert x′'s pixels into x in order of |x′ − x|, largest first.

    Along the way record p(target) and p(source); COUT = AUC(p_target) − AUC(p_source) over the
    inserted fraction in [0, 1], trapezoid rule, ``steps`` insertions of ⌊784/steps⌋ pixels (the
    C3LT code's setting). Range [-1, 1]; higher means the edit moves the decision sooner.
    """
    x, x_cf = check_same(x, x_cf)
    n, pixels = x.shape[0], x[0].numel()
    source = check_targets(source, n)
    target = check_targets(target, n, source=source)
    chunk = max(1, pixels // steps)
    order = (x_cf - x).abs().flatten(1).argsort(dim=1, descending=True, stable=True)
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(pixels).expand(n, -1))
    counts = list(range(0, pixels, chunk)) + [pixels]
    rows = torch.arange(n)
    p_target, p_source = [], []
    with torch.inference_mode():
        for count in counts:
            mask = (rank < count).float().view_as(x)
            probs = F.softmax(_batched(classifier, x_cf * mask + x * (1 - mask)), dim=1)
            p_target.append(probs[rows, target])
            p_source.append(probs[rows, source])
    fraction = torch.tensor(counts, dtype=torch.float32) / pixels
    area_target = torch.trapezoid(torch.stack(p_target, 1), fraction, dim=1)
    return area_target - torch.trapezoid(torch.stack(p_source, 1), fraction, dim=1)


@dataclass
class MetricModels:
    """The trained networks the metrics need; :meth:`from_zoo` loads the shipped ones."""

    classifier: nn.Module
    oracle: nn.Module
    features: nn.Module
    autoencoders: Mapping[int, nn.Module]
    ae_all: nn.Module
    fingerprint: str | None = None
    """The checkpoints' hashes when loaded from the zoo: what a cached score depends on (None: never cached)."""
    inception: InceptionExtractor | None = None
    inception_reason: str = "Inception-space FID/KID not requested"
    """Why the Inception columns are empty when ``inception`` is None."""
    inception_cfs: int = INCEPTION_CFS
    """Counterfactuals a set feeds to Inception, the first ones; 0: every one (the full protocol)."""
    inception_reference: int = INCEPTION_REFERENCE
    calibrated: Mapping[int, nn.Module] | None = None
    """The calibrated setting's per-class autoencoders (``ae_cal_<d>``): IM1/IM2 a second time, labelled."""
    calibrated_aggregation: str = "mean"
    """How the calibrated IM1 aggregates a set: "mean" of per-image ratios or "sum" (ratio of summed errors)."""
    device: str = "cpu"
    """Where the networks run (each batch goes there, the scores come back to the CPU)."""

    @classmethod
    def from_zoo(cls, device: str | None = None, inception: bool = True, classifier: str | nn.Module = "classifier",
                 classifier_weights: str | None = None, inception_cfs: int = INCEPTION_CFS) -> MetricModels:
        """The shipped zoo; ``inception``: also fetch and verify the Inception extractor (its columns stay
        empty, with the reason in ``inception_reason``, when it cannot be had), fed the first ``inception_cfs``
        counterfactuals of a set (0: all of them, the full protocol). ``classifier`` (and its
        weights) is the model under explanation (:func:`cfkit.zoo.classifiers.load_classifier`): validity and COUT
        are measured on it; every other model stays the kit's. ``device`` None: CUDA when present, else the CPU
        (as the methods)."""
        if isinstance(inception_cfs, bool) or not isinstance(inception_cfs, int) or inception_cfs < 0:
            raise InputError(f"inception_cfs must be an int >= 0 (0: every counterfactual), got {inception_cfs!r}.")
        names = (["oracle", "features", "ae_all"] + [f"ae_{d}" for d in range(10)]
                 + [f"ae_cal_{d}" for d in range(10)])
        manifest = read_manifest()
        device = str(resolve_device(device))
        extractor, reason = inception_extractor() if inception else (None, cls.inception_reason)
        extractor = extractor.to(device) if extractor is not None else None
        explained = load_classifier(classifier, classifier_weights, device=device)
        models = cls(
            classifier=explained,
            oracle=load("oracle", device=device),
            features=FeatureExtractor(load("features", device=device)),
            autoencoders={d: load(f"ae_{d}", device=device) for d in range(10)},
            ae_all=load("ae_all", device=device),
            inception=extractor, inception_reason=reason, inception_cfs=inception_cfs,
            calibrated={d: load(f"ae_cal_{d}", device=device) for d in range(10)},
            calibrated_aggregation=CALIBRATED_AE["aggregation"], device=device,
        )
        models.fingerprint = ",".join([f"classifier:{fingerprint(explained)}"]
                                      + [f"{name}:{manifest[name]['sha256']}" for name in names])
        return models

    def score_key(self) -> str | None:
        """What a cached score depends on: checkpoints, and the Inception extractor and subsample sizes."""
        if self.fingerprint is None:
            return None
        space = (f"inception:{self.inception.sha256}:{self.inception_cfs}:{self.inception_reference}"
                 if self.inception is not None else "inception:none")
        return f"{self.fingerprint},{space}"


FULL_PROTOCOL_N = {"4->9": 982, "3->8": 1010, "5->6": 892}
"""Queries per pair in the full protocol: every MNIST test image of the query class."""


def sample_size_note(rows: list[dict]) -> str:
    """What n every FID in ``rows`` was computed at, and a warning where FIDs must not be compared."""
    lines = []
    for pair in dict.fromkeys(r["pair"] for r in rows if r["pair"] != "mean"):
        sizes = sorted({r["n"] for r in rows if r["pair"] == pair})
        inception = sorted({r["n_inception"] for r in rows if r["pair"] == pair and r.get("n_inception")})
        line = f"{pair}: FID/KID at n = {', '.join(map(str, sizes))}"
        if inception:
            line += f"; Inception at n = {', '.join(map(str, inception))}"
        if len(sizes) > 1:
            line += " (UNEQUAL n: do not compare these FIDs across methods)"
        if pair in FULL_PROTOCOL_N and max(sizes) < FULL_PROTOCOL_N[pair]:
            line += f" (below the full protocol's {FULL_PROTOCOL_N[pair]}: FID biased upward, not comparable " \
                    "with the full-size table)"
        lines.append(line)
    return "Sample sizes. " + "; ".join(lines) if lines else "Sample sizes: no rows."
