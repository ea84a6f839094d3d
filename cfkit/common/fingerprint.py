"""Which weights a model has, as one SHA-256: what a saved set or a per-pair checkpoint records of the classifier."""
from __future__ import annotations

import hashlib

import torch
from torch import nn


def fingerprint(model: nn.Module) -> str:
    """SHA-256 of the model's weights and buffers (names, shapes, dtypes, values), whatever file they came from."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        values = tensor.float() if tensor.dtype == torch.bfloat16 else tensor  # numpy has no bfloat16
        digest.update(values.numpy().tobytes())
    return digest.hexdigest()
