"""The zoo's registry, manifest and safe loading: ``load("ae_9")``, ``train("ae_9")``.

Each model has a spec (architecture, training config, quality threshold). Trained weights are
state dicts in ``data/checkpoints/<name>.pt``; ``manifest.json`` beside them records for each the
SHA-256, the command that rebuilds it, seed, epochs, seconds and quality figure. Loading checks
the hash and uses ``weights_only=True``.
"""
from __future__ import annotations

import io
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

from ..data import sha256_file
from ..errors import CheckpointError, QualityError
from ..paths import CHECKPOINT_DIR, atomic_write_bytes, atomic_write_json
from .nets import AllClassAutoencoder, ClassAutoencoder, Classifier, FeatureNet, Oracle
from .training import TrainConfig, train_autoencoder, train_classifier

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class ModelSpec:
    """What a zoo entry is, how it is trained and the figure it must reach to be shipped."""

    name: str
    build: Callable[[], nn.Module]
    kind: str  # "classifier" (judged by test accuracy, higher is better) or "autoencoder" (test MSE)
    config: TrainConfig
    threshold: float
    description: str

    @property
    def command(self) -> str:
        return f"cfkit train {self.name}"

    def passes(self, quality: dict[str, float]) -> bool:
        if self.kind == "classifier":
            return quality["test_accuracy"] >= self.threshold
        return quality["test_mse"] <= self.threshold


def _specs() -> dict[str, ModelSpec]:
    specs = [
        ModelSpec("classifier", Classifier, "classifier", TrainConfig(epochs=5, seed=0), 0.990,
                  "the model under explanation (C3LT MNIST CNN)"),
        ModelSpec("oracle", Oracle, "classifier", TrainConfig(epochs=3, seed=1), 0.990,
                  "independent judge of another architecture"),
        ModelSpec("features", FeatureNet, "classifier", TrainConfig(epochs=2, seed=2), 0.985,
                  "feature network for FID/KID (128-d)"),
        ModelSpec("ae_all", AllClassAutoencoder, "autoencoder", TrainConfig(epochs=4, seed=20, cosine=False), 0.005,
                  "all-class autoencoder for IM2"),
    ]
    specs += [
        ModelSpec(f"ae_{d}", ClassAutoencoder, "autoencoder", TrainConfig(epochs=30, seed=10 + d, digits=(d,),
                  cosine=False), 0.015, f"autoencoder of digit {d} only, for IM1")
        for d in range(10)
    ]
    return {s.name: s for s in specs}


SPECS: dict[str, ModelSpec] = _specs()


def names() -> list[str]:
    return list(SPECS)


def get_spec(name: str) -> ModelSpec:
    if name not in SPECS:
        raise CheckpointError(f"unknown zoo model {name!r}; known models: {', '.join(SPECS)}.")
    return SPECS[name]


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
    return _load_cached(name, str(Path(directory or CHECKPOINT_DIR).resolve()), str(device))


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


def train(
    name: str,
    directory: str | Path | None = None,
    epochs: int | None = None,
    max_steps: int | None = None,
    check_quality: bool = True,
    progress: bool = True,
) -> dict:
    """Train ``name`` from its seed, check its quality, save it and its manifest entry atomically.

    ``epochs``/``max_steps`` shorten the run (smoke tests); the manifest records what was done.
    """
    spec = get_spec(name)
    config = spec.config if epochs is None else TrainConfig(**{**asdict(spec.config), "epochs": epochs})
    directory = Path(directory or CHECKPOINT_DIR)
    torch.manual_seed(config.seed)
    model = spec.build()
    fit = train_classifier if spec.kind == "classifier" else train_autoencoder
    start = time.perf_counter()
    quality = fit(model, config, max_steps=max_steps, progress=progress, desc=name)
    seconds = time.perf_counter() - start
    if check_quality and not spec.passes(quality):
        raise QualityError(
            f"{name} reached {quality} after {config.epochs} epochs, missing its threshold {spec.threshold}; "
            "not saved. Train longer (--epochs) or look into the data."
        )
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    path = atomic_write_bytes(directory / f"{name}.pt", buffer.getvalue())
    command = spec.command + (f" --epochs {epochs}" if epochs is not None else "")
    entry = {
        "file": path.name,
        "sha256": sha256_file(path),
        "command": command + (f" (max_steps={max_steps})" if max_steps is not None else ""),
        "seed": config.seed,
        "epochs": config.epochs,
        "steps": quality.pop("steps"),
        "seconds": round(seconds, 1),
        "quality": quality,
        "threshold": spec.threshold,
        "parameters": sum(p.numel() for p in model.parameters()),
        "description": spec.description,
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {torch.get_num_threads()} threads",
        "trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    manifest = read_manifest(directory)
    manifest[name] = entry
    atomic_write_json(directory / MANIFEST, manifest)
    _load_cached.cache_clear()
    return entry
