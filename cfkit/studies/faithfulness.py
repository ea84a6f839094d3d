"""The faithfulness study: every method at the kit's settings and at its paper's / public code's settings.

On one fixed subset (the first ``n_queries`` MNIST test images of each protocol pair's query class, the
same queries for every method), each :class:`Setting` is run and scored in the kit's metrics; budget
curves (CEM's FISTA iterations, LDCE's denoising steps, the training steps of C3LT's maps and ExplainGAN)
show whether a cheaper setting has converged to the reference. Rows are the mean over pairs with the
bootstrap interval of IM1 and kit-FID, plus one row per pair (``pair`` column).
"""
from __future__ import annotations

import copy
import csv
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import torch
from torch import nn

from ..common.devices import resolve_device
from ..data import PAIRS, load_mnist, pair_name
from ..errors import InputError
from ..methods.adversarial import ATTACK_KIT, ATTACK_REFERENCE, AdversarialAttack
from ..methods.base import CounterfactualMethod, Result
from ..methods.c3lt import C3LT, C3LTConfig
from ..methods.cem import CEM, CEM_REFERENCE, CEMConfig
from ..methods.cve import CVE, CVE_KIT, CVE_REFERENCE
from ..methods.expgan import ExpGAN
from ..methods.ldce import LDCE, LDCE_KIT, LDCE_REFERENCE, LDCEConfig
from ..paths import CHECKPOINT_DIR, RUNS_DIR, atomic_write_text
from ..scoring.evaluation import compare_settings, parse_pairs, protocol_queries, reference_images
from ..scoring.metrics import MetricModels
from ..scoring.pairs import evaluate_pair, mean_row
from ..zoo.checkpoints import load, load_needs, pair_name as model_name, pair_spec, read_manifest, train
from ..zoo.latent_maps import REFERENCE_FAMILY, REFERENCE_WEIGHTS, C3LTMaps, fit_c3lt
from ..zoo.reference_gan import FAMILY as REFERENCE_ENCODERS
from .curve import CURVE_DIR, load_denoiser_snapshot

COLUMNS = ("method", "setting", "budget", "n", "im1", "im2", "fid", "validity", "proximity", "seconds_per_cf",
           "pair", "im1_lo", "im1_hi", "fid_lo", "fid_hi", "oracle_agreement", "budget_unit", "budget_run", "device")
"""``results/faithfulness.csv``: the issue's columns first, then the pair, intervals, the budget actually spent
(``budget_run``: fewer FISTA iterations than ``budget`` when CEM stopped early) and where it ran."""

FIRST_GENERATION_DIR = CHECKPOINT_DIR / "first_generation"
"""The kit's first C3LT maps (225 steps) and ExplainGANs (5 epochs, no binary-mask prior): the ``kit`` rows."""

Build = Callable[[nn.Module, str], CounterfactualMethod]  # (classifier, device) -> method


@dataclass(frozen=True)
class Setting:
    """One point of the study: a method, the setting's name, its budget on the method's budget axis."""

    method: str
    setting: str
    budget: float
    unit: str
    build: Build
    spent: Callable[[Result], float] | None = None  # the budget actually used (CEM's early stopping)


def _cem(config: CEMConfig) -> Build:

    return lambda classifier, device: CEM(classifier, load("ae_all", device=device), config, device=device,
                                          batch_size=128)


def _ldce(config: LDCEConfig) -> Build:
    return lambda classifier, device: LDCE(classifier, config, device=device)


def _fista_iterations(result: Result) -> float:
    return result.extras["iterations"].float().mean().item()


def cem_settings(budgets: Sequence[int] = (50, 200, 1000), patience: int = 0, settle: str = "batch") -> list[Setting]:
    """The kit's CEM, the reference (9 × 1000) and the reference's hinge, κ, γ at fewer iterations a round;
    ``patience`` > 0 stops a round early once every image's best iterate has settled (``budget_run``), or, with
    ``settle="image"``, takes each settled image out of the working batch (the setting's name says so)."""
    kit = CEMConfig()
    rows = [Setting(CEM.name, "kit", kit.search_steps * kit.iterations, "FISTA iterations", _cem(kit),
                    _fista_iterations)]
    for iterations in budgets:
        config = replace(CEM_REFERENCE, iterations=iterations, patience=patience, settle=settle)
        name = "reference" if iterations == CEM_REFERENCE.iterations else f"reference@{iterations}"
        name += f", patience {patience} per image" if settle == "image" else ""
        rows.append(Setting(CEM.name, name, config.search_steps * iterations, "FISTA iterations", _cem(config),
                            _fista_iterations))
    return rows


def ldce_settings(steps: Sequence[int] = (100, 250, 500)) -> list[Setting]:
    """The kit's LDCE and the reference (α 40°, strength 0.342, gradient through the denoiser) at DDIM
    schedules of ``steps`` (500 is the paper's; the budget is the denoising steps actually run)."""
    kit = LDCE_KIT
    rows = [Setting(LDCE.name, "kit", kit.denoising_steps, "denoising steps", _ldce(kit))]
    for total in steps:
        config = replace(LDCE_REFERENCE, steps=total)
        name = "reference" if config == LDCE_REFERENCE else f"reference@{config.denoising_steps}"
        rows.append(Setting(LDCE.name, name, config.denoising_steps, "denoising steps", _ldce(config)))
    return rows


def fixed_settings() -> list[Setting]:
    """Adv. Attack and CVE, whose reference differs in kind (radius, search), not in budget."""
    return [
        Setting(AdversarialAttack.name, "kit", ATTACK_KIT.steps, "PGD steps",
                lambda c, d: AdversarialAttack(c, ATTACK_KIT, device=d)),
        Setting(AdversarialAttack.name, "reference", ATTACK_REFERENCE.steps, "PGD steps",
                lambda c, d: AdversarialAttack(c, ATTACK_REFERENCE, device=d)),
        Setting(CVE.name, "kit", CVE_KIT.max_cells, "cells", lambda c, d: CVE(c, CVE_KIT, device=d)),
        Setting(CVE.name, "reference", CVE_REFERENCE.max_cells, "cells", lambda c, d: CVE(c, CVE_REFERENCE, device=d)),
    ]


PAIR_METHODS = {cls.family: cls for cls in (C3LT, ExpGAN)}
"""The methods with a model per pair, by zoo family: their settings are checkpoints, not knobs."""


def pair_model_settings(pairs: Iterable[tuple[int, int]] = PAIRS) -> list[Setting]:
    """C3LT and ExpGAN: the first-generation checkpoints (``kit``) against the shipped, retrained ones
    (``reference``), and C3LT on the reference generator once every pair has it; the budget is the mean training
    steps over ``pairs`` from each manifest."""
    pairs, rows = parse_pairs(pairs), []
    for cls in PAIR_METHODS.values():
        for setting, directory in (("kit", FIRST_GENERATION_DIR), ("reference", None)):
            manifest = read_manifest(directory)
            steps = [manifest.get(model_name(cls.family, p), {}).get("steps") for p in pairs]
            budget = sum(steps) / len(steps) if all(steps) else float("nan")
            rows.append(Setting(cls.name, setting, budget, "training steps",
                                lambda c, d, cls=cls, directory=directory: cls(c, pair_dir=directory, device=d)))
    if not reference_generator_missing(pairs):  # till then `cfkit faithfulness --reference-generator` scores some
        rows.append(reference_generator_setting(pairs))
    return rows


def reference_generator_missing(pairs: str | Iterable = PAIRS) -> list[tuple[int, int]]:
    """The ``pairs`` whose C3LT maps on the reference generator (or their encoder) are not in the zoo yet."""
    shipped = read_manifest()
    return [p for p in parse_pairs(pairs)
            if not all(model_name(f, p) in shipped for f in (REFERENCE_FAMILY, REFERENCE_ENCODERS))]


def reference_generator_pairs(pairs: str | Iterable | None = None) -> list[tuple[int, int]]:
    """The pairs whose C3LT maps on the reference generator are shipped (of ``pairs``, default the protocol's);
    a pair asked for by name without them is refused with the command that trains them."""
    missing = reference_generator_missing(pairs or PAIRS)
    ready = [p for p in parse_pairs(pairs or PAIRS) if p not in missing]
    if (pairs is not None and missing) or not ready:
        q, t = missing[0]
        raise InputError(f"C3LT on the reference generator needs {model_name(REFERENCE_ENCODERS, (q, t))} and "
                         f"{model_name(REFERENCE_FAMILY, (q, t))} in the zoo; train them with `cfkit train "
                         f"{REFERENCE_ENCODERS} {REFERENCE_FAMILY} --pair {q} {t} --precision bfloat16` (README "
                         "\"Backbones\").")
    return ready


def reference_generator_setting(pairs: str | Iterable | None = None) -> Setting:
    """C3LT at its reference schedule on the C3LT code's DCGAN and per-pair encoders (:data:`REFERENCE_GENERATOR`);
    the budget is the maps' mean training steps over ``pairs``, from the manifest."""
    manifest = read_manifest()
    steps = [manifest[model_name(REFERENCE_FAMILY, p)]["steps"] for p in reference_generator_pairs(pairs)]
    return Setting(C3LT.name, REFERENCE_GENERATOR, sum(steps) / len(steps), REFERENCE_GENERATOR_UNIT,
                   lambda c, d: C3LT(c, C3LTConfig(backbone="reference"), device=d))


def reference_generator_rows(pairs: str | Iterable | None = None, n_queries: int = 100,
                             models: MetricModels | None = None, device: str = "cpu", seed: int = 0) -> list[dict]:
    """C3LT on the reference generator and that generator's floor, on the pairs that have its models (default:
    every protocol pair that does). Pair rows, and the mean row only once they are the protocol's three: a mean
    over fewer pairs would sit beside the other settings' three-pair means as if it were one of them."""
    ready = reference_generator_pairs(pairs)
    models = models or MetricModels.from_zoo(inception=False)
    rows = run_study([reference_generator_setting(ready)], ready, n_queries, models, device, seed, log=None)
    rows += backbone_floor(C3LT.name, ready, n_queries, models, seed, backbone="reference")
    return rows if set(ready) == set(PAIRS) else [r for r in rows if r["pair"] != "mean"]


def snapshot_setting(family: str, step: int, models: dict[tuple[int, int], nn.Module]) -> Setting:
    """A training snapshot of C3LT or ExpGAN (in memory, one model per pair, copies that training no longer
    changes) as a point of the curve."""
    cls = PAIR_METHODS[family]
    return Setting(family, f"reference@{step}", step, "training steps",
                   lambda c, d: cls(c, models=models, device=d))


DENOISER_UNIT = "denoiser epochs"
"""The budget axis of LDCE's rows along its denoiser's training curve (settings ``denoiser@<epoch>``)."""


def denoiser_settings(directory: str | Path | None = None) -> list[Setting]:
    """LDCE at the table's setting (:class:`LDCEConfig`) with each snapshot of its denoiser's training curve
    (``epoch_<n>.pt`` of ``cfkit backbone ldm_unet``, default ``runs/backbones/ldm_unet``): ``denoiser@<n>``
    on a budget axis of its own, the training epochs."""
    folder = Path(directory or RUNS_DIR / CURVE_DIR / "ldm_unet")
    epochs = sorted(int(p.stem.removeprefix("epoch_")) for p in folder.glob("epoch_*.pt")
                    if p.stem.removeprefix("epoch_").isdigit())
    if not epochs:
        raise InputError(f"no denoiser snapshots (epoch_<n>.pt) in {folder}: train its curve first with "
                         "`cfkit backbone ldm_unet`, or give the folder that holds them.")
    return [Setting(LDCE.name, f"denoiser@{epoch}", epoch, DENOISER_UNIT,
                    lambda c, d, path=folder / f"epoch_{epoch}.pt": LDCE(c, LDCEConfig(), unet=load_denoiser_snapshot(path),
                                                                        device=d))
            for epoch in epochs]


def replace_settings(path: str | Path, rows: list[dict]) -> Path:
    """Write ``rows`` into the study CSV at ``path`` in place of its rows of the same method and setting (the
    others kept, in their order; a missing file is created)."""
    fresh = {(r["method"], r["setting"]) for r in rows}
    kept = [r for r in read_csv(path) if (r["method"], r["setting"]) not in fresh] if Path(path).is_file() else []
    return write_csv(kept + rows, path)


def studied_methods() -> list[str]:
    """The methods the study has settings for, in the order it runs them."""
    return list(dict.fromkeys(s.method for s in study_settings()))


def study_settings(methods: Iterable[str] | None = None, cem_budgets: Sequence[int] = (50, 200, 1000),
                   ldce_steps: Sequence[int] = (100, 250, 500), cem_patience: int = 0, cem_settle: str = "batch"
                   ) -> list[Setting]:
    """Every setting of the study (``methods`` keeps some): kit and reference rows, and the budget curves."""
    every = (fixed_settings() + cem_settings(cem_budgets, cem_patience, cem_settle) + ldce_settings(ldce_steps)
             + pair_model_settings())
    if methods is None:
        return every
    wanted = set(methods)
    unknown = wanted - {s.method for s in every}
    if unknown:
        raise InputError(f"no study settings for {sorted(unknown)}; the study covers "
                         f"{', '.join(sorted({s.method for s in every}))}.")
    return [s for s in every if s.method in wanted]


def study_queries(pair: tuple[int, int], n_queries: int) -> torch.Tensor:
    """The study subset: the first ``n_queries`` MNIST test images of the pair's query class."""
    return protocol_queries(pair, n_queries)[0]


def score_setting(setting: Setting, pairs: str | Iterable = PAIRS, n_queries: int = 100,
                  models: MetricModels | None = None, device: str = "cpu", seed: int = 0) -> list[dict]:
    """Run one setting on the study subset of each pair; a row per pair and their mean (IM1 and FID with
    their 95 % bootstrap intervals)."""
    models = models or MetricModels.from_zoo(inception=False)
    method = setting.build(copy.deepcopy(models.classifier), device)  # the metrics keep theirs on the CPU

    def spent(result: Result) -> dict[str, float]:
        return {"budget_run": setting.spent(result) if setting.spent else setting.budget}

    rows = compare_settings({setting.setting: method}, pairs, n_queries, models, seed, spent, queries=study_queries,
                            intervals=True)
    return [_study_row(setting, row, device) for row in rows]


def _study_row(setting: Setting, row: dict, device: str) -> dict:
    values = {k: row.get(k) for k in COLUMNS if k in row}
    return {**values, "method": setting.method, "setting": setting.setting, "budget": setting.budget,
            "budget_unit": setting.unit, "device": device}


def run_study(settings: Iterable[Setting], pairs: str | Iterable = PAIRS, n_queries: int = 100,
              models: MetricModels | None = None, device: str = "cpu", seed: int = 0,
              log: Callable[[str], None] | None = print, csv_path: str | Path | None = None) -> list[dict]:
    """:func:`score_setting` for every setting; prints one line a setting as it finishes and, with ``csv_path``,
    rewrites the CSV after each (a run stopped early keeps what it finished)."""
    resolve_device(device)  # a missing GPU is one line before any model loads
    models = models or MetricModels.from_zoo(inception=False)
    rows = []
    for setting in settings:
        scored = score_setting(setting, pairs, n_queries, models, device, seed)
        rows += scored
        if csv_path is not None:
            write_csv(rows, csv_path)
        if log is not None:
            mean = scored[-1]
            log(f"{setting.method} {setting.setting} ({setting.budget:g} {setting.unit}): IM1 {mean['im1']:.3f} "
                f"FID {mean['fid']:.2f} validity {mean['validity']:.3f} {mean['seconds_per_cf']:.4f} s/CF")
    return rows


def write_csv(rows: list[dict], path: str | Path) -> Path:
    """The study's rows as CSV, atomically; floats to 6 significant digits, missing values empty."""
    import io

    def cell(value: object) -> str:
        if value is None or value != value:
            return ""
        return f"{value:.6g}" if isinstance(value, float) else str(value)

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows([cell(row.get(column)) for column in COLUMNS] for row in rows)
    return atomic_write_text(path, buffer.getvalue())


def read_csv(path: str | Path) -> list[dict]:
    """Rows of a study CSV with numbers parsed (empty cells: None)."""
    text = ("method", "setting", "pair", "budget_unit", "device")  # every other column is a number
    with open(path, newline="") as handle:
        return [{k: (v if k in text else (float(v) if v else None)) for k, v in row.items()}
                for row in csv.DictReader(handle)]


def inside_reference(rows: list[dict], method: str, setting: str, metrics: Sequence[str] = ("im1", "fid")) -> bool:
    """Whether ``setting``'s mean IM1 and kit-FID lie inside the reference setting's 95 % interval."""
    means = {r["setting"]: r for r in rows if r["method"] == method and r["pair"] == "mean"}
    if "reference" not in means or setting not in means:
        raise InputError(f"{method} has no mean row for 'reference' and {setting!r} in these rows.")
    reference, candidate = means["reference"], means[setting]
    return all(reference[f"{m}_lo"] <= candidate[m] <= reference[f"{m}_hi"] for m in metrics)


def verdicts(rows: list[dict]) -> list[dict]:
    """Per method, the cheapest setting whose mean IM1 and kit-FID lie inside the reference's interval
    (the reference itself when none does), and whether the kit setting does."""
    out = []
    for method in dict.fromkeys(r["method"] for r in rows):
        means = [r for r in rows if r["method"] == method and r["pair"] == "mean"]
        reference = next((r for r in means if r["setting"] == "reference"), None)
        if reference is None:
            continue
        means = [r for r in means if r.get("device") == reference.get("device")  # seconds compare on one machine
                 and _is_number(r.get("budget"))  # a floor is no setting
                 and r.get("budget_unit") == reference.get("budget_unit")]  # another axis: another backbone
        inside = [r for r in means if inside_reference(rows, method, r["setting"])]
        cheapest = min(inside, key=lambda r: (r["seconds_per_cf"] or 0.0, r["budget"]))
        out.append({"method": method, "kit_inside_reference": any(r["setting"] == "kit" for r in inside),
                    "cheapest": cheapest["setting"], "cheapest_seconds_per_cf": cheapest["seconds_per_cf"]})
    return out


def train_with_curve(family: str, pairs: Iterable[tuple[int, int]], directory: str | Path,
                     curve_steps: Sequence[int], n_queries: int = 100, device: str = "cpu",
                     max_steps: int | None = None, models: MetricModels | None = None,
                     log: Callable[[str], None] | None = print, check_quality: bool = True) -> list[dict]:
    """Train ``family``'s model of every pair into ``directory`` (checkpoints and manifest, as ``cfkit train``),
    keep a snapshot at each of ``curve_steps``, and score the snapshots on the study subset: the curve of
    the metrics over training steps (a snapshot step past a pair's training length is left out)."""

    pairs = parse_pairs(pairs)
    snapshots: dict[int, dict[tuple[int, int], nn.Module]] = {}
    for pair in pairs:
        def keep(model: nn.Module, step: int, pair: tuple[int, int] = pair) -> None:
            if step in curve_steps:
                snapshots.setdefault(step, {})[pair] = copy.deepcopy(model).cpu().eval()

        entry = train(model_name(family, pair), directory=directory, device=device, max_steps=max_steps,
                      on_step=keep, progress=False, check_quality=check_quality)
        if log is not None:
            log(f"{model_name(family, pair)}: {entry['steps']} steps in {entry['seconds']} s, {entry['quality']}")
    complete = {step: m for step, m in sorted(snapshots.items()) if len(m) == len(pairs)}
    return run_study([snapshot_setting(family, step, m) for step, m in complete.items()], pairs, n_queries,
                     models, device, log=log)


def ldce_with_denoiser(unet: nn.Module, n_queries: int = 100, pairs: str | Iterable = PAIRS,
                       models: MetricModels | None = None) -> dict[str, float]:
    """LDCE at the table's setting (:class:`cfkit.methods.ldce.LDCEConfig`'s defaults) with another denoiser (a
    training snapshot), on the study subset: the mean row's IM1, kit-FID and validity with their 95 % intervals,
    for a backbone's curve (``cfkit backbone ldm_unet``)."""
    method = LDCE(load("classifier"), LDCEConfig(), unet=unet)
    (mean,) = [r for r in compare_settings({"snapshot": method}, pairs, n_queries, models, queries=study_queries,
                                           intervals=True) if r["pair"] == "mean"]
    return {f"ldce_{metric}{end}": round(mean[f"{metric}{end}"], 4)
            for metric in ("im1", "fid", "validity") for end in ("", "_lo", "_hi")}


Reconstruction = Callable[[tuple[int, int]], Callable[[torch.Tensor], torch.Tensor]]
"""A backbone's reconstruction of one pair's digits: pair -> (x -> the backbone's decoding of its own code of x)."""


def _c3lt_reconstruction(backbone: str) -> Reconstruction:
    method = C3LT(load("classifier"), C3LTConfig(backbone=backbone))
    return lambda pair: (lambda x, encoder=method.encoder(pair): method.generator(encoder(x)))


def _ldce_reconstruction() -> Reconstruction:
    vae = load("ldm_vae")
    return lambda pair: (lambda x: vae.decode(vae.encode(x)))


REFERENCE_GENERATOR = "reference on dcgan_reference"
"""C3LT at its reference schedule on the C3LT code's generator and per-pair encoders (``backbone="reference"``)."""
REFERENCE_GENERATOR_UNIT = "training steps on dcgan_reference"
"""Its budget axis: the maps' training steps, on another generator than the kit's rows (no setting the verdicts
may pick in place of the kit generator's reference)."""


@dataclass(frozen=True)
class Floor:
    """What a method's backbone allows at best: the backbone's reconstruction of real target digits, scored as a
    counterfactual set, named ``setting`` in the study; :func:`floor_gap` sets it beside the method's ``bounds``."""

    method: str
    backbone: str
    setting: str
    bounds: str
    reconstruction: Callable[[], Reconstruction]


FLOORS: tuple[Floor, ...] = (
    Floor(C3LT.name, "kit", "floor G(E(x))", "reference", partial(_c3lt_reconstruction, "kit")),
    Floor(C3LT.name, "reference", "floor G(E(x)) on dcgan_reference", REFERENCE_GENERATOR,
          partial(_c3lt_reconstruction, "reference")),
    Floor(LDCE.name, "kit", "floor D(E(x))", "reference", _ldce_reconstruction),
)
"""Methods whose counterfactuals come out of a backbone's decoder, one floor a backbone: C3LT's generator over
its encoder (the kit's DCGAN and shared encoder, or the C3LT code's DCGAN and the pair's encoder), LDCE's VAE (the
latent the diffusion model edits)."""


def find_floor(method: str, backbone: str = "kit") -> Floor:
    """The floor of ``method`` on ``backbone``; an unknown one is refused with the floors there are."""
    for floor in FLOORS:
        if (floor.method, floor.backbone) == (method, backbone):
            return floor
    known = ", ".join(f"{f.method} on {f.backbone}" for f in FLOORS)
    raise InputError(f"no backbone floor for {method!r} on the {backbone!r} backbone; floors exist for {known}.")


def study_floors(methods: Iterable[str]) -> list[Floor]:
    """The floors of ``methods`` that the study scores: the kit backbones', and the reference generator's once its
    models are trained for every protocol pair (as its setting, :func:`pair_model_settings`)."""
    wanted = set(methods)
    return [f for f in FLOORS if f.method in wanted and (f.backbone == "kit" or not reference_generator_missing())]


def backbone_floor(method: str, pairs: str | Iterable = PAIRS, n_queries: int = 100,
                   models: MetricModels | None = None, seed: int = 0, backbone: str = "kit") -> list[dict]:
    """What ``method``'s backbone allows at best (:data:`FLOORS`): the reconstruction of ``n_queries`` real
    *training* digits of each target class, no edit applied, scored like a counterfactual set of the pair (kit-FID
    against the target's test digits). A counterfactual cannot look more real than the backbone's reconstruction
    of a real target digit."""
    floor = find_floor(method, backbone)
    reconstruction = floor.reconstruction()
    models = models or MetricModels.from_zoo(inception=False)
    pair_rows, pair_reps = [], []
    for pair in parse_pairs(pairs):
        x, _ = protocol_queries(pair, n_queries)
        real = load_mnist("train", digits=(pair[1],))[0][: len(x)]
        with torch.inference_mode():
            reconstructed = reconstruction(pair)(real)
        reps: dict[str, torch.Tensor] = {}
        row = evaluate_pair(x, reconstructed, pair[0], pair[1], reference_images(pair[1]), models, seed=seed,
                            replicates=reps)
        pair_rows.append({**row, "pair": pair_name(pair), "budget_run": None})
        pair_reps.append(reps)
    mean = {**mean_row(pair_rows, pair_reps), "pair": "mean", "budget_run": None}
    setting = Setting(method, floor.setting, float("nan"), "none", lambda c, d: None)
    return [_study_row(setting, row, "cpu") for row in pair_rows + [mean]]


C3LT_ABLATION = {
    "reference": {},
    "no proximity (alpha 0)": {"alpha": 0.0},
    "no adversarial (gamma 0, the code's default)": {"gamma": 0.0},
    "adversarial x100 (gamma 0.1)": {"gamma": 0.1},
    "no cycle (beta 0)": {"beta": 0.0},
    "wide map (400 wide, 2 hidden layers)": {"hidden": 400, "depth": 2},
}
"""What might keep C3LT's kit-FID above its generator floor: each loss term switched off or up, and the map's
capacity; every variant trains the pair's maps from the same seed for the same steps."""


def c3lt_ablation(pair: tuple[int, int] = (5, 6), steps: int = 1000, n_queries: int = 100,
                  variants: Iterable[str] | None = None, models: MetricModels | None = None,
                  log: Callable[[str], None] | None = print) -> list[dict]:
    """Train ``pair``'s C3LT maps for ``steps`` under each variant of :data:`C3LT_ABLATION` (the reference
    weights and schedule otherwise) and score them on the study subset; a row per variant. The training curve
    is flat from 1000 steps, so 1000 steps show what each change can do."""

    models = models or MetricModels.from_zoo(inception=False)
    spec = pair_spec(C3LT.family, pair)
    config, needed = spec.config, load_needs(spec)
    rows = []
    for name in variants or C3LT_ABLATION:
        change = dict(C3LT_ABLATION[name])
        shape = {k: change.pop(k) for k in ("hidden", "depth") if k in change}
        torch.manual_seed(config.seed)
        maps = C3LTMaps(pair, **shape)
        fit_c3lt(maps, config, needed, max_steps=steps, progress=False, weights=replace(REFERENCE_WEIGHTS, **change))
        maps.eval()
        setting = Setting(C3LT.name, f"ablation: {name}", steps, "training steps",
                          lambda c, d, m=maps: C3LT(c, models={pair: m}, device=d))
        row = score_setting(setting, [pair], n_queries, models)[0]
        rows.append(row)
        if log is not None:
            log(f"{name}: kit-FID {row['fid']:.2f} [{row['fid_lo']:.2f}, {row['fid_hi']:.2f}], IM1 {row['im1']:.3f}")
    return rows


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and value == value


def _cell(value: float | None, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if _is_number(value) else ""


def to_markdown(rows: list[dict], pair: str = "mean") -> str:
    """The study's rows of one pair (default the mean over pairs) as a markdown table, IM1 and FID with
    their 95 % intervals."""
    lines = ["| method | setting | budget | run | IM1 [95 % CI] | kit-FID [95 % CI] | validity | proximity | s/CF | device |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in (r for r in rows if r["pair"] == pair):
        im1 = f"{_cell(r['im1'])} [{_cell(r.get('im1_lo'))}, {_cell(r.get('im1_hi'))}]"
        fid = f"{_cell(r['fid'], 2)} [{_cell(r.get('fid_lo'), 2)}, {_cell(r.get('fid_hi'), 2)}]"
        lines.append(f"| {r['method']} | {r['setting']} | {_cell(r['budget'], 0)} {r.get('budget_unit') or ''} | "
                     f"{_cell(r.get('budget_run'), 0)} | {im1} | {fid} | {_cell(r['validity'])} | "
                     f"{_cell(r['proximity'])} | {_cell(r['seconds_per_cf'], 4)} | {r.get('device') or ''} |")
    return "\n".join(lines)


def recorded_numbers(rows: list[dict]) -> dict[str, float]:
    """{'cem/kit/mean/im1': …}: every finite number of the study's rows, for the notebook's expected values."""
    numbers = {}
    for r in rows:
        for column in ("n", "im1", "im2", "fid", "validity", "proximity", "oracle_agreement", "im1_lo", "im1_hi",
                       "fid_lo", "fid_hi", "budget", "budget_run", "seconds_per_cf"):
            value = r.get(column)
            if _is_number(value):
                numbers[f"{r['method']}/{r['setting']}/{r['pair']}/{column}"] = float(value)
    return numbers


def floor_gap(rows: list[dict], setting: str | None = None, method: str = C3LT.name,
              backbone: str = "kit") -> list[dict]:
    """Per pair, ``method``'s kit-FID at ``setting`` (default the one its floor bounds) beside its backbone's floor
    (:func:`backbone_floor`): is it within its interval of the floor?"""
    floor_of = find_floor(method, backbone)
    setting = setting or floor_of.bounds
    floor = {r["pair"]: r for r in rows if r["method"] == method and r["setting"] == floor_of.setting}
    out = []
    for r in (r for r in rows if r["method"] == method and r["setting"] == setting and r["pair"] in floor):
        gap = r["fid"] - floor[r["pair"]]["fid"]
        half_width = (r["fid_hi"] - r["fid_lo"]) / 2 if r.get("fid_hi") is not None else float("nan")
        out.append({"pair": r["pair"], "fid": r["fid"], "floor_fid": floor[r["pair"]]["fid"], "gap": gap,
                    "half_width": half_width, "within": gap <= half_width})
    return out


def merge(paths: Iterable[str | Path], rename: dict[str, str] | None = None) -> list[dict]:
    """The rows of several study CSVs as one study (settings of separate runs: CPU rows, a GPU training curve
    scored one pair a process). A setting with pair rows but no mean row gets one, the plain mean over its
    pairs (no interval: the pairs' bootstrap replicates are not kept in the CSV). ``rename`` maps a CSV path
    to a suffix for its settings (rows of the same setting measured another way, e.g. on a GPU)."""
    rows: list[dict] = []
    for path in paths:
        suffix = (rename or {}).get(str(path), "")
        rows += [{**r, "setting": r["setting"] + suffix} for r in read_csv(path)]
    # a CSV of one pair (a training curve scored in a process of its own) carries that pair again as "mean"
    means = [(r["method"], r["setting"]) for r in rows if r["pair"] == "mean"]
    out = [r for r in rows if r["pair"] != "mean" or means.count((r["method"], r["setting"])) == 1]
    groups = dict.fromkeys((r["method"], r["setting"]) for r in out)
    for method, setting in groups:
        members = [r for r in out if (r["method"], r["setting"]) == (method, setting)]
        if any(r["pair"] == "mean" for r in members):
            continue
        mean = {**members[0], "pair": "mean", "n": sum(r["n"] for r in members)}
        for column in ("im1", "im2", "fid", "validity", "proximity", "seconds_per_cf", "oracle_agreement",
                       "budget_run"):
            values = [r.get(column) for r in members]
            mean[column] = None if any(v is None for v in values) else sum(values) / len(values)
        mean.update({k: None for k in ("im1_lo", "im1_hi", "fid_lo", "fid_hi")})
        out.append(mean)
    return out
