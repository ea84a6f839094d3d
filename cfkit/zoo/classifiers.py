"""The classifier under explanation: the zoo's, a ``torch.export`` archive (``.pt2``), a TorchScript file, or
``package.module:factory`` plus weights.

``load_classifier(spec, weights)`` resolves the spec, checks that the model maps (N, 1, 28, 28) images in
[0, 1] to (N, 10) logits that are finite on real test digits, get at least half of 20 of them right, and do not
depend on the other images of the batch or change from call to call (a clear error otherwise, before any method
runs: an untrained model, one that ignores its input or wants other inputs, one left in training mode) and returns
it in eval mode.
:func:`fingerprint` is the SHA-256 of its weights: every saved counterfactual set records it, so sets of
different classifiers are never scored together. The metric models (autoencoders, feature network,
oracle) stay the kit's whatever the classifier: they judge realism, not the model.
"""
from __future__ import annotations

import importlib
import io
import json
import warnings
import zipfile
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

from ..common.devices import in_eval_mode, resolve_device
from ..common.fingerprint import fingerprint
from ..data import load_mnist
from ..errors import CheckpointError, InputError
from .checkpoints import load, names

__all__ = ["DEFAULT", "check_classifier", "check_input_gradients", "fingerprint", "in_eval_mode", "load_classifier"]

DEFAULT = "classifier"
"""The zoo's MNIST CNN: what every notebook explains unless told otherwise."""
CLASSES = 10
DIGITS_PER_CLASS = 2
MIN_DIGIT_ACCURACY = 0.5
"""The check's bar on its 20 real test digits: any trained MNIST classifier clears it; chance is 10 %."""
BATCH_PROBE = 4
"""The check also runs the first few of its digits alone: their logits must not depend on the rest of the batch."""
BATCH_TOLERANCE = 1e-3
"""How far (relative to the largest logit, at least 1) an image's logits may move with its batch: float rounding
of batched kernels moves them by about 1e-6; dropout or batch norm in training mode by far more."""
EXPORT_SUFFIX = ".pt2"
"""A file with this suffix is a ``torch.export`` archive (``torch.export.save``); any other file is TorchScript."""
EXPORT_RECIPE = ("torch.export.save(torch.export.export(model.eval(), (torch.rand(2, 1, 28, 28),), "
                 "dynamic_shapes=({0: torch.export.Dim('batch')},)), 'my_classifier.pt2')")
"""How to export a classifier the kit loads: in eval mode, with a batch dimension of any size."""
FORMS = ("a zoo name such as 'classifier', a torch.export archive (.pt2, torch.export.save), a TorchScript file "
         "(torch.jit.save), or 'package.module:factory' with a weights file (a state dict, loaded with "
         "weights_only=True)")


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
    model = in_eval_mode(model.to(device))
    check_classifier(model, str(spec) if not isinstance(spec, nn.Module) else type(spec).__name__)
    return model


def _resolve(spec: str, weights: Path | None, device: str | torch.device) -> nn.Module:
    """A zoo name, a torch.export archive, a TorchScript file, or a factory with its weights."""
    if spec in names():
        _no_weights(spec, weights, "a zoo model carries its own")
        return load(spec, device=device)
    if ":" in spec and not Path(spec).exists():
        return _from_factory(spec, weights, device)
    path = Path(spec)
    if path.is_file():
        _no_weights(spec, weights, f"a {'torch.export archive' if path.suffix == EXPORT_SUFFIX else 'TorchScript file'}"
                    " carries its own")
        if path.suffix == EXPORT_SUFFIX:
            return _from_export(path, device)
        try:
            with warnings.catch_warnings():  # torch 2.14 marks TorchScript deprecated; its files still load
                warnings.filterwarnings("ignore", category=FutureWarning, message=".*torch.jit.load.*")
                return torch.jit.load(str(path), map_location=device)
        except Exception as exc:  # torch raises RuntimeError or ValueError depending on what is wrong
            raise CheckpointError(f"{path} is not a TorchScript model ({exc}); export yours with {EXPORT_RECIPE} "
                                  "(a .pt2 file), save it with torch.jit.save(torch.jit.script(model), path), or give "
                                  "'package.module:factory' and a weights file.") from exc
    raise InputError(f"no classifier {spec!r}: it is neither a zoo model ({', '.join(names())}), nor a file, nor "
                     f"'package.module:factory'. A classifier is {FORMS}.")


def _from_export(path: Path, device: str | torch.device) -> nn.Module:
    """The module of a ``torch.export`` archive, after checking that loading it unpickles nothing and that it takes
    batches of any size."""
    _check_export_archive(path)
    try:
        program = torch.export.load(str(path))
    except Exception as exc:  # torch raises RuntimeError, KeyError or its own errors depending on what is wrong
        raise CheckpointError(f"{path} is not a readable torch.export archive ({type(exc).__name__}: {exc}); "
                              f"export your classifier with {EXPORT_RECIPE}.") from exc
    inputs = [node for node in program.graph.nodes
              if node.op == "placeholder" and node.name in program.graph_signature.user_inputs]
    if len(inputs) != 1:
        raise CheckpointError(f"{path} takes {len(inputs)} inputs; a classifier takes one batch of images. Export it "
                              f"with {EXPORT_RECIPE}.")
    batch = inputs[0].meta.get("val").shape[0] if "val" in inputs[0].meta else None
    if isinstance(batch, int):
        raise CheckpointError(f"{path} was exported for batches of exactly {batch} images; the methods need any batch "
                              f"size. Export it with a dynamic batch dimension: {EXPORT_RECIPE}.")
    return program.module().to(device)


def _check_export_archive(path: Path) -> None:
    """Refuse an archive whose loading would unpickle objects (which can run code): cfkit loads weights with
    ``weights_only=True``, and a classifier's archive needs nothing but tensors."""
    try:
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                if name.endswith(("weights_config.json", "constants_config.json")):
                    config = json.loads(archive.read(name)).get("config", {})
                    pickled = sorted(key for key, meta in config.items() if meta.get("use_pickle", True))
                    if pickled:
                        raise CheckpointError(f"{path} stores {', '.join(pickled)} as pickled objects, which cfkit "
                                              "does not unpickle (loading them can run code); export a classifier "
                                              f"whose weights and constants are plain tensors: {EXPORT_RECIPE}.")
                elif "/data/sample_inputs/" in name:
                    torch.load(io.BytesIO(archive.read(name)), weights_only=True)
    except CheckpointError:
        raise
    except zipfile.BadZipFile as exc:
        raise CheckpointError(f"{path} is not a torch.export archive ({exc}); export your classifier with "
                              f"{EXPORT_RECIPE}.") from exc
    except Exception as exc:  # an unreadable member, a sample input that needs unpickling
        raise CheckpointError(f"{path}: a member of the archive does not load with weights_only=True ({exc}); export "
                              f"your classifier with {EXPORT_RECIPE}.") from exc


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
    :data:`MIN_DIGIT_ACCURACY` of them right (one that wants other inputs, or ignores them), or whose logits for an
    image change with the rest of its batch or from call to call (dropout or batch norm in training mode)."""
    x, y = probe_digits()
    with torch.inference_mode():
        out = model(x.to(device)).cpu()
        part = model(x[:BATCH_PROBE].to(device)).cpu()
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
    drift = (part - out[:BATCH_PROBE]).abs().max().item()
    if not drift <= BATCH_TOLERANCE * max(1.0, out.abs().max().item()):
        raise InputError(f"{name} gives an image other logits in a batch of {BATCH_PROBE} than in one of {len(x)} "
                         f"(by up to {drift:.3g}): it is in training mode (dropout, batch norm) or random. Call "
                         f"model.eval() before saving or exporting it ({EXPORT_RECIPE}).")


def check_input_gradients(model: nn.Module, name: str = "the classifier") -> None:
    """Refuse a model that gives no finite, non-zero gradient of its logits with respect to its input: the gradient
    methods (the attack, CEM, LDCE's guidance) follow it."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    x = probe_digits()[0][:BATCH_PROBE].to(device).requires_grad_(True)
    try:
        with torch.enable_grad():
            (gradient,) = torch.autograd.grad(model(x).logsumexp(1).sum(), x)
    except RuntimeError as exc:
        raise InputError(f"{name} gives no gradient with respect to its input ({' '.join(str(exc).split())}); the "
                         "gradient methods need a differentiable model: do not detach or run the input under "
                         "torch.no_grad() in forward, and export or save the model itself.") from exc
    if not torch.isfinite(gradient).all() or not gradient.abs().sum() > 0:
        raise InputError(f"{name}'s gradient with respect to its input is {'not finite' if not torch.isfinite(gradient).all() else 'zero'} "
                         "on real test digits; the gradient methods need one that is finite and not zero.")


@lru_cache(maxsize=1)
def probe_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """The first :data:`DIGITS_PER_CLASS` test images of each digit, and their labels: the check's real inputs."""
    x, y = load_mnist("test")
    keep = torch.cat([torch.nonzero(y == digit).flatten()[:DIGITS_PER_CLASS] for digit in range(CLASSES)])
    return x[keep].clone(), y[keep].clone()
