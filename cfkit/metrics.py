"""Counterfactual metrics: IM1, IM2, FID, KID, validity, oracle agreement, proximity, sparsity, COUT.

Per-image functions (``*_scores``) return one value per counterfactual so that means, intervals
and significance tests can be built on them; :func:`evaluate_pair` turns a pair's counterfactuals
into one row of the results table. IM1 and IM2 are lower-is-better (Van Looveren & Klaise).
FID/KID live in the feature space of the kit's own ``features`` network (comparable within cfkit
only) and, when its extractor can be had, in Inception-v3's on a fixed subsample (``*_inception``, with
its n). Every metric carries a seeded 95 % bootstrap interval over queries (``<metric>_lo``/``_hi``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

from . import bootstrap
from .errors import InputError
from .validate import check_class_ids, check_images, check_targets
from .zoo.feature_space import FeatureExtractor, embed, fid, fid_from_features, kid, kid_from_features  # noqa: F401
from .zoo.inception import INCEPTION_CFS, INCEPTION_REFERENCE, InceptionExtractor, reference_features

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
    inception: InceptionExtractor | None = None
    inception_reason: str = "Inception-space FID/KID not requested"
    """Why the Inception columns are empty when ``inception`` is None."""
    inception_cfs: int = INCEPTION_CFS
    inception_reference: int = INCEPTION_REFERENCE
    calibrated: Mapping[int, nn.Module] | None = None
    """The calibrated setting's per-class autoencoders (``ae_cal_<d>``): IM1/IM2 a second time, labelled."""
    calibrated_aggregation: str = "mean"
    """How the calibrated IM1 aggregates a set: "mean" of per-image ratios or "sum" (ratio of summed errors)."""

    @classmethod
    def from_zoo(cls, device: str = "cpu", inception: bool = True) -> MetricModels:
        """The shipped zoo; ``inception``: also fetch and verify the Inception extractor (its columns stay
        empty, with the reason in ``inception_reason``, when it cannot be had)."""
        from .zoo.checkpoints import CALIBRATED_AE, load, read_manifest
        from .zoo.inception import inception_extractor

        names = (["classifier", "oracle", "features", "ae_all"] + [f"ae_{d}" for d in range(10)]
                 + [f"ae_cal_{d}" for d in range(10)])
        manifest = read_manifest()
        extractor, reason = inception_extractor() if inception else (None, cls.inception_reason)
        models = cls(
            classifier=load("classifier", device=device),
            oracle=load("oracle", device=device),
            features=FeatureExtractor(load("features", device=device)),
            autoencoders={d: load(f"ae_{d}", device=device) for d in range(10)},
            ae_all=load("ae_all", device=device),
            inception=extractor, inception_reason=reason,
            calibrated={d: load(f"ae_cal_{d}", device=device) for d in range(10)},
            calibrated_aggregation=CALIBRATED_AE["aggregation"],
        )
        models.fingerprint = ",".join(f"{name}:{manifest[name]['sha256']}" for name in names)
        return models

    def score_key(self) -> str | None:
        """What a cached score depends on: checkpoints, and the Inception extractor and subsample sizes."""
        if self.fingerprint is None:
            return None
        space = (f"inception:{self.inception.sha256}:{self.inception_cfs}:{self.inception_reference}"
                 if self.inception is not None else "inception:none")
        return f"{self.fingerprint},{space}"


SCORED = ("im1", "im2", "fid", "kid", "validity", "oracle_agreement", "proximity", "sparsity", "cout")
INCEPTION = ("fid_inception", "kid_inception")
CALIBRATED = ("im1_calibrated", "im2_calibrated")
"""IM1/IM2 with the calibrated autoencoders (:mod:`cfkit.calibration`); the plain columns keep the reference."""
RATIOS = ("im1_sum",)
"""Set-level ratios of summed per-image terms (IM1 with the reference autoencoders as Σ numerators / Σ
denominators); their intervals resample the terms, not per-image ratios."""
INTERVALS = tuple(f"{metric}_{side}" for metric in SCORED + INCEPTION + CALIBRATED + RATIOS for side in ("lo", "hi"))
"""Bootstrap interval columns, in the table after every point value."""
BOUNDS: dict[str, tuple[float | None, float | None]] = {
    "im1": (0, None), "im2": (0, None), "fid": (0, None), "fid_inception": (0, None), "validity": (0, 1),
    "oracle_agreement": (0, 1), "proximity": (0, 1), "sparsity": (0, 1), "cout": (-1, 1), "im1_calibrated": (0, None),
    "im2_calibrated": (0, None), "im1_sum": (0, None)}
"""Where each metric can lie (KID, an unbiased estimate, can be negative): intervals are clipped to it."""
COLUMNS = ("n",) + SCORED + ("seconds_per_cf", "n_inception") + INCEPTION + CALIBRATED + RATIOS + INTERVALS


def _per_image(x: torch.Tensor, x_cf: torch.Tensor, source: torch.Tensor, target: torch.Tensor,
               models: MetricModels) -> dict[str, torch.Tensor]:
    """Every metric that is the mean of a per-image score: name -> one score per counterfactual."""
    calibrated = {} if models.calibrated is None else {
        "im2_calibrated": im2_scores(x_cf, target, models.calibrated, models.ae_all)}
    if models.calibrated is not None and models.calibrated_aggregation == "mean":
        calibrated["im1_calibrated"] = im1_scores(x_cf, target, source, models.calibrated)
    return {
        **calibrated,
        "im1": im1_scores(x_cf, target, source, models.autoencoders),
        "im2": im2_scores(x_cf, target, models.autoencoders, models.ae_all),
        "validity": agreement_scores(models.classifier, x_cf, target).double(),
        "oracle_agreement": agreement_scores(models.oracle, x_cf, target).double(),
        "proximity": proximity_scores(x, x_cf),
        "sparsity": sparsity_scores(x, x_cf),
        "cout": cout_scores(models.classifier, x, x_cf, source, target),
    }


def _ratios(x_cf: torch.Tensor, source: torch.Tensor, target: torch.Tensor, models: MetricModels
            ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Every metric that is a ratio of sums over the set: name -> (per-image numerators, denominators)."""
    ratios = {"im1_sum": im1_terms(x_cf, target, source, models.autoencoders)}
    if models.calibrated is not None and models.calibrated_aggregation == "sum":
        ratios["im1_calibrated"] = im1_terms(x_cf, target, source, models.calibrated)
    return ratios


def _distances(fake: torch.Tensor, real: torch.Tensor, suffix: str, seed: int, weights: torch.Tensor, point: dict,
               replicates: dict, references: tuple[bootstrap.FrechetReference, bootstrap.KernelReference] | None = None
               ) -> None:
    """Point FID/KID (torchmetrics) and their bootstrap replicates (closed forms) from features; ``references``:
    the reference side of ``real`` when already computed."""
    point[f"fid{suffix}"] = fid_from_features(fake, real)
    point[f"kid{suffix}"] = kid_from_features(fake, real, seed=seed)[0]
    frechet, kernel = references or _references(real)
    replicates[f"fid{suffix}"] = frechet.distances(fake, weights)
    replicates[f"kid{suffix}"] = kernel.distances(fake, weights)


def _references(real: torch.Tensor) -> tuple[bootstrap.FrechetReference, bootstrap.KernelReference]:
    return bootstrap.FrechetReference(real), bootstrap.KernelReference(real)


@lru_cache(maxsize=8)
def _inception_references(extractor: InceptionExtractor, target: int, n: int
                          ) -> tuple[torch.Tensor, tuple[bootstrap.FrechetReference, bootstrap.KernelReference]]:
    """One target class's Inception reference features and their reference side, once per process (a 2048×2048
    square root is worth keeping)."""
    real = reference_features(extractor, target, n)
    return real, _references(real)


def evaluate_pair(
    x: torch.Tensor,
    x_cf: torch.Tensor,
    source: int,
    target: int,
    reference: torch.Tensor,
    models: MetricModels,
    seconds: float | None = None,
    seed: int = 0,
    replicates: dict[str, torch.Tensor] | None = None,
) -> dict[str, float | int | None]:
    """Every metric for one pair's counterfactuals with its 95 % bootstrap interval over queries;
    ``reference`` is the real test images of the target class.

    ``seconds`` is the wall time that produced all of ``x_cf`` (None when not a method: empty cell).
    ``replicates``, when given, receives each metric's bootstrap replicates (for paired comparisons and for
    intervals of means over pairs). The Inception columns cover the first ``models.inception_cfs``
    counterfactuals (``n_inception``) and stay empty when ``models.inception`` is None.
    """
    x, x_cf = _check_same(x, x_cf)
    n = x.shape[0]
    source_ids = check_targets(source, n)
    target_ids = check_targets(target, n, source=source_ids)
    indices = bootstrap.resample_indices(n, seed=seed)
    point: dict[str, float | int | None] = {}
    reps: dict[str, torch.Tensor] = {}
    for name, scores in _per_image(x, x_cf, source_ids, target_ids, models).items():
        point[name] = scores.double().mean().item()
        reps[name] = bootstrap.mean_replicates(scores, indices)
    for name, (numerator, denominator) in _ratios(x_cf, source_ids, target_ids, models).items():
        point[name] = ratio_of_sums(numerator, denominator)
        reps[name] = bootstrap.ratio_replicates(numerator, denominator, indices)
    _distances(embed(models.features, x_cf, "x_cf"), embed(models.features, reference, "reference"), "", seed,
               bootstrap.counts(indices), point, reps)
    n_inception = None
    if models.inception is not None:
        n_inception = min(n, models.inception_cfs)
        real, references = _inception_references(models.inception, int(target_ids[0]), models.inception_reference)
        _distances(models.inception.embed(x_cf[:n_inception]), real, "_inception", seed,
                   bootstrap.counts(bootstrap.resample_indices(n_inception, seed=seed)), point, reps, references)
    row: dict[str, float | int | None] = {"n": n, **{m: point.get(m) for m in SCORED},
                                          "seconds_per_cf": None if seconds is None else seconds / n,
                                          "n_inception": n_inception, **{m: point.get(m) for m in INCEPTION},
                                          **{m: point.get(m) for m in CALIBRATED + RATIOS}}
    for name, values in reps.items():
        row[f"{name}_lo"], row[f"{name}_hi"] = bootstrap.interval(point[name], values,
                                                                  bounds=BOUNDS.get(name, (None, None)))
    for column in INTERVALS:
        row.setdefault(column, None)
    if replicates is not None:
        replicates.update(reps)
    return row


def mean_row(rows: list[dict[str, float | int | None]],
             replicates: list[dict[str, torch.Tensor]] | None = None) -> dict[str, float | int | None]:
    """The mean over pairs of each metric (n summed); a metric missing in any pair stays empty. With each
    pair's ``replicates``, the intervals come from the mean of the pairs' replicates (pairs resampled
    independently); without them they stay empty."""
    out: dict[str, float | int | None] = {"n": sum(int(r["n"]) for r in rows)}
    for column in COLUMNS[1:]:
        if column in INTERVALS:
            continue
        values = [r.get(column) for r in rows]
        if column == "n_inception":
            out[column] = None if any(v is None for v in values) else sum(values)
        else:
            out[column] = None if any(v is None for v in values) else sum(values) / len(values)
    for metric in SCORED + INCEPTION + CALIBRATED + RATIOS:
        reps = [r.get(metric) for r in replicates] if replicates else [None]
        usable = out[metric] is not None and all(v is not None for v in reps) and len({len(v) for v in reps}) == 1
        low, high = (bootstrap.interval(out[metric], torch.stack(reps).mean(0), bounds=BOUNDS.get(metric, (None, None)))
                     if usable else (None, None))
        out[f"{metric}_lo"], out[f"{metric}_hi"] = low, high
    return out


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
