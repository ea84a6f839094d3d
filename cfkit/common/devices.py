"""Where tensors live: the device a user names, checked before torch gives its driver error; and a model put in
eval mode whatever file it came from."""
from __future__ import annotations

import itertools

import torch
from torch import nn

from ..errors import InputError

FIX = "leave device unset (the CPU) or run on a machine with a GPU"


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` as a ``torch.device``: None is the best one here (CUDA when available, else the CPU); a CUDA or
    MPS device this machine does not have is an :class:`InputError` that says what to do."""
    if device is None or device == "":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise InputError(f"device {device!r} is not a device torch knows: use 'cpu', 'cuda' or leave it "
                         "unset.") from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"device {str(device)!r} is not available here (torch.cuda.is_available() is False): "
                             f"{FIX}.")
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise InputError(f"device {str(device)!r} is not available here (this machine has "
                             f"{torch.cuda.device_count()} CUDA device(s)): {FIX}.")
    elif resolved.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"device {str(device)!r} is not available here (torch.backends.mps.is_available() is "
                         f"False): {FIX}.")
    return resolved


def model_device(model: nn.Module) -> torch.device:
    """Where ``model``'s weights live (its first parameter or buffer), the CPU for one with neither: scoring feeds
    each batch there and brings the outputs back to the CPU."""
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        return tensor.device
    return torch.device("cpu")


def in_eval_mode(model: nn.Module) -> nn.Module:
    """``model.eval()``; a ``torch.export`` module cannot switch modes (its mode was fixed when it was exported, and
    :func:`cfkit.zoo.classifiers.check_classifier` refuses one exported in training mode), so it is returned as it is."""
    try:
        return model.eval()
    except NotImplementedError:  # torch.export's modules: "Calling eval() is not supported yet."
        return model
