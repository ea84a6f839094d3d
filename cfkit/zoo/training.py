"""Seeded training loops for the discriminative zoo, with tqdm progress, and their quality figures.

In the spirit of d2l, every zoo model is judged by a figure measured on the test set (accuracy,
reconstruction MSE, …); :mod:`cfkit.zoo.checkpoints` refuses to ship a model that misses it.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from ..common.batching import INFERENCE_BATCH
from ..common.precision import check_precision, training_autocast
from ..data import load_mnist
from .snapshots import StepSnapshots


@dataclass(frozen=True)
class TrainConfig:
    """How one zoo model is trained: Adam with a cosine schedule over ``epochs`` on MNIST train."""

    epochs: int
    seed: int
    lr: float = 1e-3
    batch_size: int = 128
    digits: tuple[int, ...] | None = None
    cosine: bool = True
    halve_every: int = 0  # epochs between learning-rate halvings (C3LT's step schedule); 0: never
    device: str = "cpu"  # where the model and batches live ("cuda" on a GPU); recorded, but never changes the result's meaning
    # the references train in float32; "bfloat16" runs the loss's forward pass under autocast (cfkit.common.precision),
    # about twice as fast on a CPU with avx512_bf16: `cfkit train NAME --precision bfloat16`, recorded in the manifest
    precision: str = "float32"

    def __post_init__(self) -> None:
        check_precision(self.precision)


Needed = Mapping[str, nn.Module]
"""The zoo models a spec declares in ``needs``, loaded and frozen, by name: what its fit and measure use."""


def set_seed(seed: int) -> torch.Generator:
    """Seed torch's global generator and return a dedicated one for shuffling."""
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def batches(config: TrainConfig, max_steps: int | None, progress: bool, desc: str
            ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The seeded stream of shuffled MNIST training batches for ``config.epochs`` (or ``max_steps``)."""
    x, y = load_mnist("train", digits=config.digits)
    generator = set_seed(config.seed)
    total = total_steps(config, max_steps)
    step = 0
    x, y = x.to(config.device), y.to(config.device)
    with tqdm(total=total, desc=desc, disable=not progress, unit="step") as bar:
        while step < total:
            for batch in torch.randperm(len(x), generator=generator).split(config.batch_size):
                batch = batch.to(config.device)
                yield x[batch], y[batch]
                step += 1
                bar.update(1)
                if step >= total:
                    return


def total_steps(config: TrainConfig, max_steps: int | None) -> int:
    """How many batches ``config.epochs`` make, capped by ``max_steps``."""
    steps = config.epochs * -(-len(load_mnist("train", digits=config.digits)[0]) // config.batch_size)
    return steps if max_steps is None else min(max_steps, steps)


def pair_batches(config: TrainConfig, max_steps: int | None, progress: bool, desc: str
                 ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Seeded batches of a pair's two classes side by side: ``config.digits = (query, target)``.

    An epoch is one pass over the query class; the target class is reshuffled whenever it runs out.
    """
    query, target = config.digits
    xq, xt = (load_mnist("train", digits=(d,))[0].to(config.device) for d in (query, target))
    generator = set_seed(config.seed)
    total = pair_steps(config, max_steps)

    def stream(x: torch.Tensor) -> Iterator[torch.Tensor]:
        while True:
            for batch in torch.randperm(len(x), generator=generator).split(config.batch_size):
                if len(batch) == config.batch_size:
                    yield x[batch.to(config.device)]

    query_stream, target_stream = stream(xq), stream(xt)
    for _ in tqdm(range(total), desc=desc, disable=not progress, unit="step"):
        yield next(query_stream), next(target_stream)


def pair_steps(config: TrainConfig, max_steps: int | None) -> int:
    """Full batches of the query class in ``config.epochs``, capped by ``max_steps``."""
    steps = config.epochs * (len(load_mnist("train", digits=config.digits[:1])[0]) // config.batch_size)
    return steps if max_steps is None else min(max_steps, steps)


def lr_schedule(optimiser: torch.optim.Optimizer, config: TrainConfig, total: int, per_epoch: int
                ) -> torch.optim.lr_scheduler.LRScheduler | None:
    """Per-step scheduler: cosine over ``total`` steps, or halving every ``config.halve_every`` epochs, or none."""
    if config.cosine:
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=total)
    if config.halve_every:
        return torch.optim.lr_scheduler.StepLR(optimiser, step_size=config.halve_every * max(1, per_epoch), gamma=0.5)
    return None


def pair_schedule(optimiser: torch.optim.Optimizer, config: TrainConfig, max_steps: int | None
                  ) -> torch.optim.lr_scheduler.LRScheduler | None:
    """:func:`lr_schedule` for the paired stream of :func:`pair_batches`."""
    return lr_schedule(optimiser, config, pair_steps(config, max_steps), pair_steps(config, None) // config.epochs)


def fit_loop(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor],
    config: TrainConfig,
    max_steps: int | None,
    progress: bool,
    desc: str,
    paired: bool = False,
    after_step: Callable[[], None] | None = None,
    snapshots: StepSnapshots | None = None,
) -> int:
    """Adam on ``loss_fn(model, a, b)`` over the seeded batches, scheduled by :func:`lr_schedule`; return steps.

    ``(a, b)`` are (images, labels), or with ``paired`` a batch of each class of ``config.digits``;
    ``after_step`` runs after every optimiser step (an EMA update, say). ``snapshots``: go on from its saved
    state, save it as the fit goes, pause at its budget (:mod:`cfkit.zoo.snapshots`).
    """
    model.to(config.device)
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr)
    if paired:
        total = pair_steps(config, max_steps)
        stream, schedule = pair_batches(config, max_steps, progress, desc), pair_schedule(optimiser, config, max_steps)
    else:
        total = total_steps(config, max_steps)
        stream = batches(config, max_steps, progress, desc)
        schedule = lr_schedule(optimiser, config, total, total_steps(config, None) // config.epochs)
    step = snapshots.restore(model, optimiser, schedule) if snapshots is not None else 0
    if step:  # the seeded stream replayed to the snapshot's step (its batches were trained on before)
        stream = iter(stream)
        deque(islice(stream, step), maxlen=0)
        snapshots.restore_random_state()
    model.train()
    autocast = training_autocast(config.precision, config.device)
    for a, b in stream:
        with autocast:
            loss = loss_fn(model, a, b).float()
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        if schedule is not None:
            schedule.step()
        if after_step is not None:
            after_step()
        step += 1
        if snapshots is not None:
            snapshots.after_step(step, total, model, optimiser, schedule)
    model.eval()
    return step


def _classification_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


def reconstruction_loss(model: nn.Module, x: torch.Tensor, _: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(model(x), x)


@torch.inference_mode()
def accuracy_on_test(model: nn.Module, digits: tuple[int, ...] | None = None) -> float:
    """Share of MNIST test images the model classifies correctly."""
    model.eval()
    x, y = load_mnist("test", digits=digits)
    predictions = torch.cat([model(chunk).argmax(1) for chunk in x.split(INFERENCE_BATCH)])
    return (predictions == y).float().mean().item()


@torch.inference_mode()
def reconstruction_mse_on_test(model: nn.Module, digits: tuple[int, ...] | None = None) -> float:
    """Mean squared reconstruction error on the MNIST test images of ``digits``."""
    model.eval()
    x, _ = load_mnist("test", digits=digits)
    errors = torch.cat([((model(chunk) - chunk) ** 2).flatten(1).mean(1) for chunk in x.split(INFERENCE_BATCH)])
    return errors.mean().item()


def fit_classifier(model: nn.Module, config: TrainConfig, _: Needed, max_steps: int | None = None,
                   progress: bool = True, desc: str = "") -> int:
    """Train with cross-entropy; return the number of steps taken."""
    return fit_loop(model, _classification_loss, config, max_steps, progress, desc)


def fit_autoencoder(model: nn.Module, config: TrainConfig, _: Needed, max_steps: int | None = None,
                    progress: bool = True, desc: str = "") -> int:
    """Train with pixel MSE on the digits of ``config``; return the number of steps taken."""
    return fit_loop(model, reconstruction_loss, config, max_steps, progress, desc)
