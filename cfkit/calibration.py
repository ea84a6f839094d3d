"""IM1/IM2 calibration: how the instrument's verdict on real versus adversarial digits depends on the autoencoders.

The C3LT paper reports IM1 0.47 for real target-class digits and 1.02 for a targeted attack; with the Van
Looveren & Klaise autoencoders on [0, 1] images the kit measures about 0.87 and 1.08. The paper gives neither
its autoencoders nor its pixel range. This study retrains the per-class autoencoders of the protocol's six
classes over a grid (:data:`GRID`) of capacity (the three encoder widths; the last sets the 7×7 latent's
depth), pixel range ([0, 1] or [-1, 1], as the C3LT code feeds its networks) and training epochs, and scores the
Original Data and PGD counterfactual sets of the full protocol under each. IM2 uses the shipped all-class
autoencoder throughout (only AE_t varies).

The calibrated setting is the grid point whose mean Original Data IM1 is closest to the paper's 0.47 while real
data still scores below PGD on every pair; :data:`cfkit.zoo.checkpoints.CALIBRATED_AE` records it and
``cfkit train ae_cal_<d>`` trains its autoencoders. Run the study with ``cfkit calibrate`` (about 13 minutes on
2 CPU cores; it needs the sets of ``01_adversarial`` and ``10_metrics`` under ``runs/``).
"""
from __future__ import annotations

import copy
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from .data import PAIRS, pair_name
from .errors import MissingResultsError
from .metrics import im1_scores, im2_scores
from .paths import RESULTS_DIR, RUNS_DIR, atomic_write_json
from .store import load_counterfactuals, set_path
from .zoo.nets import ClassAutoencoder
from .zoo.training import TrainConfig, fit_loop, reconstruction_loss, total_steps

PAPER_ORIGINAL_IM1 = 0.47
CAPACITIES: dict[str, tuple[int, int, int]] = {
    "tiny": (4, 4, 1), "small": (8, 4, 2), "van_looveren": (16, 8, 8), "wide": (32, 16, 16)}
"""Encoder widths; the latent is last × 7 × 7 (49, 98, 392, 784 numbers)."""
RANGES = {"[0,1]": False, "[-1,1]": True}
EPOCHS = (1, 3, 10)
GRID: tuple[tuple[str, str, tuple[int, ...]], ...] = (
    *((capacity, pixel_range, EPOCHS) for capacity in ("tiny", "small") for pixel_range in RANGES),
    ("van_looveren", "[0,1]", EPOCHS), ("van_looveren", "[-1,1]", EPOCHS + (30,)), ("wide", "[-1,1]", EPOCHS),
)
"""(capacity, pixel range, epoch snapshots) of each training run. Epochs are snapshots of one run (constant
learning rate, as the shipped autoencoders: a snapshot at epoch k is a k-epoch run). A first pass over tiny,
small and Van Looveren in both ranges for 10 epochs showed [-1, 1] lowering real data's IM1 at every capacity
and the small ones reconstructing every digit equally badly (IM1 near 1), so the Van Looveren net runs on to 30
epochs in [-1, 1] and the wide one is tried there; the shipped 30-epoch [0, 1] autoencoders are the reference
row. About 13 minutes on 2 CPU cores."""
REFERENCE = "van_looveren (shipped)"
STUDY_FILE = "im_calibration.json"


@dataclass(frozen=True)
class GridPoint:
    capacity: str
    pixel_range: str
    epochs: int

    @property
    def channels(self) -> tuple[int, int, int]:
        return CAPACITIES[self.capacity]

    @property
    def signed(self) -> bool:
        return RANGES[self.pixel_range]


def train_snapshots(digit: int, capacity: str, pixel_range: str, epochs: Iterable[int] = EPOCHS,
                    max_steps: int | None = None) -> dict[int, dict[str, torch.Tensor]]:
    """Train one class's autoencoder (seed 10 + digit, as ``ae_<digit>``) and keep its weights after each of
    ``epochs``; ``max_steps`` caps the run (smoke tests: every snapshot is then the last state)."""
    wanted = sorted(set(epochs))
    config = TrainConfig(epochs=wanted[-1], seed=10 + digit, digits=(digit,), cosine=False)
    torch.manual_seed(config.seed)
    model = ClassAutoencoder(CAPACITIES[capacity], RANGES[pixel_range])
    per_epoch = total_steps(config, None) // config.epochs
    snapshots: dict[int, dict[str, torch.Tensor]] = {}
    state = {"step": 0}

    def after_step() -> None:
        state["step"] += 1
        if state["step"] % per_epoch == 0 and state["step"] // per_epoch in wanted:
            snapshots[state["step"] // per_epoch] = copy.deepcopy(model.state_dict())

    fit_loop(model, reconstruction_loss, config, max_steps, False, f"ae_{digit}", after_step=after_step)
    for epoch in wanted:  # a capped run: the missing snapshots are its last state
        snapshots.setdefault(epoch, copy.deepcopy(model.state_dict()))
    return snapshots


def _protocol_sets(runs_dir: Path, pairs: Iterable[tuple[int, int]]) -> dict[tuple[str, tuple[int, int]], object]:
    sets = {}
    for method, notebook in (("original_data", "10_metrics"), ("adv_attack", "01_adversarial")):
        for pair in pairs:
            path = set_path(runs_dir / notebook, method, pair)
            if not path.is_file():
                raise MissingResultsError(f"no {method} set for {pair_name(pair)} at {path}: run `cfkit run {notebook}` "
                                          "(or `make reproduce`) first.")
            sets[(method, pair)] = load_counterfactuals(path)
    return sets


def _autoencoder(point: GridPoint, state: dict[str, torch.Tensor]) -> ClassAutoencoder:
    model = ClassAutoencoder(point.channels, point.signed)
    model.load_state_dict(state)
    return model.eval()


def run_study(runs_dir: str | Path | None = None, pairs: Iterable[tuple[int, int]] = PAIRS,
              grid: Iterable[tuple[str, str, tuple[int, ...]]] = GRID, jobs: int = 2, max_steps: int | None = None,
              ae_all: torch.nn.Module | None = None) -> list[dict]:
    """IM1 and IM2 of Original Data and of PGD, per pair and as the mean over pairs, at every grid point, and for
    the shipped autoencoders (the reference row)."""
    from .zoo.checkpoints import load

    runs_dir, pairs, grid = Path(runs_dir or RUNS_DIR), list(pairs), list(grid)
    sets = _protocol_sets(runs_dir, pairs)
    ae_all = ae_all or load("ae_all")
    classes = sorted({d for pair in pairs for d in pair})
    # one torch thread per worker: `jobs` small networks side by side use the cores better than one wide one
    with ProcessPoolExecutor(max_workers=jobs, initializer=torch.set_num_threads, initargs=(1,)) as pool:
        longest_first = sorted(grid, key=lambda run: -max(run[2]) * CAPACITIES[run[0]][0])  # ends the pool together
        futures = {(d, capacity, pixel_range): pool.submit(train_snapshots, d, capacity, pixel_range, epochs, max_steps)
                   for capacity, pixel_range, epochs in longest_first for d in classes}
        trained = {job: future.result() for job, future in futures.items()}
    shipped = {d: load(f"ae_{d}") for d in classes}
    reference = {**_describe(GridPoint("van_looveren", "[0,1]", 30)), "capacity": REFERENCE}
    pair_rows = [_score_pair(reference, pair, sets, shipped, ae_all) for pair in pairs]
    rows = pair_rows + [{**reference, "pair": "mean", **_mean(pair_rows)}]
    for capacity, pixel_range, epochs in grid:
        for epoch in sorted(set(epochs)):
            point = GridPoint(capacity, pixel_range, epoch)
            autoencoders = {d: _autoencoder(point, trained[(d, capacity, pixel_range)][epoch]) for d in classes}
            pair_rows = [_score_pair(_describe(point), pair, sets, autoencoders, ae_all) for pair in pairs]
            rows += pair_rows + [{**_describe(point), "pair": "mean", **_mean(pair_rows)}]
    return rows


def _mean(pair_rows: list[dict]) -> dict:
    return {k: sum(r[k] for r in pair_rows) / len(pair_rows) for k in pair_rows[0] if k.startswith("im")}


def _describe(point: GridPoint) -> dict:
    latent = point.channels[2] * 49
    return {"capacity": point.capacity, "channels": list(point.channels), "latent": latent,
            "pixel_range": point.pixel_range, "epochs": point.epochs}


def _score_pair(setting: dict, pair: tuple[int, int], sets: dict, autoencoders: dict, ae_all: torch.nn.Module
                ) -> dict:
    """One pair's row: the ``setting``'s description and IM1/IM2 of its Original Data and PGD sets."""
    row = {**setting, "pair": pair_name(pair)}
    for method, short in (("original_data", "original"), ("adv_attack", "pgd")):
        cfs = sets[(method, pair)]
        row[f"im1_{short}"] = im1_scores(cfs.x_cf, cfs.target, cfs.source, autoencoders).mean().item()
        row[f"im2_{short}"] = im2_scores(cfs.x_cf, cfs.target, autoencoders, ae_all).mean().item()
    return row


def choose(rows: list[dict], target: float = PAPER_ORIGINAL_IM1) -> dict:
    """The grid point whose mean Original Data IM1 is closest to ``target`` among those where real data scores
    below PGD on every pair (the instrument must still separate them); its mean row."""
    def key(row: dict) -> tuple:
        return (row["capacity"], row["pixel_range"], row["epochs"])

    separating = {key(r) for r in rows if r["pair"] != "mean"}
    for row in rows:
        if row["pair"] != "mean" and row["im1_original"] >= row["im1_pgd"]:
            separating.discard(key(row))
    candidates = [r for r in rows if r["pair"] == "mean" and key(r) in separating]
    if not candidates:
        raise MissingResultsError("no grid point ranks real data below PGD on every pair; widen the grid.")
    return min(candidates, key=lambda r: abs(r["im1_original"] - target))


def calibrate(runs_dir: str | Path | None = None, results_dir: str | Path | None = None, jobs: int = 2) -> dict:
    """Run the study, choose the calibrated setting, write ``results/im_calibration.json``; return its content."""
    start = time.perf_counter()
    rows = run_study(runs_dir, jobs=jobs)
    chosen = choose(rows)
    reference = next(r for r in rows if r["pair"] == "mean" and r["capacity"] == REFERENCE)
    study = {"rows": rows, "chosen": chosen, "reference": reference, "paper_original_im1": PAPER_ORIGINAL_IM1,
             "grid": [{"capacity": c, "channels": list(CAPACITIES[c]), "pixel_range": r, "epochs": list(e)}
                      for c, r, e in GRID],
             "command": "cfkit calibrate", "seconds": round(time.perf_counter() - start, 1),
             "seeds": "10 + digit, as the shipped ae_<digit>", "ae_all": "the shipped ae_all"}
    atomic_write_json(Path(results_dir or RESULTS_DIR) / STUDY_FILE, study)
    return study


def read_study(results_dir: str | Path | None = None) -> dict:
    """The committed study (``results/im_calibration.json``): a clear error naming the command when absent."""
    import json

    path = Path(results_dir or RESULTS_DIR) / STUDY_FILE
    if not path.is_file():
        raise MissingResultsError(f"no calibration study at {path}: run `cfkit calibrate`.")
    return json.loads(path.read_text())


def setting_of(row: dict) -> dict:
    """The autoencoder setting a study row stands for, in the form of ``CALIBRATED_AE``."""
    return {"channels": tuple(row["channels"]), "signed": RANGES[row["pixel_range"]], "epochs": row["epochs"]}


def calibration_figure(study: dict):
    """Original Data and PGD IM1 (mean over pairs) at every grid point, the paper's values as lines."""
    import matplotlib.pyplot as plt

    means = [r for r in study["rows"] if r["pair"] == "mean"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    for ax, pixel_range in zip(axes, RANGES):
        for capacity, marker in zip(CAPACITIES, "os^D"):
            line = sorted((r for r in means if r["capacity"] == capacity and r["pixel_range"] == pixel_range),
                          key=lambda r: r["epochs"])
            epochs = [r["epochs"] for r in line]
            ax.plot(epochs, [r["im1_original"] for r in line], marker=marker, color="tab:green",
                    label=f"Original Data, {capacity}")
            ax.plot(epochs, [r["im1_pgd"] for r in line], marker=marker, color="tab:red", linestyle="--",
                    label=f"PGD, {capacity}")
        reference = next((r for r in means if r["capacity"] == REFERENCE and r["pixel_range"] == pixel_range), None)
        if reference:
            ax.scatter([30, 30], [reference["im1_original"], reference["im1_pgd"]], color=["tab:green", "tab:red"],
                       marker="*", s=120, zorder=3, label="shipped (Van Looveren, 30 ep)")
        ax.axhline(PAPER_ORIGINAL_IM1, color="tab:green", linewidth=0.8, alpha=0.6)
        ax.axhline(1.02, color="tab:red", linewidth=0.8, alpha=0.6)
        chosen = study["chosen"]
        if chosen["pixel_range"] == pixel_range:
            ax.scatter([chosen["epochs"]], [chosen["im1_original"]], s=200, facecolors="none", edgecolors="black",
                       label="calibrated setting")
        ax.set_xscale("log")
        ax.set_xlabel("training epochs")
        ax.set_title(f"pixel range {pixel_range}; lines: paper's 0.47 (real) and 1.02 (attack)", fontsize=9)
    axes[0].set_ylabel("IM1, mean over pairs (lower: more like the target)")
    labelled = {}
    for ax in axes:
        labelled.update(dict(zip(*reversed(ax.get_legend_handles_labels()))))
    axes[1].legend(labelled.values(), labelled.keys(), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig

