"""Re-measure the shipped zoo: does every checkpoint still reach the figure its manifest records?"""
from __future__ import annotations

import torch

from ..data import load_mnist
from .checkpoints import get_spec, load, names, read_manifest
from .training import accuracy_on_test, reconstruction_mse_on_test


def measure_zoo() -> list[dict]:
    """One row per model: the quality measured now beside the manifest's figure and the threshold."""
    manifest = read_manifest()
    rows = []
    for name in names():
        spec, model = get_spec(name), load(name)
        if spec.kind == "classifier":
            metric, measured = "test_accuracy", accuracy_on_test(model)
        else:
            metric, measured = "test_mse", reconstruction_mse_on_test(model, spec.config.digits)
        entry = manifest[name]
        rows.append({
            "model": name, "metric": metric, "measured": round(measured, 6),
            "manifest": entry["quality"][metric], "threshold": spec.threshold, "epochs": entry["epochs"],
            "seconds": entry["seconds"], "parameters": entry["parameters"], "description": spec.description,
        })
    return rows


@torch.inference_mode()
def agreement_on_test(first: torch.nn.Module, second: torch.nn.Module) -> float:
    """Share of MNIST test images on which two classifiers predict the same class."""
    x, _ = load_mnist("test")
    a = torch.cat([first(c).argmax(1) for c in x.split(1000)])
    b = torch.cat([second(c).argmax(1) for c in x.split(1000)])
    return (a == b).float().mean().item()
