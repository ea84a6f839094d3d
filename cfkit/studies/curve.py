"""Train a backbone in pieces until its curve says it has converged (issue 29): C3LT's reference DCGAN first.

A training run lives in one folder: ``state.pt`` (models, optimisers, epochs done; written atomically after every
epoch), ``epoch_<e>.pt`` (the model at each curve point) and the curve, which is also written to
``results/backbones/<name>_curve.csv``. Every epoch draws its shuffle and its latents from generators seeded by
(seed, epoch), so a run stopped after any epoch and resumed gives the same weights as one that never stopped.

The curve scores the model at epochs 1, 2, 4, 8, …: FID of a fixed number of seeded samples against the MNIST
test set in the kit's feature space, with a 95 % bootstrap interval over the samples. The run has converged when
the last doubling of training moved FID by less than the half-width of its interval; it stops then, at the
reference's own length, or when its time budget is spent (at an epoch boundary: run the command again to go on).
"""
from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..common.devices import resolve_device
from ..common.precision import check_precision, precision_flag, training_autocast
from ..data import load_mnist
from ..errors import CheckpointError, InputError
from ..paths import RESULTS_DIR, RUNS_DIR, atomic_torch_save, atomic_write_text
from ..scoring.bootstrap import FrechetReference, counts, interval, resample_indices
from ..zoo.feature_space import FeatureExtractor, embed
from ..zoo.losses import critic_loss, looks_real
from ..zoo.reference_gan import ReferenceDCGAN

CURVE_DIR = "backbones"
"""In results/ and runs/: each backbone's curve (``<name>_curve.csv``) and its training folder."""
STATE_FILE = "state.pt"
CURVE_COLUMNS = ("epoch", "steps", "seconds", "fid", "fid_lo", "fid_hi", "moved", "converged", "device")
OWN_SCORES = {"sample_accuracy"}
"""What the denoiser's curve scores itself beside FID; any other column is its ``extra`` measure's."""


@dataclass(frozen=True)
class GANCurveConfig:
    """The C3LT code's DCGAN training (``dcgan.py``: Adam 2e-4, β1 0.5, batch 64, BCE, 100 epochs to
    ``netG_epoch_99``) and the curve's measurement."""

    seed: int = 30
    lr: float = 2e-4
    beta1: float = 0.5
    batch_size: int = 64
    max_epochs: int = 100  # the reference trains 100 epochs; the curve may call it converged before
    samples: int = 10_000  # seeded samples scored at every curve point
    resamples: int = 200  # bootstrap replicates of the FID interval
    steps_per_epoch: int | None = None  # None: the whole training set (smoke tests cap it)
    # "float32" is the C3LT code's precision; "bfloat16" trains under autocast (cfkit.common.precision), twice
    # as fast on this machine, so that the whole curve fits one session of 2 cores
    precision: str = "float32"

    def __post_init__(self) -> None:
        check_counts(self)
        check_precision(self.precision)


def _identity(config: dict) -> dict:
    """What makes two runs the same run: every setting but ``max_epochs``, a stopping rule (each epoch draws from
    (seed, epoch), so a longer or shorter run trains its common epochs to the same weights)."""
    return {key: value for key, value in config.items() if key != "max_epochs"}


def check_counts(config: Any) -> None:
    """Refuse a curve config whose epochs, samples, resamples or batch size is not a positive int (samples >= 2)."""
    for name in ("max_epochs", "samples", "resamples", "batch_size"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < (2 if name == "samples" else 1):
            raise InputError(f"{name} must be an int >= {2 if name == 'samples' else 1}, got {value!r}.")


def curve_epochs(max_epochs: int) -> list[int]:
    """1, 2, 4, … up to ``max_epochs``, and ``max_epochs`` itself: where the curve scores the model."""
    points = [2**k for k in range(int(math.log2(max_epochs)) + 1)]
    return points + ([max_epochs] if points[-1] != max_epochs else [])


def converged(previous: dict | None, current: dict) -> bool:
    """Whether the last doubling moved FID by less than the half-width of the current point's interval."""
    if previous is None:
        return False
    return abs(current["fid"] - previous["fid"]) < (current["fid_hi"] - current["fid_lo"]) / 2


class CurveRun:
    """A resumable training run in ``directory`` scored on its curve; a subclass builds the model and optimisers
    (``_build``), names the state to save (``_parts``), prepares the data and the scoring once a run
    (``_prepare``), trains one epoch (``train_epoch``) and scores the model (``score``: FID and its interval)."""

    name = "backbone"

    def __init__(self, directory: str | Path | None = None, config: Any = GANCurveConfig(),
                 device: str | None = "cpu", results_dir: str | Path | None = None,
                 register_into: str | Path | None = None) -> None:
        """``config``: the subclass's (:class:`GANCurveConfig`, :class:`DenoiserCurveConfig`). ``register_into``: the zoo folder the model is registered into once it converges (the CLI gives the
        shipped zoo's, data/checkpoints); None registers nothing."""
        self.directory = Path(directory or RUNS_DIR / CURVE_DIR / self.name)
        self.results_dir = Path(results_dir or RESULTS_DIR) / CURVE_DIR
        self.register_into = register_into
        self.config, self.device = config, resolve_device(device)
        torch.manual_seed(config.seed)  # the constructors draw the initial weights
        self._build()
        self.epochs_done, self.steps, self.seconds, self.curve = 0, 0, 0.0, []
        self._resume()

    def _build(self) -> None:
        raise NotImplementedError

    def _parts(self) -> dict[str, Any]:
        raise NotImplementedError

    def _prepare(self, features: nn.Module) -> Any:
        raise NotImplementedError

    def train_epoch(self, data: Any) -> None:
        raise NotImplementedError

    def score(self, features: nn.Module, context: Any) -> dict:
        raise NotImplementedError

    def snapshot(self) -> dict[str, torch.Tensor]:
        """The weights kept at each curve point (and shipped): the model's."""
        return self.model.state_dict()

    def _generators(self) -> tuple[torch.Generator, torch.Generator]:
        """This epoch's shuffle and noise generators, seeded by (seed, epoch): a resumed run draws the same."""
        epoch = self.epochs_done + 1
        return (torch.Generator().manual_seed(self.config.seed * 100_003 + epoch),
                torch.Generator().manual_seed(self.config.seed * 100_003 + epoch + 50_000))

    # ---- state ----
    def _resume(self) -> None:
        path = self.directory / STATE_FILE
        if not path.is_file():
            return
        try:
            state = torch.load(path, map_location=self.device, weights_only=True)
            if _identity(state["config"]) != _identity(asdict(self.config)):
                raise CheckpointError(f"{path} was trained with {state['config']}, not {asdict(self.config)}; "
                                      "give the same settings, or another --dir to start afresh.")
            for key, part in self._parts().items():
                part.load_state_dict(state[key])
        except CheckpointError:
            raise
        except Exception as exc:  # a truncated or foreign file
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise CheckpointError(f"{path} is not a readable training state ({type(exc).__name__}: {first[:160]}); "
                                  "delete it to start afresh.") from exc
        self.epochs_done, self.steps, self.seconds = state["epochs_done"], state["steps"], state["seconds"]
        self.curve = state["curve"]

    def _save(self) -> None:
        atomic_torch_save(self.directory / STATE_FILE, {
            **{key: part.state_dict() for key, part in self._parts().items()}, "epochs_done": self.epochs_done,
            "steps": self.steps, "seconds": self.seconds, "curve": self.curve, "config": asdict(self.config)})

    def run(self, features: nn.Module, minutes: float | None = None, log: Callable[[str], None] = print) -> bool:
        """Train on until converged, ``max_epochs``, or ``minutes`` spent (checked after each epoch); return
        whether the curve has converged."""
        if self.curve and self.curve[-1]["converged"]:
            log(f"{self.name}: converged at epoch {self.curve[-1]['epoch']} (FID {self.curve[-1]['fid']}); nothing to "
                f"train{'' if self.register_into is None else f', registered into {self.register_into}'}")
            if self.register_into is not None:  # a run that converged before it was asked to ship its model
                self.register(features)
            return True
        data, context = self._prepare(features)
        points, start = curve_epochs(self.config.max_epochs), time.perf_counter()
        while self.epochs_done < self.config.max_epochs:
            began = time.perf_counter()
            self.train_epoch(data)
            self.seconds += time.perf_counter() - began
            message = f"{self.name}: epoch {self.epochs_done} done ({self.steps} steps, {self.seconds:.0f} s trained)"
            if self.epochs_done in points:
                point = {"epoch": self.epochs_done, "steps": self.steps, "seconds": round(self.seconds, 1),
                         **self.score(features, context), "device": str(self.device)}
                previous = self.curve[-1] if self.curve else None
                point["moved"] = round(abs(point["fid"] - previous["fid"]), 4) if previous else None
                point["converged"] = converged(previous, point)
                self.curve.append(point)
                atomic_torch_save(self.directory / f"epoch_{self.epochs_done}.pt", self.snapshot())
                self._write_curve()
                message += f"; FID {point['fid']} [{point['fid_lo']}, {point['fid_hi']}]"
            self._save()
            log(message)
            if self.curve and self.curve[-1]["converged"] and self.curve[-1]["epoch"] == self.epochs_done:
                log(f"{self.name}: converged (the last doubling moved FID by {self.curve[-1]['moved']})")
                if self.register_into is not None:
                    self.register(features)
                return True
            if minutes is not None and time.perf_counter() - start > minutes * 60:
                log(f"{self.name}: time budget spent after epoch {self.epochs_done}; run again to go on")
                return False
        if self.register_into is not None and self.epochs_done >= self.config.max_epochs:
            log(f"{self.name}: reached --max-epochs {self.config.max_epochs} before its curve converged; registered "
                "at that length, as the reference ships its last epoch (the manifest's curve says it is unconverged)")
            self.register(features)
        return bool(self.curve and self.curve[-1]["converged"])


    def register(self, features: nn.Module) -> dict:
        """Ship the model as the zoo's model of this name (into ``register_into``), its manifest entry carrying the
        quality figures (the gate's and the last sample FID), the device, the seconds and the curve."""
        from ..zoo.checkpoints import get_spec, load_needs, register  # the registry imports this module's model

        spec = get_spec(self.name)
        shipped = self.shipped_model().to("cpu").eval()
        needed = {**load_needs(spec), "features": features.cpu()}  # what the zoo's quality figure is measured with
        quality = {spec.metric: round(spec.measure(shipped, spec.config, needed), 6)}
        if self.curve:  # the curve's figure too, where the gate measures another (the denoiser's is sample accuracy)
            quality.setdefault("sample_fid", self.curve[-1]["fid"])
        curve = f"results/{CURVE_DIR}/{self.name}_curve.csv"
        return register(spec, shipped, self.register_into, self.command(), self.config.seed,
                        self.epochs_done, self.steps, self.seconds, quality, self.device,
                        extra={"device": str(self.device), "curve": curve, "curve_points": self.curve})

    def command(self) -> str:
        """The command that trains this run again: its precision where that is not float32, and its length where it
        stopped there before converging."""
        unconverged = self.curve and not self.curve[-1]["converged"]
        length = f" --max-epochs {self.epochs_done}" if unconverged else ""
        return f"cfkit backbone {self.name}" + precision_flag(getattr(self.config, "precision", "float32")) + length

    def shipped_model(self) -> nn.Module:
        """The model whose weights the zoo ships: the trained one (a subclass with averaged weights ships those)."""
        return self.model

    def figure(self) -> Path:
        """The curve and the last point's samples, as ``results/backbones/<name>_curve.png``."""
        from ..scoring.plots import save_figure, training_curve  # matplotlib only where a figure is drawn

        samples = self.figure_samples() if self.curve else None
        return save_figure(training_curve(self.curve, self.name, samples), self.results_dir / f"{self.name}_curve.png")

    def figure_samples(self) -> torch.Tensor:
        """32 seeded samples of the model as it stands, for the figure."""
        return self.model.sample(32, seed=self.config.seed)

    def _write_curve(self) -> Path:
        buffer = io.StringIO()
        extra = [key for point in self.curve for key in point if key not in CURVE_COLUMNS]
        writer = csv.DictWriter(buffer, [*CURVE_COLUMNS, *dict.fromkeys(extra)], lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.curve)
        return atomic_write_text(self.results_dir / f"{self.name}_curve.csv", buffer.getvalue())


def fid_with_interval(reference: FrechetReference, fake: torch.Tensor, resamples: int) -> dict:
    """FID of ``fake`` features against ``reference``, with a 95 % bootstrap interval over the fake rows."""
    replicates = reference.distances(fake, counts(resample_indices(len(fake), resamples, 0)))
    point = reference.distance(fake)
    low, high = interval(point, replicates, bounds=(0.0, None))
    return {"fid": round(point, 4), "fid_lo": round(low, 4), "fid_hi": round(high, 4)}


class GANCurveRun(CurveRun):
    """The reference DCGAN's resumable training, scored on its curve."""

    name = "dcgan_reference"

    def _build(self) -> None:
        self.model = ReferenceDCGAN().to(self.device)
        betas = (self.config.beta1, 0.999)
        self.opt_g = torch.optim.Adam(self.model.generator.parameters(), lr=self.config.lr, betas=betas)
        self.opt_d = torch.optim.Adam(self.model.discriminator.parameters(), lr=self.config.lr, betas=betas)

    def _parts(self) -> dict[str, Any]:
        return {"model": self.model, "opt_g": self.opt_g, "opt_d": self.opt_d}

    def _prepare(self, features: nn.Module) -> tuple[torch.Tensor, FrechetReference]:
        return load_mnist("train")[0], FrechetReference(embed(FeatureExtractor(features), load_mnist("test")[0]))

    def train_epoch(self, images: torch.Tensor) -> None:
        """One epoch of the reference's alternating D and G steps, drawn from (seed, epoch)."""
        shuffle, noise = self._generators()
        g, d = self.model.generator, self.model.discriminator
        self.model.train()
        order = torch.randperm(len(images), generator=shuffle).split(self.config.batch_size)
        autocast = training_autocast(self.config.precision, self.device)
        for batch in order[: self.config.steps_per_epoch]:
            real = images[batch].to(self.device)
            with autocast:
                fake = g(torch.randn(len(real), g.latent_dim, generator=noise).to(self.device))
                real_logits, fake_logits = d(real), d(fake.detach())
            loss_d = critic_loss(real_logits.float(), fake_logits.float())
            self.opt_d.zero_grad(set_to_none=True)
            loss_d.backward()
            self.opt_d.step()
            with autocast:
                fake_logits = d(fake)
            loss_g = looks_real(fake_logits.float())
            self.opt_g.zero_grad(set_to_none=True)
            loss_g.backward()
            self.opt_g.step()
            self.steps += 1
        self.model.eval()
        self.epochs_done += 1

    def score(self, features: nn.Module, reference: FrechetReference) -> dict:
        """FID of the seeded samples against the test set, with its bootstrap interval over the samples."""
        fake = embed(FeatureExtractor(features), self.model.sample(self.config.samples, seed=self.config.seed))
        return fid_with_interval(reference, fake, self.config.resamples)

@dataclass(frozen=True)
class DenoiserCurveConfig:
    """LDCE's denoiser (``ldm_unet``: ε-prediction on the shipped VAE's latents, 10 % null labels, EMA 0.999,
    Adam 1e-3, batch 128) at a constant learning rate, so that every doubling continues the same run (the shipped
    model used a cosine schedule over 8 epochs), and the curve's measurement."""

    seed: int = 61
    lr: float = 1e-3
    batch_size: int = 128
    max_epochs: int = 64
    samples: int = 500  # DDIM-50, guidance-3 samples a class scored at every curve point
    resamples: int = 200
    label_dropout: float = 0.1
    ema_decay: float = 0.999
    steps_per_epoch: int | None = None

    def __post_init__(self) -> None:
        check_counts(self)


class DenoiserCurveRun(CurveRun):
    """``ldm_unet``'s resumable training, scored per class: FID of its samples against the class's test digits
    (the mean over classes, with a bootstrap interval), the classifier's accuracy on them, and whatever ``extra``
    measures with the snapshot (LDCE on the faithfulness subset, from the command line)."""

    name = "ldm_unet"

    def __init__(self, directory: str | Path | None = None, config: DenoiserCurveConfig = DenoiserCurveConfig(),
                 device: str | None = "cpu", results_dir: str | Path | None = None,
                 extra: Callable[[nn.Module], dict] | None = None, register_into: str | Path | None = None) -> None:
        self.extra = extra
        super().__init__(directory, config, device, results_dir, register_into)

    def _build(self) -> None:
        from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

        from ..zoo.diffusion import LatentUNet

        self.model = LatentUNet().to(self.device)
        self.ema = AveragedModel(self.model, multi_avg_fn=get_ema_multi_avg_fn(self.config.ema_decay))
        self.opt = torch.optim.Adam(self.model.parameters(), lr=self.config.lr)

    def _parts(self) -> dict[str, Any]:
        return {"model": self.model, "ema": self.ema, "opt": self.opt}

    def snapshot(self) -> dict[str, torch.Tensor]:
        """The EMA weights, which sample better (what the shipped ``ldm_unet`` holds)."""
        return self.ema.module.state_dict()

    def shipped_model(self) -> nn.Module:
        """The EMA denoiser, as every curve point scored it."""
        return self.ema.module

    def _prepare(self, features: nn.Module) -> tuple[tuple, dict]:
        from ..zoo.checkpoints import load  # the registry imports this module: imported here

        vae, classifier = load("ldm_vae", device=self.device), load("classifier", device=self.device)
        x, y = load_mnist("train")
        extractor = FeatureExtractor(features)
        test_x, test_y = load_mnist("test")
        references = {d: FrechetReference(embed(extractor, test_x[test_y == d])) for d in range(10)}
        return (x, y, vae), {"vae": vae, "classifier": classifier, "extractor": extractor, "references": references}

    def train_epoch(self, data: tuple) -> None:
        """One epoch of ε-prediction on the VAE's latents, the EMA updated after every step."""
        from ..zoo.diffusion import NULL_CLASS, TRAIN_TIMESTEPS, noise_schedule

        x, y, vae = data
        shuffle, noise = self._generators()
        schedule = noise_schedule()
        self.model.train()
        for batch in torch.randperm(len(x), generator=shuffle).split(self.config.batch_size)[: self.config.steps_per_epoch]:
            images, labels = x[batch].to(self.device), y[batch].to(self.device)
            with torch.no_grad():
                z = vae.encode(images)
            dropped = torch.rand(len(labels), generator=noise).to(self.device) < self.config.label_dropout
            labels = torch.where(dropped, torch.full_like(labels, NULL_CLASS), labels)
            t = torch.randint(0, TRAIN_TIMESTEPS, (len(labels),), generator=noise).to(self.device)
            eps = torch.randn(z.shape, generator=noise).to(self.device)
            loss = F.mse_loss(self.model(schedule.add_noise(z, eps, t), t, labels), eps)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            self.ema.update_parameters(self.model)
            self.steps += 1
        self.model.eval()
        self.epochs_done += 1

    def figure_samples(self) -> torch.Tensor:
        """32 seeded samples of the EMA denoiser, decoded by the shipped VAE: digits 0-9 in turn."""
        from ..zoo.checkpoints import load
        from ..zoo.diffusion import sample_latents

        labels = torch.arange(32) % 10
        with torch.inference_mode():
            latents = sample_latents(self.ema.module.eval(), labels.to(self.device),
                                     generator=torch.Generator().manual_seed(self.config.seed))
            return load("ldm_vae", device=self.device).decode(latents).cpu()

    def score(self, features: nn.Module, context: dict) -> dict:
        """Per-class sample FID (mean over classes, with its interval), sample accuracy, and ``extra``."""
        from ..zoo.diffusion import sample_latents

        unet = self.ema.module.eval()
        labels = torch.arange(10).repeat_interleave(self.config.samples)
        with torch.inference_mode():
            latents = sample_latents(unet, labels.to(self.device), generator=torch.Generator().manual_seed(self.config.seed))
            images = context["vae"].decode(latents).cpu()
            accuracy = (context["classifier"](images.to(self.device)).argmax(1).cpu() == labels).float().mean().item()
        per_class, replicates = [], []
        weights = counts(resample_indices(self.config.samples, self.config.resamples, 0))
        for digit in range(10):
            fake = embed(context["extractor"], images[labels == digit])
            per_class.append(context["references"][digit].distance(fake))
            replicates.append(context["references"][digit].distances(fake, weights))
        point = sum(per_class) / 10
        low, high = interval(point, torch.stack(replicates).mean(0), bounds=(0.0, None))
        scored = {"fid": round(point, 4), "fid_lo": round(low, 4), "fid_hi": round(high, 4),
                  "sample_accuracy": round(accuracy, 4)}
        return {**scored, **(self.extra(unet) if self.extra is not None else {})}

    def rescore_extra(self, log: Callable[[str], None] = print) -> None:
        """Measure ``extra`` again on every curve point's saved snapshot (``epoch_<n>.pt``), replacing what an
        earlier measure wrote there, and rewrite the curve: for when the measure itself changed."""
        if self.extra is None:
            raise InputError("rescore_extra needs the extra measure: give DenoiserCurveRun(extra=...).")
        for point in self.curve:
            unet = load_denoiser_snapshot(self.directory / f"epoch_{point['epoch']}.pt", self.device)
            for key in set(point) - set(CURVE_COLUMNS) - OWN_SCORES:
                del point[key]
            point.update(self.extra(unet.eval()))
            log(f"{self.name}: epoch {point['epoch']} rescored: "
                + ", ".join(f"{k} {v}" for k, v in point.items() if k not in CURVE_COLUMNS and k not in OWN_SCORES))
        self._save()
        self._write_curve()


def load_denoiser_snapshot(path: Path, device: str | torch.device = "cpu") -> nn.Module:
    """A curve point's denoiser (``epoch_<n>.pt``: its EMA weights) in eval mode; an unreadable file is refused."""
    from ..zoo.diffusion import LatentUNet

    unet = LatentUNet().to(device)
    try:
        unet.load_state_dict(torch.load(path, map_location=device, weights_only=True))
    except Exception as exc:
        raise CheckpointError(f"{path} is not a readable denoiser snapshot ({' '.join(str(exc).split())[:160]}); "
                              "delete it and score that curve point again with `cfkit backbone ldm_unet`.") from exc
    return unet.eval()
