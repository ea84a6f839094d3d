"""The protocol end to end: queries per pair, the Original Data sets, and scoring every saved set.

``evaluate_sets`` reads whatever counterfactual sets exist (one per method and pair) and returns
table rows: one per method and pair, plus a ``mean`` row per method over the pairs it has.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path

import torch

from ..common.validate import check_pair
from ..data import OFFICIAL_COUNTS, PAIRS, load_mnist, pair_name, sha256_file
from ..errors import InputError
from ..methods import catalog
from ..methods.base import CounterfactualMethod, Result
from ..methods.original import OriginalData
from ..paths import atomic_write_json
from ..zoo import feature_space, inception as inception_space
from ..zoo.classifiers import DEFAULT as DEFAULT_CLASSIFIER, fingerprint, load_classifier
from ..zoo.inception import INCEPTION_CFS
from . import bootstrap, columns, metrics, pairs
from .metrics import MetricModels
from .pairs import evaluate_pair, mean_row
from .store import (find_counterfactuals, load_counterfactuals, reusable_result, run_key, save_counterfactuals,
                    set_path)


def parse_pairs(pairs: str | Iterable) -> list[tuple[int, int]]:
    """'4->9,3->8' or [(4, 9), (3, 8)] -> [(4, 9), (3, 8)]."""
    if isinstance(pairs, str):
        pairs = [p.strip() for p in pairs.split(",") if p.strip()]
    parsed = [check_pair(p) for p in pairs]
    if not parsed:
        raise InputError("no pairs given; use e.g. '4->9,3->8,5->6'.")
    repeated = sorted({pair for pair in parsed if parsed.count(pair) > 1}, key=parsed.index)
    if repeated:
        names = ", ".join(pair_name(pair) for pair in repeated)
        raise InputError(f"pair {names} is given more than once; give each pair once "
                         f"(e.g. '{','.join(dict.fromkeys(pair_name(pair) for pair in parsed))}').")
    return parsed


def fewest_query_class(pairs: str | Iterable, split: str = "test") -> int:
    """The query class of ``pairs`` with the fewest images in ``split`` (the official MNIST counts)."""
    return min((query for query, _ in parse_pairs(pairs)), key=OFFICIAL_COUNTS[split].__getitem__)


def query_ceiling(pairs: str | Iterable, split: str = "test") -> int:
    """The most queries per pair that every pair's query class has in ``split`` (the official MNIST counts)."""
    return OFFICIAL_COUNTS[split][fewest_query_class(pairs, split)]


def protocol_queries(pair: tuple[int, int], n_queries: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``n_queries`` MNIST test images of the query class (0: all of them) and their indices."""
    query_class, _ = check_pair(pair)
    if isinstance(n_queries, bool) or not isinstance(n_queries, int) or n_queries < 0:
        raise InputError(f"n_queries must be an int >= 0 (0 = all test images of the class), got {n_queries!r}.")
    x, _ = load_mnist("test", digits=(query_class,))
    if n_queries > len(x):  # never fewer queries than asked for: the recorded n_queries is the real count
        raise InputError(f"n_queries {n_queries} exceeds the {len(x)} MNIST test images of digit {query_class}; give "
                         f"at most {len(x)}, or 0 for all of them.")
    count = len(x) if n_queries == 0 else n_queries
    return x[:count], torch.arange(count)


def validation_queries(pair: tuple[int, int], n_queries: int = 200) -> torch.Tensor:
    """The last ``n_queries`` MNIST *training* images of the query class: where knobs are tuned, so the
    protocol's test queries stay untouched (the classifier saw these digits in training; its call on them
    is as sure as on the test set, 99 %+)."""
    query_class, _ = check_pair(pair)
    if isinstance(n_queries, bool) or not isinstance(n_queries, int) or n_queries < 1:
        raise InputError(f"n_queries must be an int >= 1, got {n_queries!r}.")
    x = load_mnist("train", digits=(query_class,))[0]
    if n_queries > len(x):
        raise InputError(f"n_queries {n_queries} exceeds the {len(x)} MNIST training images of digit {query_class}; "
                         f"give at most {len(x)}.")
    return x[-n_queries:]


def reference_images(target: int) -> torch.Tensor:
    """FID/KID reference: every MNIST test image of the target class."""
    return load_mnist("test", digits=(target,))[0]


def run_method(
    method: CounterfactualMethod, out_dir: str | Path, pairs: str | Iterable = PAIRS, n_queries: int = 0,
    timed: bool = True, results: list[Result] | None = None, resume: bool = False,
) -> list[Path]:
    """Explain the protocol queries of each pair with ``method``; save one counterfactual set per pair.

    ``results``, when given, receives each pair's :class:`Result` (with the method's extras). ``resume``: a pair
    whose set in ``out_dir`` was made by the same method, settings, code and weights for the same queries
    (:func:`cfkit.scoring.store.run_key`) is taken as saved, so a run of hours stopped between pairs goes on
    where it stopped.
    """
    paths = []
    for pair in parse_pairs(pairs):
        x, query = protocol_queries(pair, n_queries)
        key = run_key(method, pair)
        result = reusable_result(set_path(out_dir, method.name, pair), key, query) if resume else None
        if result is not None:
            print(f"{method.name} {pair_name(pair)}: reusing the saved set (same method, settings, code, weights)")
            paths.append(set_path(out_dir, method.name, pair))
        else:
            result = method.explain(x, pair[1], source=torch.full((len(x),), pair[0]))
            paths.append(save_counterfactuals(out_dir, method.name, pair, query, result,
                                              method.classifier_fingerprint, timed=timed, run_key=key))
        if results is not None:
            results.append(result)
    return paths


def compare_settings(
    methods: dict[str, CounterfactualMethod], pairs: str | Iterable = PAIRS, n_queries: int = 100,
    models: MetricModels | None = None, seed: int = 0,
    summary: Callable[[Result], dict[str, float]] | None = None,
    queries: Callable[[tuple[int, int], int], torch.Tensor] = validation_queries, intervals: bool = False,
) -> list[dict]:
    """Every metric of each named setting on each pair, plus the mean over pairs; ``summary(result)`` adds
    method-specific columns. ``queries(pair, n)`` picks the images: by default :func:`validation_queries`, so an
    ablation never touches the test queries. ``intervals``: the mean row's bootstrap intervals too, from the
    pairs' replicates. The default models leave Inception out: settings compare in the kit's feature space."""
    models = models or MetricModels.from_zoo(inception=False)
    rows = []
    for setting, method in methods.items():
        pair_rows, pair_reps = [], []
        for pair in parse_pairs(pairs):
            x = queries(pair, n_queries)
            result = method.explain(x, pair[1], source=torch.full((len(x),), pair[0]))
            reps: dict[str, torch.Tensor] = {}
            row = evaluate_pair(x, result.x_cf, pair[0], pair[1], reference_images(pair[1]), models,
                                seconds=result.seconds, seed=seed, replicates=reps)
            pair_rows.append({"setting": setting, "pair": pair_name(pair), **row, **(summary(result) if summary else {})})
            pair_reps.append(reps)
        mean = mean_row(pair_rows, pair_reps if intervals else None)
        extra = {k: sum(r[k] for r in pair_rows) / len(pair_rows) for k in pair_rows[0] if k not in mean and
                 k not in ("setting", "pair")}
        rows += pair_rows + [{"setting": setting, "pair": "mean", **mean, **extra}]
    return rows


def make_original_data(
    out_dir: str | Path, pairs: str | Iterable = PAIRS, n_queries: int = 0, seed: int = 0,
    classifier: torch.nn.Module | str = DEFAULT_CLASSIFIER,
) -> list[Path]:
    """Save the Original Data set of each pair: one real training image of the target class per query, recorded
    for ``classifier`` (a model or a :func:`cfkit.zoo.classifiers.load_classifier` spec) like every other set."""
    method = OriginalData(load_classifier(classifier), seed=seed)
    return run_method(method, out_dir, pairs, n_queries, timed=False)


SCORE_SUFFIX = ".scores.json"
"""Beside each set, its scored row and what it was computed from: a set is scored once per content."""


@lru_cache(maxsize=1)
def _metric_code_digest() -> str:
    """Hash of the code that computes the metrics, so a changed metric never reuses an old score."""
    digest = hashlib.sha256()
    for module in (metrics, pairs, feature_space, bootstrap, inception_space):
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()


def score_set(path: str | Path, models: MetricModels, seed: int = 0, reuse: bool = True,
              replicates: dict[str, torch.Tensor] | None = None) -> dict:
    """One saved set's table row. ``reuse``: take the row stored beside the set when the set's bytes, the
    metric models, the seed and the metric code are all unchanged (otherwise compute and store it).
    ``replicates``, when given, receives the set's bootstrap replicates (stored beside the row)."""
    path = Path(path)
    stored, key = path.with_suffix(SCORE_SUFFIX), None
    if reuse and models.score_key():
        key = {"set": sha256_file(path), "models": models.score_key(), "seed": seed,
               "code": _metric_code_digest() + columns.digest()}
        if stored.is_file():
            try:
                saved = json.loads(stored.read_text())
            except ValueError:
                saved = {}
            if saved.get("key") == key:
                if replicates is not None:
                    replicates.update({k: torch.tensor(v, dtype=torch.float64)
                                       for k, v in saved.get("replicates", {}).items()})
                return saved["row"]
    cfs = load_counterfactuals(path)
    computed: dict[str, torch.Tensor] = {}
    row = {"method": cfs.method, "pair": pair_name(cfs.pair),
           **evaluate_pair(cfs.x, cfs.x_cf, cfs.pair[0], cfs.pair[1], reference_images(cfs.pair[1]), models,
                           seconds=cfs.seconds, seed=seed, replicates=computed)}
    if key is not None:
        atomic_write_json(stored, {"key": key, "row": row,
                                   "replicates": {k: v.tolist() for k, v in computed.items()}})
    if replicates is not None:
        replicates.update(computed)
    return row


def evaluate_sets(paths: Iterable[str | Path], models: MetricModels | None = None, seed: int = 0,
                  reuse: bool = True, replicates: dict[tuple[str, str], dict] | None = None,
                  inception: bool = True, classifier: torch.nn.Module | str = DEFAULT_CLASSIFIER,
                  inception_cfs: int = INCEPTION_CFS) -> list[dict]:
    """Score each saved set (see :func:`score_set` for ``reuse``); add a mean row per method, its intervals
    from the pairs' bootstrap replicates. Rows carry ``method`` and ``pair``; ``replicates``, when given,
    receives {(method, pair): {metric: replicates}} for every row (for :func:`compare_methods`).
    ``inception`` and ``classifier`` (with the default models): also score in Inception space when its extractor
    can be had, on the first ``inception_cfs`` counterfactuals of each set (0: all); the classifier the sets
    explain (validity and COUT are its; sets of another one are refused)."""
    models = models or MetricModels.from_zoo(inception=inception, classifier=classifier, inception_cfs=inception_cfs)
    paths = list(paths)
    check_same_classifier(paths, fingerprint(models.classifier))
    by_method: dict[str, list[tuple[dict, dict]]] = {}
    for path in paths:
        reps: dict[str, torch.Tensor] = {}
        row = score_set(path, models, seed=seed, reuse=reuse, replicates=reps)
        by_method.setdefault(row["method"], []).append((row, reps))
    rows = []
    for method, scored in by_method.items():
        pair_rows = [row for row, _ in scored]
        pair_reps = [reps for _, reps in scored]
        rows += pair_rows + [{"method": method, "pair": "mean", **mean_row(pair_rows, pair_reps)}]
        if replicates is not None:
            for row, reps in scored:
                replicates[(method, row["pair"])] = reps
            replicates[(method, "mean")] = _mean_replicates(pair_reps)
    return rows


def check_same_classifier(paths: Iterable[str | Path], scoring: str) -> None:
    """Refuse sets of different classifiers, or sets of another classifier than the one validity is scored with."""
    made_by: dict[str, list[str]] = {}
    for path in paths:
        made_by.setdefault(load_counterfactuals(path).classifier, []).append(Path(path).name)
    if len(made_by) > 1:
        groups = "; ".join(f"{fp[:12]}…: {', '.join(names)}" for fp, names in made_by.items())
        raise InputError(f"these sets explain different classifiers ({groups}); score each classifier's sets on "
                         "their own (a runs folder per classifier).")
    if made_by and scoring not in made_by:
        raise InputError(f"the sets explain classifier {next(iter(made_by))[:12]}… but validity and COUT would be "
                         f"scored with {scoring[:12]}…; give the scoring the classifier the sets were made for "
                         "(`-p classifier …` to 10_metrics, or MetricModels.from_zoo(classifier=…)).")


def _mean_replicates(pair_reps: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The mean over pairs of each metric's replicates (where every pair has them)."""
    shared = set.intersection(*(set(r) for r in pair_reps)) if pair_reps else set()
    return {k: torch.stack([r[k] for r in pair_reps]).mean(0) for k in sorted(shared)
            if len({len(r[k]) for r in pair_reps}) == 1}


COMPARED = ("im1", "fid", "fid_inception")
"""The metrics :func:`compare_methods` tests between every two methods."""


def compare_methods(rows: list[dict], replicates: dict[tuple[str, str], dict], metrics: Iterable[str] = COMPARED
                    ) -> list[dict]:
    """For every two methods, on every pair and the mean: does their IM1 (FID, …) differ? A paired bootstrap
    on the same resampled queries (:func:`cfkit.scoring.bootstrap.paired_difference`); rows of A − B with its 95 %
    interval, p-value and verdict. Needs equal n for the two sets (the full protocol has it)."""
    point = {(r["method"], r["pair"]): r for r in rows}
    methods = list(dict.fromkeys(r["method"] for r in rows))
    out = []
    for metric in metrics:
        for i, first in enumerate(methods):
            for second in methods[i + 1:]:
                for pair in dict.fromkeys(r["pair"] for r in rows):
                    a, b = point.get((first, pair)), point.get((second, pair))
                    reps_a = replicates.get((first, pair), {}).get(metric)
                    reps_b = replicates.get((second, pair), {}).get(metric)
                    if a is None or b is None or a.get(metric) is None or b.get(metric) is None:
                        continue
                    if reps_a is None or reps_b is None or a["n"] != b["n"] or reps_a.shape != reps_b.shape:
                        continue
                    out.append({"metric": metric, "pair": pair, "a": first, "b": second,
                                **bootstrap.paired_difference(a[metric], reps_a, b[metric], reps_b)})
    return out


def evaluate_runs(runs_dir: str | Path, models: MetricModels | None = None, seed: int = 0,
                  reuse: bool = True, replicates: dict[tuple[str, str], dict] | None = None) -> list[dict]:
    """:func:`evaluate_sets` over every set found under ``runs_dir``."""
    return evaluate_sets(find_counterfactuals(runs_dir), models=models, seed=seed, reuse=reuse,
                         replicates=replicates)


def missing_note(rows: list[dict], runs_dir: str | Path) -> str | None:
    """What to run for the catalog's methods that have no row yet (a fresh clone, or only some notebooks run):
    their notebooks, then this one again, or ``make reproduce`` for all at the full protocol; None when none is
    missing."""
    present = {row["method"] for row in rows}
    missing = [(entry.label, entry.notebook) for entry in catalog.entries()
               if entry.name not in present and not entry.reference]
    if not missing:
        return None
    notebooks = list(dict.fromkeys(notebook for _, notebook in missing if notebook))
    return (f"No counterfactual sets under {runs_dir} yet for {', '.join(label for label, _ in missing)}. Run "
            f"{', '.join(f'{nb}.ipynb' for nb in notebooks)} (each reaches its explorer in seconds at its defaults; "
            "or `cfkit run NOTEBOOK`), then this notebook again; `make reproduce` runs them all at the full protocol.")


def gallery(runs_dir: str | Path, per_pair: int = 2) -> tuple[torch.Tensor, dict[str, torch.Tensor], list[str]]:
    """The first ``per_pair`` queries of every pair and each method's counterfactuals of them, from the saved
    sets (every set starts with the same protocol queries): (queries, {method: counterfactuals}, titles)."""
    sets = [load_counterfactuals(p) for p in find_counterfactuals(runs_dir)]
    pairs = list(dict.fromkeys(s.pair for s in sets))
    pick = {(s.method, s.pair): s for s in sets}
    complete = [m for m in dict.fromkeys(s.method for s in sets)
                if all((m, p) in pick and len(pick[(m, p)].x) >= per_pair for p in pairs)]
    if not complete:
        raise InputError(f"no method has a counterfactual set for every pair under {runs_dir}; run the notebooks first.")
    first = complete[0]
    queries = torch.cat([pick[(first, p)].x[:per_pair] for p in pairs])
    rows = {m: torch.cat([pick[(m, p)].x_cf[:per_pair] for p in pairs]) for m in complete}
    titles = [f"{q}→{t}" for q, t in pairs for _ in range(per_pair)]
    return queries, rows, titles
