"""Counterfactual metrics: IM1, IM2, FID, KID, validity, oracle agreement, proximity, sparsity, COUT.

Per-image functions (``*_scores``) return one value per counterfactual so that means, intervals
and significance tests can be built on them; :func:`evaluate_pair` turns a pair's counterfactuals
into one row of the results table. IM1 and IM2 are lower-is-better (Van Looveren & Klaise).
FID/KID live in the feature space of the kit's own ``features`` network, not Inception's:
values are comparable within cfkit only.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .errors import InputError
from .validate import check_class_ids, check_images, check_targets
from .zoo.feature_space import FeatureExtractor, fid, kid  # noqa: F401  (part of the metrics API)

EPS = 1e-7
SPARSITY_THRESHOLD = 0.1
COUT_STEPS = 50
BATCH = 256  # the classifier's fastest batch on 2 CPU threads (0.15 ms per image at 256, 0.19 at 1000)


def _batched(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return torch.cat([model(chunk) for chunk in x.split(BATCH)])


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


def im1_scores(
    x_cf: torch.Tensor, target: torch.Tensor, source: torch.Tensor, autoencoders: Mapping[int, nn.Module]
) -> torch.Tensor:
    """IM1 per image: ‖x′ − AE_t(x′)‖² / (‖x′ − AE_o(x′)‖² + ε). Below 1: x′ looks more like the target class."""
    x_cf = check_images(x_cf, "x_cf")
    target, source = check_class_ids(target, "target"), check_class_ids(source, "source")
    recon_target = _per_class(x_cf, target, autoencoders, "target")
    recon_source = _per_class(x_cf, source, autoencoders, "source")
    return _sq_norm(x_cf - recon_target) / (_sq_norm(x_cf - recon_source) + EPS)


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


def _check_same(x: torch.Tensor, x_cf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, x_cf = check_images(x, "x"), check_images(x_cf, "x_cf")
    if x.shape != x_cf.shape:
        raise InputError(f"x has shape {tuple(x.shape)} but x_cf has {tuple(x_cf.shape)}; pass one x_cf per x.")
    return x, x_cf


def proximity_scores(x: torch.Tensor, x_cf: torch.Tensor) -> torch.Tensor:
    """Mean absolute pixel change per image (lower: closer to the query)."""
    x, x_cf = _check_same(x, x_cf)
    return (x_cf - x).abs().flatten(1).mean(1)


def sparsity_scores(x: torch.Tensor, x_cf: torch.Tensor, threshold: float = SPARSITY_THRESHOLD) -> torch.Tensor:
    """Share of pixels changed by more than ``threshold`` per image (lower: sparser edit)."""
    x, x_cf = _check_same(x, x_cf)
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
    x, x_cf = _check_same(x, x_cf)
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

    @classmethod
    def from_zoo(cls, device: str = "cpu") -> MetricModels:
        from .zoo.checkpoints import load, read_manifest

        names = ["classifier", "oracle", "features", "ae_all"] + [f"ae_{d}" for d in range(10)]
        manifest = read_manifest()
        return cls(
            classifier=load("classifier", device=device),
            oracle=load("oracle", device=device),
            features=FeatureExtractor(load("features", device=device)),
            autoencoders={d: load(f"ae_{d}", device=device) for d in range(10)},
            ae_all=load("ae_all", device=device),
            fingerprint=",".join(f"{name}:{manifest[name]['sha256']}" for name in names),
        )


COLUMNS = ("n", "im1", "im2", "fid", "kid", "validity", "oracle_agreement", "proximity", "sparsity", "cout",
           "seconds_per_cf")


def evaluate_pair(
    x: torch.Tensor,
    x_cf: torch.Tensor,
    source: int,
    target: int,
    reference: torch.Tensor,
    models: MetricModels,
    seconds: float | None = None,
    seed: int = 0,
) -> dict[str, float | int | None]:
    """Every metric for one pair's counterfactuals; ``reference`` is the real test images of the target class.

    ``seconds`` is the wall time that produced all of ``x_cf`` (None when not a method: empty cell).
    """
    x, x_cf = _check_same(x, x_cf)
    n = x.shape[0]
    source_ids = check_targets(source, n)
    target_ids = check_targets(target, n, source=source_ids)
    kid_mean, _ = kid(models.features, x_cf, reference, seed=seed)
    return {
        "n": n,
        "im1": im1_scores(x_cf, target_ids, source_ids, models.autoencoders).mean().item(),
        "im2": im2_scores(x_cf, target_ids, models.autoencoders, models.ae_all).mean().item(),
        "fid": fid(models.features, x_cf, reference),
        "kid": kid_mean,
        "validity": agreement_scores(models.classifier, x_cf, target_ids).float().mean().item(),
        "oracle_agreement": agreement_scores(models.oracle, x_cf, target_ids).float().mean().item(),
        "proximity": proximity_scores(x, x_cf).mean().item(),
        "sparsity": sparsity_scores(x, x_cf).mean().item(),
        "cout": cout_scores(models.classifier, x, x_cf, source_ids, target_ids).mean().item(),
        "seconds_per_cf": None if seconds is None else seconds / n,
    }


def mean_row(rows: list[dict[str, float | int | None]]) -> dict[str, float | int | None]:
    """The mean over pairs of each metric (n is summed); a metric missing in any pair stays empty."""
    out: dict[str, float | int | None] = {"n": sum(int(r["n"]) for r in rows)}
    for column in COLUMNS[1:]:
        values = [r.get(column) for r in rows]
        out[column] = None if any(v is None for v in values) else sum(values) / len(values)
    return out
