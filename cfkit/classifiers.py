"""The classifier under explanation: the zoo's, a TorchScript file, or ``package.module:factory`` plus weights.

``load_classifier(spec, weights)`` resolves the spec, checks that the model maps (N, 1, 28, 28) images in
[0, 1] to (N, 10) logits that are finite on real test digits and get at least half of 20 of them right (a clear
error otherwise, before any method runs: an untrained model, one that ignores its input or wants other inputs) and
returns it in eval mode.
:func:`fingerprint` is the SHA-256 of its weights: every saved counterfactual set records it, so sets of
different classifiers are never scored together. The metric models (autoencoders, feature network,
oracle) stay the kit's whatever the classifier: they judge realism, not the model.
"""
from __future__ import annotations

import importlib
import warnings
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

from .data import load_mnist
from .devices import resolve_device
from .errors import CheckpointError, InputError
from .fingerprint import fingerprint
from .zoo.checkpoints import load, names

__all__ = ["DEFAULT", "check_classifier", "fingerprint", "load_classifier"]

DEFAULT = "classifier"
"""The zoo's MNIST CNN: what every notebook explains unless told otherwise."""
CLASSES = 10
DIGITS_PER_CLASS = 2
MIN_DIGIT_ACCURACY = 0.5
"""The check's bar on its 20 real test digits: any trained MNIST classifier clears it; chance is 10 %."""
FORMS = ("a zoo name such as 'classifier', a TorchScript file (torch.jit.save), or 'package.module:factory' with "
         "a weights file (a state dict, loaded with weights_only=True)")


def load_classifier(spec: str | Path | nn.Module = DEFAULT, weights: str | Path | None = None,
                    device: str | torch.device = "cpu") -> nn.Module:
    """The classifier ``spec`` names, checked (:func:`check_classifier`) and in eval mode on ``device``."""
    device = resolve_device(device)
    if isinstance(spec, nn.Module):
        model = spec
    elif not isinstance(spec, (str, Path)) or not str(spec).strip():
        raise InputError(f"classifier must be {FORMS}; got {spec!r}.")
    else:
        model = _resolve(str(spec).strip(), None if weights in (None, "") else Path(weights), device)
        for parameter in model.parameters():  # methods want input gradients only: no work on weight gradients
            parameter.requires_grad_(False)
    model = model.to(device).eval()
    check_classifier(model, str(spec) if not isinstance(spec, nn.Module) else type(spec).__name__)
    return model


def _resolve(spec: str, weights: Path | None, device: str | torch.device) -> nn.Module:
    """A zoo name, a TorchScript file, or a factory with its weights."""
    if spec in names():
        _no_weights(spec, weights, "a zoo model carries its own")
        return load(spec, device=device)
    if ":" in spec and not Path(spec).exists():
        return _from_factory(spec, weights, device)
    path = Path(spec)
    if path.is_file():
        _no_weights(spec, weights, "a TorchScript file carries its own")
        try:
            with warnings.catch_warnings():  # torch 2.14 marks TorchScript deprecated; its files still load
                warnings.filterwarnings("ignore", category=FutureWarning, message=".*torch.jit.load.*")
                return torch.jit.load(str(path), map_location=device)
        except Exception as exc:  # torch raises RuntimeError or ValueError depending on what is wrong
            raise CheckpointError(f"{path} is not a TorchScript model ({exc}); save yours with "
                                  "torch.jit.save(torch.jit.script(model), path), or give 'package.module:factory' "
                                  "and a weights file.") from exc
    raise InputError(f"no classifier {spec!r}: it is neither a zoo model ({', '.join(names())}), nor a file, nor "
                     f"'package.module:factory'. A classifier is {FORMS}.")


def _no_weights(spec: str, weights: Path | None, why: str) -> None:
    if weights is not None:
        raise InputError(f"a weights file was given with classifier {spec!r}, but {why} weights; weights go "
                         "with 'package.module:factory' only.")


def _from_factory(spec: str, weights: Path | None, device: str | torch.device) -> nn.Module:
    """``package.module:factory`` called with no arguments, then the state dict in ``weights`` loaded into it."""
    module_name, _, factory_name = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), factory_name)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"cannot find {factory_name!r} in module {module_name!r} ({exc}); the form is "
                         "'package.module:factory' with the module importable from here.") from exc
    model = factory()
    if not isinstance(model, nn.Module):
        raise InputError(f"{spec}() returned {type(model).__name__}, not a torch.nn.Module.")
    if weights is None:
        raise InputError(f"classifier {spec!r} needs its weights: give the state dict file (classifier_state "
                         "in a notebook, --classifier-state on the command line).")
    try:
        state = torch.load(weights, map_location=device, weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"{weights} is not a readable state dict ({exc}); save it with "
                              "torch.save(model.state_dict(), path).") from exc
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"{weights} does not fit {spec}(): {exc}") from exc
    return model


def check_classifier(model: nn.Module, name: str = "the classifier") -> None:
    """Refuse a model that does not map (N, 1, 28, 28) images in [0, 1] to (N, 10) finite logits, or that does not
    tell real digits apart (finite logits and at least half right on 20 real test digits)."""
    probe = torch.rand(3, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    try:
        with torch.inference_mode():
            out = model(probe.to(device))
    except Exception as exc:
        raise InputError(f"{name} fails on a batch of shape (3, 1, 28, 28) in [0, 1]: {type(exc).__name__}: "
                         f"{exc}. cfkit explains MNIST classifiers: images (N, 1, 28, 28) with pixels in [0, 1], "
                         "no normalisation outside the model.") from exc
    if not isinstance(out, torch.Tensor):
        raise InputError(f"{name} returns {type(out).__name__}, not a tensor; it must return (N, {CLASSES}) logits.")
    if tuple(out.shape) != (3, CLASSES):
        raise InputError(f"{name} maps a (3, 1, 28, 28) batch to shape {tuple(out.shape)}; cfkit explains "
                         f"{CLASSES}-class MNIST classifiers, which return (N, {CLASSES}) logits.")
    if not torch.isfinite(out).all():
        raise InputError(f"{name} returns non-finite logits on images in [0, 1].")
    if (out >= 0).all() and torch.allclose(out.sum(1), torch.ones(3), atol=1e-4):
        raise InputError(f"{name} returns probabilities (rows sum to 1); return logits instead (drop the final "
                         "softmax): the methods' losses expect logits.")
    _check_on_digits(model, name, device)


def _check_on_digits(model: nn.Module, name: str, device: torch.device) -> None:
    """Refuse a model whose logits on real test digits are not finite, or that gets fewer than
    :data:`MIN_DIGIT_ACCURACY` of them right: one that wants other inputs, or ignores them."""
    x, y = probe_digits()
    with torch.inference_mode():
        out = model(x.to(device)).cpu()
    layout = (f"cfkit explains MNIST classifiers: images (N, 1, 28, 28) with pixels in [0, 1] (black 0, ink 1), "
              "normalised inside the model's forward if it wants other inputs")
    if not torch.isfinite(out).all():
        bad = int((~torch.isfinite(out)).any(1).sum())
        raise InputError(f"{name} returns non-finite logits on {bad} of {len(x)} real MNIST test digits; {layout}.")
    right = int(out.argmax(1).eq(y).sum())
    if right < MIN_DIGIT_ACCURACY * len(x):
        raise InputError(f"{name} classifies {right} of {len(x)} real MNIST test digits correctly "
                         f"({right / len(x):.0%}; chance is 10%, the bar {MIN_DIGIT_ACCURACY:.0%}): it is untrained, "
                         f"ignores its input, or expects other inputs; {layout}.")


@lru_cache(maxsize=1)
def probe_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """The first :data:`DIGITS_PER_CLASS` test images of each digit, and their labels: the check's real inputs."""
    x, y = load_mnist("test")
    keep = torch.cat([torch.nonzero(y == digit).flatten()[:DIGITS_PER_CLASS] for digit in range(CLASSES)])
    return x[keep].clone(), y[keep].clone()
