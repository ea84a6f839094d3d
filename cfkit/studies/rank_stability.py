"""Which of the table's orderings are facts about the methods, and which are facts about the IM1/IM2 instrument?

The C3LT paper publishes neither its autoencoders nor its aggregation; the calibration study
(:mod:`cfkit.studies.calibration`) admits several settings (real autoencoders that rank real digits below PGD on every
pair with disjoint intervals) and picks one. This study scores every saved counterfactual set of the table under
*every* admitted setting and reports, for every two methods, the share of settings under which A scores below B,
beside the bootstrap probability of that order under the chosen setting, the order in both FID spaces and the
paper's order. An ordering that holds under every admitted instrument is a fact about the methods; one that flips
is a fact about the instrument, and the per-setting terms (:data:`SCORES_FILE`) show what in the counterfactuals
makes it flip.

The admitted autoencoders are the shipped ``ae_<d>`` and ``ae_cal_<d>`` or, for the others, retrained by
:func:`cfkit.studies.calibration.train_snapshots` with the study's seeds; a retrained autoencoder must reproduce the test
MSE the study recorded for it, and is cached under ``runs/rank_stability/``. ``cfkit rank-stability`` runs it
(about 25 minutes on 2 CPU cores the first time, under a minute from the cache).
"""
from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..data import PAIRS, pair_name
from ..errors import CheckpointError, MissingResultsError, ParameterError
from ..methods import catalog
from ..paths import RESULTS_DIR, RUNS_DIR, atomic_torch_save, atomic_write_text
from ..scoring import bootstrap
from ..scoring.metrics import im1_terms, im2_scores, per_image_ratios, ratio_of_sums
from ..scoring.store import saved_sets
from ..scoring.table import read_csv
from ..zoo.checkpoints import CALIBRATED_AE, load
from .calibration import (AGGREGATIONS, Architecture, GridPoint, SHIPPED, autoencoder_from, read_study,
                          setting_key, admitted, train_grid)

PAIRWISE_FILE = "rank_stability.csv"
SCORES_FILE = "rank_stability_scores.csv"
FIGURE_FILE = "rank_stability.png"
CACHE_DIR = "rank_stability"
"""Under ``runs/``: the retrained admitted autoencoders, one state file per (setting, digit)."""
MSE_TOLERANCE = 0.01
"""A retrained autoencoder's test MSE may differ from the study's record by this share (thread counts change the
last bits of a CPU run); more means it is not the autoencoder the study admitted."""
METRICS = ("im1", "im2")
FID_COLUMNS = {"kit": "fid", "inception": "fid_inception"}


@dataclass(frozen=True)
class Instrument:
    """One admitted autoencoder setting (architecture after ``epochs`` epochs) and the IM1 aggregations the
    calibration study admits with it."""

    point: GridPoint
    aggregations: tuple[str, ...]

    @property
    def zoo_prefix(self) -> str | None:
        """``ae`` or ``ae_cal`` when the zoo ships these autoencoders (``<prefix>_<digit>``), else None."""
        architecture, epochs = self.point.architecture, self.point.epochs
        if architecture == SHIPPED and epochs == 30:
            return "ae"
        calibrated = CALIBRATED_AE
        if (architecture.channels == calibrated["channels"] and (architecture.pixel_range == "[-1,1]") ==
                calibrated["signed"] and architecture.code == calibrated["code"] and
                architecture.code_relu == calibrated["code_relu"] and epochs == calibrated["epochs"]):
            return "ae_cal"
        return None

    @property
    def key(self) -> tuple:
        """The study's setting key without its aggregation (:func:`cfkit.studies.calibration.setting_key`)."""
        a = self.point.architecture
        return (a.capacity, a.pixel_range, a.code, a.code_relu, self.point.epochs)

    @property
    def label(self) -> str:
        a = self.point.architecture
        code = "spatial" if a.code is None else f"dense {a.code}"
        relu = "relu" if a.code_relu else "linear"
        return f"{a.capacity} {a.pixel_range} {code} {relu}, {self.point.epochs} ep"

    @property
    def file_stem(self) -> str:
        a = self.point.architecture
        code = "spatial" if a.code is None else f"dense{a.code}"
        signed = "signed" if a.pixel_range == "[-1,1]" else "unit"
        return f"{a.capacity}_{signed}_{code}_{'relu' if a.code_relu else 'linear'}_e{self.point.epochs}"


def admitted_instruments(study: dict) -> list[Instrument]:
    """The autoencoder settings the calibration study admits, each with its admitted aggregations, in the
    study's row order."""
    keys = admitted(study["rows"])
    found: dict[tuple, list[str]] = {}
    for row in study["rows"]:
        key = setting_key(row)
        if row["pair"] == "mean" and key in keys:
            found.setdefault(key[:5], [])
            if key[5] not in found[key[:5]]:
                found[key[:5]].append(key[5])
    return [Instrument(GridPoint(Architecture(capacity, pixel_range, code, code_relu), epochs),
                       tuple(a for a in AGGREGATIONS if a in aggregations))
            for (capacity, pixel_range, code, code_relu, epochs), aggregations in found.items()]


def recorded_mse(study: dict, instrument: Instrument) -> dict[int, float]:
    """The test MSE by digit that the calibration study recorded for ``instrument``'s autoencoders."""
    for row in study["rows"]:
        if setting_key(row)[:5] == instrument.key:
            return {int(d): mse for d, mse in row["ae_mse"].items()}
    raise MissingResultsError(f"the calibration study has no row for {instrument.label}.")


def instrument_autoencoders(instruments: Iterable[Instrument], classes: Iterable[int], study: dict,
                            cache_dir: str | Path | None = None, jobs: int = 2, max_steps: int | None = None
                            ) -> dict[Instrument, dict[int, nn.Module]]:
    """Every instrument's per-class autoencoders: the zoo's where it ships them, else from the cache or retrained
    (``jobs`` at once) and checked against the study's recorded test MSE. ``max_steps`` caps retraining (smoke
    tests: no check, and nothing is cached)."""
    instruments, classes = list(instruments), sorted(set(classes))
    cache = Path(cache_dir or RUNS_DIR / CACHE_DIR)
    out: dict[Instrument, dict[int, nn.Module]] = {}
    missing: dict[Architecture, set[int]] = {}
    for instrument in instruments:
        if instrument.zoo_prefix:
            out[instrument] = {d: load(f"{instrument.zoo_prefix}_{d}") for d in classes}
            continue
        cached = {d: _read_cached(cache, instrument, d) for d in classes} if max_steps is None else {}
        if all(model is not None for model in cached.values()) and cached:
            out[instrument] = cached
        else:
            missing.setdefault(instrument.point.architecture, set()).add(instrument.point.epochs)
    if missing:
        trained = train_grid(classes, [(a, tuple(sorted(e))) for a, e in missing.items()], jobs, max_steps)
        for instrument in instruments:
            if instrument in out:
                continue
            architecture, epochs = instrument.point.architecture, instrument.point.epochs
            snapshots = {d: trained[(d, architecture)][epochs] for d in classes}
            if max_steps is None:
                measured = {d: snapshot["mse"] for d, snapshot in snapshots.items()}
                _check_reproduced(instrument, measured, recorded_mse(study, instrument))
                for d, snapshot in snapshots.items():
                    atomic_torch_save(cache / f"{instrument.file_stem}_{d}.pt", snapshot["state"])
            out[instrument] = {d: autoencoder_from(architecture, s["state"]) for d, s in snapshots.items()}
    return out


def _read_cached(cache: Path, instrument: Instrument, digit: int) -> nn.Module | None:
    path = cache / f"{instrument.file_stem}_{digit}.pt"
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        return autoencoder_from(instrument.point.architecture, state)
    except Exception as exc:  # a truncated or foreign file
        raise CheckpointError(f"{path} is not a readable autoencoder of {instrument.label} ({type(exc).__name__}); "
                              "delete it and run again to retrain it.") from exc


def _check_reproduced(instrument: Instrument, measured: dict[int, float], recorded: dict[int, float]) -> None:
    for digit, mse in measured.items():
        if abs(mse - recorded[digit]) > MSE_TOLERANCE * recorded[digit]:
            raise CheckpointError(f"the retrained {instrument.label} autoencoder of digit {digit} has test MSE "
                                  f"{mse:.6f}, the calibration study recorded {recorded[digit]:.6f}: it is not the "
                                  "autoencoder the study admitted. Re-run `cfkit calibrate` with this cfkit.")


AXES = ("capacity", "pixel_range", "code", "code_relu", "epochs", "aggregation")
"""What tells the admitted settings apart, as the calibration study's axes."""


def score_sets(sets: dict, instruments: dict[Instrument, dict[int, nn.Module]], ae_all: nn.Module,
               pairs: list[tuple[int, int]]) -> list[dict]:
    """A row per (instrument, aggregation, method, pair) and per (instrument, aggregation, method) over the pairs
    (``pair`` = mean): IM1, IM2 and IM1's two terms, the mean reconstruction error under the target's
    (``target_error``) and the query class's (``source_error``) autoencoder; ``chosen`` marks the calibrated
    setting of the table's ``im1_calibrated``."""
    methods = list(dict.fromkeys(method for method, _ in sets))
    rows = []
    for instrument, autoencoders in instruments.items():
        a = instrument.point.architecture
        describe = {"setting": instrument.label, "capacity": a.capacity, "pixel_range": a.pixel_range,
                    "code": "spatial" if a.code is None else a.code, "code_relu": a.code_relu,
                    "epochs": instrument.point.epochs, "zoo": instrument.zoo_prefix}
        for method in methods:
            per_pair = [_terms(sets[(method, pair)], autoencoders, ae_all) for pair in pairs]
            mean = {"pair": "mean", **{k: sum(r[k] for r in per_pair) / len(per_pair) for k in per_pair[0]
                                       if k != "pair"}}
            for aggregation in instrument.aggregations:
                chosen = instrument.zoo_prefix == "ae_cal" and aggregation == CALIBRATED_AE["aggregation"]
                for row in (*per_pair, mean):
                    rows.append({**describe, "aggregation": aggregation, "chosen": chosen, "method": method,
                                 "pair": row["pair"], "im1": row[aggregation], "im2": row["im2"],
                                 "target_error": row["target_error"], "source_error": row["source_error"]})
    return rows


def _terms(cfs, autoencoders: dict[int, nn.Module], ae_all: nn.Module) -> dict:
    numerator, denominator = im1_terms(cfs.x_cf, cfs.target, cfs.source, autoencoders)
    return {"pair": cfs.pair_name, "mean": per_image_ratios(numerator, denominator).double().mean().item(),
            "sum": ratio_of_sums(numerator, denominator),
            "im2": im2_scores(cfs.x_cf, cfs.target, autoencoders, ae_all).double().mean().item(),
            "target_error": numerator.double().mean().item(), "source_error": denominator.double().mean().item()}


def chosen_replicates(sets: dict, pairs: list[tuple[int, int]], autoencoders: dict[int, nn.Module],
                      ae_all: nn.Module) -> dict[str, dict[str, torch.Tensor]]:
    """Bootstrap replicates of each method's mean-over-pairs IM1 and IM2 under the chosen setting. A pair's sets
    share their queries and every set of a size draws the same resampled positions, so the methods are paired."""
    methods = list(dict.fromkeys(method for method, _ in sets))
    out: dict[str, dict[str, list[torch.Tensor]]] = {m: {"im1": [], "im2": []} for m in methods}
    for pair in pairs:
        for method in methods:
            cfs = sets[(method, pair)]
            indices = bootstrap.resample_indices(len(cfs.x_cf))
            numerator, denominator = im1_terms(cfs.x_cf, cfs.target, cfs.source, autoencoders)
            out[method]["im1"].append(bootstrap.mean_replicates(per_image_ratios(numerator, denominator), indices))
            out[method]["im2"].append(bootstrap.mean_replicates(
                im2_scores(cfs.x_cf, cfs.target, autoencoders, ae_all), indices))
    return {m: {k: torch.stack(v).mean(0) for k, v in metrics.items()} for m, metrics in out.items()}


def setting_scores(scores: list[dict], metric: str) -> dict[tuple, dict[str, float]]:
    """Each admitted setting's mean-over-pairs ``metric`` of every method, keyed by the setting's axes. IM1 has a
    setting per (autoencoders, aggregation); IM2 averages per-image scores whatever IM1 aggregates, so it has one
    per autoencoder setting."""
    out: dict[tuple, dict[str, float]] = {}
    for row in scores:
        if row["pair"] == "mean":
            out.setdefault(_metric_setting(row, metric), {}).setdefault(row["method"], row[metric])
    return out


def _metric_setting(row: dict, metric: str) -> tuple:
    """The axes of the setting a scores row belongs to for ``metric`` (IM2 has no aggregation axis)."""
    return tuple(row[axis] if axis != "aggregation" or metric == "im1" else None for axis in AXES)


def _chosen_key(scores: list[dict], metric: str) -> tuple:
    return _metric_setting(next(r for r in scores if r["chosen"]), metric)


def flips_with(settings: dict[tuple, dict[str, float]], a: str, b: str) -> str:
    """The axis whose value alone decides whether ``a`` scores below ``b`` (e.g. ``aggregation: a below b under
    sum``), or that no single axis does."""
    for i, axis in enumerate(AXES):
        orders: dict[object, set[bool]] = {}
        for key, values in settings.items():
            orders.setdefault(key[i], set()).add(values[a] < values[b])
        if len(orders) > 1 and all(len(order) == 1 for order in orders.values()):
            below = [str(value) for value, order in orders.items() if True in order]
            return f"{axis}: {a} below {b} exactly under {' or '.join(below)}"
    return "no single axis decides it"


def pairwise(scores: list[dict], replicates: dict[str, dict[str, torch.Tensor]], table: list[dict]) -> list[dict]:
    """For every two methods A, B (catalog order) and each of IM1 and IM2: the share of admitted settings under
    which A scores below B and the verdict (``robust`` when every setting agrees, else ``flips`` with the axis
    that decides it), beside A below B under the chosen setting with its bootstrap probability, in the kit's and
    Inception's FID spaces (``results/table.csv``), and in the paper (IM1)."""
    fid = {r["method"]: r for r in table if r["pair"] == "mean"}
    paper = catalog.paper_im1()
    methods = [m for m in catalog.names() if m in replicates]
    rows = []
    for metric in METRICS:
        settings = setting_scores(scores, metric)
        chosen = settings[_chosen_key(scores, metric)]
        for i, a in enumerate(methods):
            for b in methods[i + 1:]:
                share = sum(values[a] < values[b] for values in settings.values()) / len(settings)
                probability = (replicates[a][metric] < replicates[b][metric]).double().mean().item()
                rows.append({
                    "metric": metric, "a": a, "b": b, "settings": len(settings), "share_a_below": round(share, 4),
                    "verdict": "robust" if share in (0.0, 1.0) else "flips",
                    "chosen_a_below": chosen[a] < chosen[b], "chosen_probability_a_below": round(probability, 4),
                    **{f"{space}_fid_a_below": float(fid[a][column]) < float(fid[b][column])
                       for space, column in FID_COLUMNS.items() if a in fid and b in fid},
                    "paper_a_below": (paper[a] < paper[b]) if metric == "im1" and a in paper and b in paper else None,
                    "flips_with": flips_with(settings, a, b) if 0.0 < share < 1.0 else None})
    return rows


def run_study(runs_dir: str | Path | None = None, results_dir: str | Path | None = None,
              pairs: Iterable[tuple[int, int]] = PAIRS, methods: Iterable[str] | None = None, jobs: int = 2,
              cache_dir: str | Path | None = None, max_steps: int | None = None) -> dict[str, list[dict]]:
    """Score the table's saved sets (``runs_dir``) under every admitted instrument of the committed calibration
    study; return the ``scores`` and the ``pairwise`` rows."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ParameterError(f"jobs must be an int >= 1 (autoencoders retrained at once), got {jobs!r}.")
    pairs, results_dir = list(pairs), Path(results_dir or RESULTS_DIR)
    study = read_study(results_dir)
    table_path = results_dir / "table.csv"
    if not table_path.is_file():
        raise MissingResultsError(f"no table at {table_path}: run `make reproduce` (or `cfkit table`) first.")
    methods = list(methods) if methods is not None else catalog.names()
    sets = saved_sets(Path(runs_dir or RUNS_DIR), methods, pairs)
    instruments = admitted_instruments(study)
    classes = sorted({d for pair in pairs for d in pair})
    autoencoders = instrument_autoencoders(instruments, classes, study, cache_dir, jobs, max_steps)
    ae_all = load("ae_all")
    scores = score_sets(sets, autoencoders, ae_all, pairs)
    chosen = next(i for i in instruments if i.zoo_prefix == "ae_cal")
    replicates = chosen_replicates(sets, pairs, autoencoders[chosen], ae_all)
    return {"scores": scores, "pairwise": pairwise(scores, replicates, read_csv(table_path))}


def _csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()})
    return buffer.getvalue()


def write_study(study: dict[str, list[dict]], results_dir: str | Path | None = None) -> list[Path]:
    """``results/rank_stability.csv`` (every two methods), ``rank_stability_scores.csv`` (every method under
    every admitted setting) and the figure, each written atomically."""
    from ..scoring.plots import rank_stability_figure, save_figure  # matplotlib only where a figure is drawn

    results_dir = Path(results_dir or RESULTS_DIR)
    return [atomic_write_text(results_dir / PAIRWISE_FILE, _csv(study["pairwise"])),
            atomic_write_text(results_dir / SCORES_FILE, _csv(study["scores"])),
            save_figure(rank_stability_figure(study["scores"], study["pairwise"]), results_dir / FIGURE_FILE)]


def read_results(results_dir: str | Path | None = None) -> dict[str, list[dict]]:
    """The committed study (``results/rank_stability.csv`` and ``rank_stability_scores.csv``) with its numbers and
    flags typed back; a clear error naming the command when absent."""
    results_dir = Path(results_dir or RESULTS_DIR)
    out = {}
    for key, name in (("pairwise", PAIRWISE_FILE), ("scores", SCORES_FILE)):
        path = results_dir / name
        if not path.is_file():
            raise MissingResultsError(f"no rank-stability study at {path}: run `cfkit rank-stability`.")
        with open(path, newline="") as handle:
            out[key] = [{k: _typed(v) for k, v in row.items()} for row in csv.DictReader(handle)]
    return out


def _typed(value: str) -> object:
    if value in ("", "None"):
        return None
    if value in ("True", "False"):
        return value == "True"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def labelled(rows: list[dict], labels: dict[str, str] | None = None) -> list[dict]:
    """The pairwise rows with the catalog's method labels, for a notebook's table."""
    labels = labels or catalog.labels()
    return [{**row, "a": labels.get(row["a"], row["a"]), "b": labels.get(row["b"], row["b"])} for row in rows]


def robust_summary(rows: list[dict], labels: dict[str, str] | None = None) -> str:
    """One line per metric: the orderings every admitted instrument agrees on, and those that flip."""
    labels = labels or catalog.labels()
    lines = []
    for metric in METRICS:
        chosen = [r for r in rows if r["metric"] == metric]
        robust = [_order(r, labels) for r in chosen if r["verdict"] == "robust"]
        flips = [f"{labels[r['a']]} vs {labels[r['b']]} ({r['share_a_below']:.2f})" for r in chosen
                 if r["verdict"] == "flips"]
        lines.append(f"{metric.upper()} over {chosen[0]['settings']} admitted settings: {len(robust)} of "
                     f"{len(chosen)} orderings hold under all; flip: {', '.join(flips) or 'none'}.")
    agreement = paper_agreement(rows)
    lines.append(f"The paper's {sum(len(v) for v in agreement.values())} IM1 orderings: "
                 + "; ".join(f"{verdict} {len(pairs)} ({', '.join(pairs) or '-'})" for verdict, pairs in
                             agreement.items()) + ".")
    return "\n".join(lines)


def paper_agreement(rows: list[dict], labels: dict[str, str] | None = None) -> dict[str, list[str]]:
    """The paper's IM1 orderings sorted by what the admitted instruments say of them: ``hold under all``,
    ``flip`` (some settings agree) and ``reversed under all``; each as "A < B" in the paper's order."""
    labels = labels or catalog.labels()
    out: dict[str, list[str]] = {"hold under all": [], "flip": [], "reversed under all": []}
    for row in rows:
        if row["metric"] != "im1" or row["paper_a_below"] is None:
            continue
        low, high = (row["a"], row["b"]) if row["paper_a_below"] else (row["b"], row["a"])
        agreeing = row["share_a_below"] if row["paper_a_below"] else 1 - row["share_a_below"]
        verdict = "hold under all" if agreeing == 1 else "reversed under all" if agreeing == 0 else "flip"
        out[verdict].append(f"{labels[low]} < {labels[high]}")
    return out


def _order(row: dict, labels: dict[str, str]) -> str:
    a, b = labels[row["a"]], labels[row["b"]]
    return f"{a} < {b}" if row["share_a_below"] == 1.0 else f"{b} < {a}"
