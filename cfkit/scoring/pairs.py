"""One pair's counterfactuals -> one table row: every column's value with its 95 % bootstrap interval.

The columns (:mod:`cfkit.scoring.columns`) say what is computed; this module computes them on one shared
resampling of the queries, so intervals of different metrics (and of different methods, for paired
comparisons) come from the same resampled sets. FID/KID are computed here, in the kit's feature
space and, when the extractor can be had, in Inception-v3's on the first ``models.inception_cfs``.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from ..common.profiling import phase
from ..common.threads import follow_share
from ..common.validate import check_targets
from ..paths import atomic_torch_save
from ..zoo.feature_space import embed, kid_from_features
from ..zoo.inception import INCEPTION_REFERENCE, InceptionExtractor, inception_dir, reference_features, sha256_of
from . import bootstrap
from .columns import ScoreInput, columns, get, interval_columns
from .metrics import MetricModels, check_same, ratio_of_sums

References = tuple[bootstrap.FrechetReference, bootstrap.KernelReference]


def _distances(fake: torch.Tensor, real: torch.Tensor, suffix: str, seed: int, weights: torch.Tensor, point: dict,
               replicates: dict, references: References | None = None) -> None:
    """Point FID (closed form) and KID (torchmetrics' subsets) and their bootstrap replicates from features;
    ``references``: the reference side of ``real`` when already computed.

    The point FID is the closed form the replicates use, on the reference's square root computed once: it equals
    torchmetrics' (tests hold them to 1e-4, and scipy's to 1e-6), whose eigenvalues of a 2048×2048 product cost
    7 s a set on one thread in Inception space."""
    frechet, kernel = references or _references(real)
    point[f"fid{suffix}"] = frechet.distance(fake)
    point[f"kid{suffix}"] = kid_from_features(fake, real, seed=seed)[0]
    replicates[f"fid{suffix}"] = frechet.distances(fake, weights)
    replicates[f"kid{suffix}"] = kernel.distances(fake, weights)


def _references(real: torch.Tensor) -> References:
    return bootstrap.FrechetReference(real), bootstrap.KernelReference(real)


@lru_cache(maxsize=8)
def _inception_references(extractor: InceptionExtractor, target: int, n: int) -> tuple[torch.Tensor, References]:
    """One target class's Inception reference features and their reference side: the FID side (a 2048×2048 square
    root, 3 s on one thread) is kept on disk beside the features, so notebooks do not each recompute it."""
    real = reference_features(extractor, target, n)
    path = inception_dir() / f"reference_statistics_test_{target}_{n}.pt"
    key = sha256_of(real)
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        frechet = bootstrap.FrechetReference.from_state(saved["frechet"]) if saved["features"] == key else None
    except Exception:  # missing, corrupt or of other features: recomputed, never trusted
        frechet = None
    if frechet is None:
        frechet = bootstrap.FrechetReference(real)
        atomic_torch_save(path, {"features": key, "frechet": frechet.state()})
    return real, (frechet, bootstrap.KernelReference(real))


def inception_references(extractor: InceptionExtractor, target: int, n: int = INCEPTION_REFERENCE) -> None:
    """Compute (or check) one target's Inception reference features and statistics ahead of scoring."""
    _inception_references(extractor, int(target), int(n))


def _scored(s: ScoreInput, indices: torch.Tensor, point: dict, replicates: dict) -> None:
    """Every column with a score: a per-image tensor is averaged, a (numerators, denominators) pair is a ratio of
    sums; both resample the same ``indices``."""
    for column in columns():
        value = None if column.score is None else column.score(s)
        if value is None:
            continue
        if isinstance(value, tuple):
            numerator, denominator = value
            point[column.name] = ratio_of_sums(numerator, denominator)
            replicates[column.name] = bootstrap.ratio_replicates(numerator, denominator, indices)
        else:
            point[column.name] = value.double().mean().item()
            replicates[column.name] = bootstrap.mean_replicates(value, indices)


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
    """Every column for one pair's counterfactuals with its 95 % bootstrap interval over queries;
    ``reference`` is the real test images of the target class.

    ``seconds`` is the wall time that produced all of ``x_cf`` (None when not a method: empty cell).
    ``replicates``, when given, receives each metric's bootstrap replicates (for paired comparisons and for
    intervals of means over pairs). The Inception columns cover the first ``models.inception_cfs``
    counterfactuals (``n_inception``) and stay empty when ``models.inception`` is None.
    """
    follow_share()
    with phase("metrics", models.device):
        return _evaluate_pair(x, x_cf, source, target, reference, models, seconds, seed, replicates)


def _evaluate_pair(x: torch.Tensor, x_cf: torch.Tensor, source: int, target: int, reference: torch.Tensor,
                   models: MetricModels, seconds: float | None, seed: int,
                   replicates: dict[str, torch.Tensor] | None) -> dict[str, float | int | None]:
    x, x_cf = check_same(x, x_cf)
    n = x.shape[0]
    source_ids = check_targets(source, n)
    target_ids = check_targets(target, n, source=source_ids)
    indices = bootstrap.resample_indices(n, seed=seed)
    point: dict[str, float | int | None] = {"n": n, "seconds_per_cf": None if seconds is None else seconds / n}
    reps: dict[str, torch.Tensor] = {}
    _scored(ScoreInput(x, x_cf, source_ids, target_ids, models), indices, point, reps)
    _distances(embed(models.features, x_cf, "x_cf"), embed(models.features, reference, "reference"), "", seed,
               bootstrap.counts(indices), point, reps)
    if models.inception is not None:
        n_inception = point["n_inception"] = min(n, models.inception_cfs or n)
        real, references = _inception_references(models.inception, int(target_ids[0]), models.inception_reference)
        _distances(models.inception.embed(x_cf[:n_inception]), real, "_inception", seed,
                   bootstrap.counts(bootstrap.resample_indices(n_inception, seed=seed)), point, reps, references)
    row: dict[str, float | int | None] = {c.name: point.get(c.name) for c in columns()}
    row.update(dict.fromkeys(interval_columns()))
    for name, values in reps.items():
        row[f"{name}_lo"], row[f"{name}_hi"] = bootstrap.interval(point[name], values, bounds=get(name).bounds)
    if replicates is not None:
        replicates.update(reps)
    return row


def mean_row(rows: list[dict[str, float | int | None]],
             replicates: list[dict[str, torch.Tensor]] | None = None) -> dict[str, float | int | None]:
    """The mean over pairs of each column (counts summed); a column missing in any pair stays empty. With each
    pair's ``replicates``, the intervals come from the mean of the pairs' replicates (pairs resampled
    independently); without them they stay empty."""
    out: dict[str, float | int | None] = {}
    for column in columns():
        values = [r.get(column.name) for r in rows]
        total = None if any(v is None for v in values) else sum(values)
        out[column.name] = total if column.count or total is None else total / len(values)
    for column in (c for c in columns() if c.interval):
        reps = [r.get(column.name) for r in replicates] if replicates else [None]
        usable = (out[column.name] is not None and all(v is not None for v in reps)
                  and len({len(v) for v in reps}) == 1)
        low, high = (bootstrap.interval(out[column.name], torch.stack(reps).mean(0), bounds=column.bounds)
                     if usable else (None, None))
        out[f"{column.name}_lo"], out[f"{column.name}_hi"] = low, high
    return out
