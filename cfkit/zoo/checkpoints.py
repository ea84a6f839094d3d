"""The zoo's registry, manifest and safe loading: ``load("ae_9")``, ``train("ae_9")``.

Each model has a spec (architecture, training config, quality threshold, and the zoo models its training
and quality figure need: loaded here and handed over, so no model module imports this one). Trained weights
are state dicts in ``data/checkpoints/<name>.pt``; ``manifest.json`` beside them records for each the
SHA-256, the command that rebuilds it, seed, epochs, seconds and quality figure. Loading checks
the hash and uses ``weights_only=True``.
"""
from __future__ import annotations

import inspect
import io
import itertools
import platform
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

from ..common.devices import in_eval_mode, resolve_device
from ..common.fingerprint import fingerprint
from ..common.precision import check_precision, precision_flag
from ..common.validate import check_pair
from ..data import PAIRS, sha256_file
from ..errors import CheckpointError, InputError, QualityError
from ..paths import CHECKPOINT_DIR, RUNS_DIR, atomic_write_bytes, atomic_write_json
from . import explaingan, latent_maps, reference_gan
from .diffusion import LatentUNet, LatentVAE, denoiser_sample_accuracy, fit_denoiser, fit_vae, vae_reconstruction_mse
from .gan import DCGAN, Encoder, encoder_reconstruction_mse, fit_dcgan, fit_encoder, sample_fid
from .nets import AllClassAutoencoder, ClassAutoencoder, Classifier, FeatureNet, Oracle
from .reference_gan import ReferenceDCGAN
from .snapshots import SNAPSHOT_FILE, StepSnapshots, TrainingPaused
from .spec import ModelSpec, pair_name
from .training import TrainConfig, accuracy_on_test, fit_autoencoder, fit_classifier, reconstruction_mse_on_test

MANIFEST = "manifest.json"
SHIPPED_CLASSIFIER = "classifier"
"""The zoo's model under explanation: what a spec needing a classifier trains against unless told otherwise."""
CLASSIFIER_KEY = "classifier"
"""In a manifest entry of a model trained against a classifier: that classifier's fingerprint."""


def _classifier(name: str, build: Callable[[], nn.Module], config: TrainConfig, threshold: float,
                description: str) -> ModelSpec:
    return ModelSpec(name, build, fit_classifier, lambda model, _, __: accuracy_on_test(model), "test_accuracy",
                     True, config, threshold, description)


def _autoencoder(name: str, build: Callable[[], nn.Module], config: TrainConfig, threshold: float,
                 description: str) -> ModelSpec:
    return ModelSpec(name, build, fit_autoencoder,
                     lambda model, cfg, _: reconstruction_mse_on_test(model, cfg.digits), "test_mse", False,
                     config, threshold, description)


def gan_specs() -> list[ModelSpec]:
    """The generator zoo (C3LT, ExpGAN): the encoder is trained against the shipped dcgan, so train that first."""
    return [
        ModelSpec("dcgan", DCGAN, fit_dcgan, sample_fid, "sample_fid", False,
                  TrainConfig(epochs=20, seed=30, lr=2e-4, cosine=False), 15.0,
                  "DCGAN, latent 100 ~ N(0, I); FID of 10k samples vs MNIST test in the features space",
                  needs=("features",)),
        ModelSpec("encoder", Encoder, fit_encoder, encoder_reconstruction_mse, "test_mse", False,
                  TrainConfig(epochs=5, seed=31, cosine=False), 0.03, "encoder inverting the dcgan generator: G(E(x)) ≈ x",
                  needs=("dcgan",)),
    ]


def candidate_specs() -> list[ModelSpec]:
    """Models in training that the zoo does not ship yet: :func:`get_spec` knows them (their curve run registers
    them), :func:`names` (the shipped zoo, which the reproduction loads) lists them once they are in the manifest."""
    return [
        # the C3LT code's DCGAN (dcgan.py: batch 64, Adam 2e-4, beta1 0.5, BCE, 100 epochs); trained by its curve run,
        # which registers it once the last doubling of training moves its sample FID less than its interval; the
        # shipped one trained in bfloat16 autocast, 2x faster here (the README compares its curve with float32's)
        ModelSpec("dcgan_reference", ReferenceDCGAN, fit_dcgan, sample_fid, "sample_fid", False,
                  TrainConfig(epochs=100, seed=30, lr=2e-4, batch_size=64, cosine=False), 15.0,
                  "the C3LT code's DCGAN (ngf 64, 4 transposed convolutions, BatchNorm, Tanh mapped to [0, 1]); FID of "
                  "10k samples vs MNIST test in the features space",
                  "cfkit backbone dcgan_reference --precision bfloat16 --max-epochs 32",
                  needs=("features",)),
    ] + [pair_spec(family, pair) for family in PAIR_FAMILIES if family not in SHIPPED_PAIR_FAMILIES for pair in PAIRS]


PAIR_FAMILIES: dict[str, Callable[[tuple[int, int]], ModelSpec]] = {
    latent_maps.FAMILY: latent_maps.pair_spec, explaingan.FAMILY: explaingan.pair_spec,
    reference_gan.FAMILY: reference_gan.pair_spec, latent_maps.REFERENCE_FAMILY: latent_maps.reference_pair_spec}
"""Zoo models trained per (query, target) pair, named ``<family>_<q>_<t>``: each family's spec of one pair, as
the module of its model declares it."""
SHIPPED_PAIR_FAMILIES = (latent_maps.FAMILY, explaingan.FAMILY)
"""The families the zoo ships for the protocol's pairs; the reference backbone's come once it is trained."""


def pair_spec(family: str, pair: tuple[int, int]) -> ModelSpec:
    """The spec of one pair's model of ``family``; any pair of distinct digits can be trained."""
    if family not in PAIR_FAMILIES:
        raise CheckpointError(f"unknown pair family {family!r}; known: {', '.join(PAIR_FAMILIES)}.")
    return PAIR_FAMILIES[family](check_pair(pair))


def parse_pair_name(name: str) -> tuple[str, tuple[int, int]] | None:
    """``c3lt_4_9`` -> ("c3lt", (4, 9)); None for a name that is no pair family's model."""
    family, *parts = name.rsplit("_", 2)  # a family's name may hold underscores (c3lt_reference_4_9)
    if family in PAIR_FAMILIES and len(parts) == 2 and all(p.isdigit() and len(p) == 1 for p in parts):
        return family, (int(parts[0]), int(parts[1]))
    return None


def _parse_pair_name(name: str) -> ModelSpec | None:
    parsed = parse_pair_name(name)
    return None if parsed is None else pair_spec(*parsed)


def diffusion_specs() -> list[ModelSpec]:
    """LDCE's latent diffusion model; the denoiser trains on the shipped autoencoder's latents."""
    return [
        ModelSpec("ldm_vae", LatentVAE, fit_vae, vae_reconstruction_mse, "test_mse", False,
                  TrainConfig(epochs=4, seed=60, cosine=False), 0.004,
                  "KL autoencoder 28x28 <-> 4x7x7 latent (summed BCE + 1e-4 KL), latents scaled to unit variance"),
        # The shipped weights come from the denoiser's training curve (`cfkit backbone ldm_unet`: constant lr, until
        # a doubling moves sample FID less than its interval, 64 epochs); `cfkit train ldm_unet` still trains this
        # config (8 epochs, cosine), the first model the kit shipped.
        ModelSpec("ldm_unet", LatentUNet, fit_denoiser, denoiser_sample_accuracy, "sample_accuracy", True,
                  TrainConfig(epochs=8, seed=61, lr=1e-3), 0.9,
                  "class-conditional latent denoiser (eps, T=1000, linear beta, 10% null class, EMA 0.999); "
                  "classifier accuracy on DDIM-50 CFG-3 samples", "cfkit backbone ldm_unet",
                  needs=("ldm_vae", "classifier")),
    ]


CALIBRATED_AE = {"channels": (16, 8, 8), "signed": False, "code": 16, "code_relu": False, "epochs": 100,
                 "aggregation": "mean"}
"""The per-class autoencoders of the calibrated IM1/IM2 setting, as chosen by ``cfkit calibrate`` (recorded in
results/im_calibration.json): among real autoencoders that rank real data below PGD on every pair with disjoint
intervals, the one whose real-data IM1 is closest to the paper's 0.47 — the Van Looveren widths squeezed through
a dense, linear 16-number code, 100 epochs, IM1 as the mean of per-image ratios."""
CALIBRATED_THRESHOLD = 0.03
"""Test MSE a calibrated autoencoder must reach: the study measured 0.008 to 0.015 by digit for this setting
(0.007 to 0.010 for the shipped ae_<d>); twice the worst catches a broken run."""


def _calibrated_autoencoder() -> nn.Module:
    return ClassAutoencoder(CALIBRATED_AE["channels"], CALIBRATED_AE["signed"], CALIBRATED_AE["code"],
                            CALIBRATED_AE["code_relu"])


def _specs() -> dict[str, ModelSpec]:
    specs = [
        _classifier("classifier", Classifier, TrainConfig(epochs=5, seed=0), 0.990,
                    "the model under explanation (C3LT MNIST CNN)"),
        _classifier("oracle", Oracle, TrainConfig(epochs=3, seed=1), 0.990,
                    "independent judge of another architecture"),
        _classifier("features", FeatureNet, TrainConfig(epochs=2, seed=2), 0.985,
                    "feature network for FID/KID (128-d)"),
        _autoencoder("ae_all", AllClassAutoencoder, TrainConfig(epochs=4, seed=20, cosine=False), 0.005,
                     "all-class autoencoder for IM2"),
    ]
    specs += [
        _autoencoder(f"ae_{d}", ClassAutoencoder, TrainConfig(epochs=30, seed=10 + d, digits=(d,), cosine=False),
                     0.015, f"autoencoder of digit {d} only, for IM1")
        for d in range(10)
    ]
    specs += [
        _autoencoder(f"ae_cal_{d}", _calibrated_autoencoder,
                     TrainConfig(epochs=CALIBRATED_AE["epochs"], seed=10 + d, digits=(d,), cosine=False),
                     CALIBRATED_THRESHOLD, f"calibrated IM1 autoencoder of digit {d} (`cfkit calibrate`)")
        for d in range(10)
    ]
    specs += gan_specs()
    specs += diffusion_specs()
    specs += [pair_spec(family, pair) for family in SHIPPED_PAIR_FAMILIES for pair in PAIRS]
    return {s.name: s for s in specs}


SPECS: dict[str, ModelSpec] = _specs()


def names() -> list[str]:
    """The shipped zoo: every spec's model, and a model in training once its run registered it."""
    shipped = read_manifest()
    return list(SPECS) + [spec.name for spec in candidate_specs() if spec.name in shipped]


def retrainable_names() -> list[str]:
    """What ``cfkit train --all`` rebuilds, in dependency order: the zoo but the backbones shipped from their
    training curves, whose own command (:attr:`ModelSpec.command`) retrains them as shipped."""
    return [name for name in names() if not get_spec(name).from_curve]


def get_spec(name: str) -> ModelSpec:
    """The spec of a shipped model, of a model in training (:func:`candidate_specs`), or of any pair family's
    ``<family>_<q>_<t>``."""
    if name in SPECS:
        return SPECS[name]
    candidate = next((spec for spec in candidate_specs() if spec.name == name), None)
    if candidate is not None:
        return candidate
    spec = _parse_pair_name(name)
    if spec is None:
        raise CheckpointError(f"unknown zoo model {name!r}; known models: {', '.join(SPECS)}.")
    return spec


def read_manifest(directory: str | Path | None = None) -> dict[str, dict]:
    """The manifest as a dict name -> entry; empty when none was written yet."""
    import json

    path = Path(directory or CHECKPOINT_DIR) / MANIFEST
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc}); restore it from git or retrain.") from exc


def load(name: str, directory: str | Path | None = None, device: str | torch.device = "cpu") -> nn.Module:
    """Load a shipped model, verified against the manifest, in eval mode with frozen weights."""
    return _load_cached(name, str(Path(directory or CHECKPOINT_DIR).resolve()), str(resolve_device(device)))


@lru_cache(maxsize=32)
def _load_cached(name: str, directory: str, device: str) -> nn.Module:
    spec = get_spec(name)
    path = Path(directory) / f"{name}.pt"
    rebuild = f"rebuild it with `{spec.command}`"
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} is missing; {rebuild} (or restore it from git).")
    entry = read_manifest(directory).get(name)
    if entry is None:
        raise CheckpointError(f"{path} has no entry in {Path(directory) / MANIFEST}; {rebuild}.")
    digest = sha256_file(path)
    if digest != entry["sha256"]:
        raise CheckpointError(
            f"checkpoint {path} is corrupt or was replaced: SHA-256 {digest[:12]}… does not match the manifest's "
            f"{entry['sha256'][:12]}…; {rebuild}."
        )
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"checkpoint {path} cannot be read ({exc}); {rebuild}.") from exc
    model = spec.build()
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as exc:
        detail = " ".join(str(exc).split())[:300]
        raise CheckpointError(
            f"checkpoint {path} does not fit the {type(model).__name__} architecture ({detail}); {rebuild}."
        ) from exc
    model.to(device).eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model


def load_needs(spec: ModelSpec, device: str | torch.device = "cpu") -> dict[str, nn.Module]:
    """The shipped models ``spec`` declares in ``needs``, loaded on ``device``: what its fit and measure take."""
    return {name: load(name, device=device) for name in spec.needs}


def load_pair(family: str, pair: tuple[int, int], directory: str | Path | None = None,
              device: str | torch.device = "cpu", classifier: str | None = None) -> nn.Module:
    """Load the ``family`` model of one (query, target) pair and check it was trained on that pair and, when
    ``classifier`` (a fingerprint) is given, against that classifier."""
    spec = pair_spec(family, pair)
    model = load(spec.name, directory, device)
    trained_on = tuple(model.pair.tolist())
    if trained_on != tuple(pair):
        raise CheckpointError(
            f"{spec.name}.pt holds a model trained on {trained_on[0]}->{trained_on[1]}, not {pair[0]}->{pair[1]}; "
            f"rebuild it with `{spec.command}`."
        )
    if classifier is None:
        return model
    trained_for = read_manifest(directory)[spec.name].get(CLASSIFIER_KEY) or fingerprint(load(SHIPPED_CLASSIFIER))
    if classifier != trained_for:
        raise CheckpointError(
            f"{spec.name} in {directory or CHECKPOINT_DIR} was trained against classifier {trained_for[:12]}…, not the "
            f"one being explained ({classifier[:12]}…): a per-pair model learns its classifier's decision. Train one "
            f"for yours with `{spec.command} --classifier <yours> --out <folder>` and give that folder as pair_dir."
        )
    return model


def train(
    name: str,
    directory: str | Path | None = None,
    epochs: int | None = None,
    max_steps: int | None = None,
    check_quality: bool = True,
    progress: bool = True,
    device: str = "cpu",
    on_step: Callable[[nn.Module, int], None] | None = None,
    classifier: nn.Module | None = None,
    classifier_spec: str | None = None,
    minutes: float | None = None,
    snapshot_dir: str | Path | None = None,
    precision: str = "float32",
) -> dict:
    """Train ``name`` from its seed, check its quality, save it and its manifest entry atomically.

    ``epochs``/``max_steps`` shorten the run (smoke tests); the manifest records what was done. ``device``
    ("cuda") trains there; the quality figure is always measured on the CPU. ``on_step(model, step)`` runs after
    every optimiser step (training curves; C3LT and ExpGAN only). ``classifier``: train against this model
    instead of the shipped classifier (a per-pair model for another classifier; ``classifier_spec`` is how the
    command names it), into a ``directory`` of the caller's, never the shipped zoo's.

    ``minutes`` or ``snapshot_dir``: train in pieces (the fits that take ``snapshots``: C3LT's maps and the
    encoders). The state is saved in ``snapshot_dir`` (default ``runs/train/<name>``) as the fit goes; once
    ``minutes`` have passed it pauses and this returns ``{"paused": True, "step": …, "total": …}``; the same
    call again goes on from there, to the weights an uninterrupted run gives. ``precision``: "bfloat16" trains
    those same long fits under autocast, about twice as fast on a CPU (:mod:`cfkit.common.precision`).
    """
    spec = get_spec(name)
    if check_precision(precision) != "float32" and not resumable(name):
        raise InputError(f"precision {precision!r} is for the long fits that train in pieces (C3LT's maps and the "
                         f"encoders); {name} trains in float32.")
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1):
        raise InputError(f"epochs must be an int >= 1 (or None: the spec's {spec.config.epochs}), got {epochs!r}.")
    overrides = {"device": str(resolve_device(device)), "precision": precision,
                 **({} if epochs is None else {"epochs": epochs})}
    config = TrainConfig(**{**asdict(spec.config), **overrides})
    _check_classifier_override(spec, classifier, directory)
    snapshots = _snapshots(spec, config, max_steps, minutes, snapshot_dir, on_step, classifier)
    directory = Path(directory or CHECKPOINT_DIR)
    needed = load_needs(spec, device)  # before seeding: building them draws on torch's generator
    if classifier is not None:
        needed[SHIPPED_CLASSIFIER] = in_eval_mode(classifier.to(device))
    torch.manual_seed(config.seed)
    model = spec.build()
    start = time.perf_counter()
    hooks: dict = {} if snapshots is None else {"snapshots": snapshots}
    if on_step is not None:
        counter = itertools.count(1)
        hooks["after_step"] = lambda: on_step(model, next(counter))
    try:
        steps = spec.fit(model, config, needed, max_steps=max_steps, progress=progress, desc=name, **hooks)
    except TrainingPaused as paused:
        return {"paused": True, "step": paused.step, "total": paused.total, "snapshot": str(paused.path)}
    seconds = snapshots.seconds() if snapshots is not None else time.perf_counter() - start
    model.to("cpu").eval()
    config = TrainConfig(**{**asdict(config), "device": "cpu"})
    measured_with = load_needs(spec)
    if classifier is not None:
        measured_with[SHIPPED_CLASSIFIER] = in_eval_mode(classifier.to("cpu"))
    quality = {spec.metric: round(spec.measure(model, config, measured_with), 6)}
    # what ran: a model shipped from its curve (`cfkit backbone NAME`) retrained here is `cfkit train NAME`
    ran = f"cfkit train {spec.name}" if spec.from_curve else spec.command
    command = ran + (f" --epochs {epochs}" if epochs is not None else "") + precision_flag(precision)
    if classifier is not None:
        command += f" --classifier {classifier_spec or '<a classifier given in Python>'} --out {directory}"
    command += f" (max_steps={max_steps})" if max_steps is not None else ""
    classifier_used = measured_with.get(SHIPPED_CLASSIFIER) if SHIPPED_CLASSIFIER in spec.needs else None
    entry = register(spec, model, directory, command, config.seed, config.epochs, steps, seconds, quality, device,
                     check_quality=check_quality, classifier=classifier_used)
    if snapshots is not None:
        snapshots.finish()
    return entry


def resumable(name: str) -> bool:
    """Whether ``name``'s fit can train in pieces (takes ``snapshots``: C3LT's maps, the encoders)."""
    return "snapshots" in inspect.signature(get_spec(name).fit).parameters


def _snapshots(spec: ModelSpec, config: TrainConfig, max_steps: int | None, minutes: float | None,
               snapshot_dir: str | Path | None, on_step: Callable | None, classifier: nn.Module | None
               ) -> StepSnapshots | None:
    """The resumable state of a training in pieces, or None when it runs in one go; what cannot be is refused."""
    if minutes is None and snapshot_dir is None:
        return None
    if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or minutes < 0):
        raise InputError(f"minutes must be a number >= 0 (the budget of this piece), got {minutes!r}.")
    if not resumable(spec.name):
        pieces = ", ".join([n for n in SPECS if resumable(n) and parse_pair_name(n) is None] +
                           [f"{f}_<q>_<t>" for f in PAIR_FAMILIES if resumable(pair_name(f, PAIRS[0]))])
        raise InputError(f"{spec.name} trains in one go (its fit does not save snapshots); training in pieces "
                         f"(minutes, snapshot_dir) is for {pieces}.")
    if on_step is not None or classifier is not None:
        raise InputError("training in pieces goes with neither on_step nor another classifier; train those in one go.")
    key = {"name": spec.name, "config": asdict(config), "max_steps": max_steps}
    return StepSnapshots(Path(snapshot_dir or RUNS_DIR / "train" / spec.name) / SNAPSHOT_FILE, key, minutes)


def register(spec: ModelSpec, model: nn.Module, directory: str | Path, command: str, seed: int, epochs: int,
             steps: int, seconds: float, quality: dict[str, float], device: str | torch.device = "cpu",
             check_quality: bool = True, classifier: nn.Module | None = None, extra: dict | None = None) -> dict:
    """Save a trained model and its manifest entry atomically (what :func:`train` and a curve run that converged
    end with); a model that misses its spec's threshold is kept as ``<name>.rejected.pt`` and refused."""
    directory, name = Path(directory), spec.name
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    if check_quality and not spec.passes(quality):
        rejected = atomic_write_bytes(directory / f"{name}.rejected.pt", buffer.getvalue())
        raise QualityError(
            f"{name} reached {quality} after {epochs} epochs, missing its threshold {spec.threshold}; "
            f"not registered (the weights are kept for inspection in {rejected}). Train longer (--epochs) or "
            "look into the data."
        )
    path = atomic_write_bytes(directory / f"{name}.pt", buffer.getvalue())
    entry = {
        "file": path.name,
        "sha256": sha256_file(path),
        "command": command,
        "seed": seed,
        "epochs": epochs,
        "steps": steps,
        "seconds": round(seconds, 1),
        "quality": quality,
        "threshold": spec.threshold,
        "parameters": sum(p.numel() for p in model.parameters()),
        "description": spec.description,
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {torch.get_num_threads()} threads"
                   + (f", {torch.cuda.get_device_name(device)}" if str(device).startswith("cuda") else ""),
        "trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **(extra or {}),
    }
    if classifier is not None:
        entry[CLASSIFIER_KEY] = fingerprint(classifier)
    manifest = read_manifest(directory)
    manifest[name] = entry
    atomic_write_json(directory / MANIFEST, manifest)
    _load_cached.cache_clear()
    return entry


def train_pairs(family: str, pairs: list[tuple[int, int]], directory: str | Path, progress: bool = True,
                device: str = "cpu", classifier: nn.Module | None = None, classifier_spec: str | None = None) -> Path:
    """Retrain ``family``'s model for each pair into ``directory`` (with its own manifest), against ``classifier``
    when given (else the shipped one); return the directory."""
    for pair in pairs:
        train(pair_name(family, pair), directory=directory, progress=progress, device=device, classifier=classifier,
              classifier_spec=classifier_spec)
    return Path(directory)


def _check_classifier_override(spec: ModelSpec, classifier: nn.Module | None, directory: str | Path | None) -> None:
    """A model trained against another classifier uses that classifier and goes in the caller's own folder."""
    if classifier is None:
        return
    if SHIPPED_CLASSIFIER not in spec.needs:
        against = [f for f, family_spec in PAIR_FAMILIES.items() if SHIPPED_CLASSIFIER in family_spec((4, 9)).needs]
        raise InputError(f"{spec.name} is not trained against a classifier; --classifier goes with the per-pair "
                         f"models ({', '.join(against)}).")
    if directory is None or Path(directory).resolve() == CHECKPOINT_DIR.resolve():
        raise InputError(f"{spec.name} trained for another classifier would replace the shipped one; give it a "
                         "folder of its own (--out DIR, or directory=).")
