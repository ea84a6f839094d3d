"""What every counterfactual method shares: the Result type, input validation, batching, timing.

A method subclasses :class:`CounterfactualMethod` and implements only ``_explain_batch``; the base
checks the images and class ids, splits the queries into batches, times the whole call, and
marks which counterfactuals the classifier assigns to the target.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from ..common.batching import INFERENCE_BATCH
from ..common.devices import resolve_device
from ..common.profiling import phase
from ..common.threads import follow_share
from ..common.validate import check_class_ids, check_images, check_targets
from ..errors import InputError
from ..zoo.checkpoints import load_pair
from ..zoo.classifiers import check_classifier, check_input_gradients, fingerprint, in_eval_mode


@dataclass
class Result:
    """Counterfactuals for a batch of queries; every tensor is indexed like the queries."""

    x: torch.Tensor  # (N, 1, 28, 28) queries in [0, 1]
    x_cf: torch.Tensor  # (N, 1, 28, 28) counterfactuals in [0, 1]
    source: torch.Tensor  # (N,) query classes
    target: torch.Tensor  # (N,) requested classes
    valid: torch.Tensor  # (N,) bool: the classifier says target
    seconds: float  # wall time of the whole call
    extras: dict[str, Any] = field(default_factory=dict)  # method-specific: masks, trajectories, …

    @property
    def validity(self) -> float:
        return self.valid.float().mean().item()


class CounterfactualMethod:
    """Base class: ``explain(x, target, source=None) -> Result``.

    ``source`` defaults to the classifier's prediction on ``x``; a target equal to the source is an
    error. Subclasses set ``name`` and implement ``_explain_batch``; the classifier is checked (10 logits for
    (N, 1, 28, 28) images in [0, 1], and a usable input gradient where ``needs_input_gradients``) when the method is
    built, so a classifier a method cannot explain is refused before any work.
    """

    name = "method"
    config_type: type | None = None  # the method's knob dataclass, when it has one
    needs_input_gradients = False  # True: it follows the classifier's gradient w.r.t. the image (checked when built)

    def __init__(self, classifier: nn.Module, batch_size: int = 256, device: str | torch.device | None = None,
                 progress: bool = False) -> None:
        self.device = resolve_device(device)
        self.classifier = in_eval_mode(classifier.to(self.device))
        check_classifier(self.classifier, f"the classifier given to {type(self).__name__}")
        if self.needs_input_gradients:
            check_input_gradients(self.classifier, f"the classifier given to {type(self).__name__}")
        self.batch_size = batch_size
        self.progress = progress
        self._fingerprint: str | None = None

    @property
    def classifier_fingerprint(self) -> str:
        """SHA-256 of the classifier's weights (computed once): recorded with every set the method saves."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.classifier)
        return self._fingerprint

    def _explain_batch(
        self, x: torch.Tensor, target: torch.Tensor, source: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        raise NotImplementedError

    @torch.inference_mode()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """The classifier's class for each image."""
        return torch.cat([self.classifier(chunk.to(self.device)).argmax(1).cpu() for chunk in x.split(INFERENCE_BATCH)])

    def explain(self, x: torch.Tensor, target: torch.Tensor | int, source: torch.Tensor | None = None) -> Result:
        x = check_images(x, "x")
        # a clone leaves inference mode: a method may then use the classes in autograd (CEM's PN hinge)
        source = self.predict(x).clone() if source is None else check_class_ids(source, "source")
        if source.shape[0] != x.shape[0]:
            raise InputError(f"source has {source.shape[0]} labels for {x.shape[0]} images; give one per image.")
        target = check_targets(target, x.shape[0], source=source)
        with phase("method", self.device):
            return self._explain_all(x, target, source)

    def _explain_all(self, x: torch.Tensor, target: torch.Tensor, source: torch.Tensor) -> Result:
        """Every batch of checked inputs, timed, then the validity of the counterfactuals."""
        start = time.perf_counter()
        pieces, extras = [], []
        batches = range(0, x.shape[0], self.batch_size)
        for i in tqdm(batches, desc=self.name, disable=not self.progress, unit="batch"):
            follow_share()
            sl = slice(i, i + self.batch_size)
            x_cf, extra = self._explain_batch(x[sl].to(self.device), target[sl].to(self.device),
                                              source[sl].to(self.device))
            pieces.append(x_cf.detach().clamp(0, 1).cpu())
            extras.append(extra)
        x_cf = torch.cat(pieces)
        seconds = time.perf_counter() - start
        valid = self.predict(x_cf) == target
        return Result(x=x, x_cf=x_cf, source=source, target=target, valid=valid, seconds=seconds,
                      extras=_merge_extras(extras))


class PerPairMethod(CounterfactualMethod):
    """A method with one trained zoo model per (query, target) pair (C3LT, ExpGAN): ``<family>_<q>_<t>``."""

    family = "pair-family"  # zoo checkpoints are <family>_<q>_<t>; config_type's defaults apply without a config

    def __init__(self, classifier: nn.Module, config: Any = None, pair_dir: str | Path | None = None,
                 models: dict[tuple[int, int], nn.Module] | None = None, **kwargs: Any) -> None:
        super().__init__(classifier, **kwargs)
        self.config = self.config_type() if config is None else config
        self.pair_dir = pair_dir  # folder of the per-pair checkpoints; None: the shipped zoo
        self.models = dict(models or {})  # in-memory models by pair (a training snapshot, say); before pair_dir

    def pair_model(self, pair: tuple[int, int]) -> nn.Module:
        """The pair's trained model (a clear error naming its training command when there is none, or when it was
        trained against another classifier than this method's)."""
        if tuple(pair) in self.models:
            return self.models[tuple(pair)].to(self.device).eval()
        return load_pair(self.family, pair, self.pair_dir, self.device, classifier=self.classifier_fingerprint)


def pair_groups(source: torch.Tensor, target: torch.Tensor) -> list[tuple[tuple[int, int], torch.Tensor]]:
    """The distinct (source, target) pairs of a batch and the row indices of each, for per-pair models."""
    pairs = torch.stack([source, target], 1)
    return [((q, t), (pairs == pairs.new_tensor([q, t])).all(1).nonzero().flatten())
            for q, t in pairs.unique(dim=0).tolist()]


def _merge_extras(extras: list[dict[str, Any]]) -> dict[str, Any]:
    """Concatenate per-batch tensors along the query axis; keep other values from the last batch."""
    merged: dict[str, Any] = {}
    for key in extras[0] if extras else ():
        values = [e[key] for e in extras]
        if all(isinstance(v, torch.Tensor) and v.ndim > 0 for v in values):
            merged[key] = torch.cat([v.detach().cpu() for v in values])
        else:
            merged[key] = values[-1]
    return merged
