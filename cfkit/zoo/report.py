"""Re-measure the shipped zoo: does every checkpoint still reach the figure its manifest records?"""
from __future__ import annotations

import torch

from ..common.batching import INFERENCE_BATCH
from ..data import load_mnist
from .checkpoints import get_spec, load, load_needs, names, pair_name, read_manifest


def measure_zoo(measure: bool = True) -> list[dict]:
    """One row per model: the quality measured now beside the manifest's figure and the threshold.

    ``measure=False`` leaves ``measured`` None and loads nothing (seconds instead of a minute on 2 cores: what a
    notebook opened by a person shows; ``make reproduce`` measures)."""
    manifest = read_manifest()
    rows = []
    for name in names():
        spec = get_spec(name)
        metric = spec.metric
        measured = round(spec.measure(load(name), spec.config, load_needs(spec)), 6) if measure else None
        entry = manifest[name]
        rows.append({
            "model": name, "metric": metric, "measured": measured,
            "manifest": entry["quality"][metric], "threshold": spec.threshold, "epochs": entry["epochs"],
            "seconds": entry["seconds"], "parameters": entry["parameters"], "description": spec.description,
        })
    return rows


@torch.inference_mode()
def agreement_on_test(first: torch.nn.Module, second: torch.nn.Module) -> float:
    """Share of MNIST test images on which two classifiers predict the same class."""
    x, _ = load_mnist("test")
    a = torch.cat([first(c).argmax(1) for c in x.split(INFERENCE_BATCH)])
    b = torch.cat([second(c).argmax(1) for c in x.split(INFERENCE_BATCH)])
    return (a == b).float().mean().item()


@torch.inference_mode()
def generator_report() -> dict[str, float]:
    """How usable the generative zoo is for counterfactuals: do G(E(x)) and the LDCE autoencoder keep the digit,
    do the DCGAN's samples cover all ten?"""
    gan, encoder, classifier = load("dcgan"), load("encoder"), load("classifier")
    x, y = load_mnist("test")
    recon = torch.cat([gan.generator(encoder(chunk)) for chunk in x.split(INFERENCE_BATCH)])
    sampled = torch.cat([classifier(chunk).argmax(1) for chunk in gan.sample(10_000).split(INFERENCE_BATCH)])
    shares = torch.bincount(sampled, minlength=10).float() / len(sampled)
    vae = load("ldm_vae")
    latent_recon = torch.cat([vae(chunk) for chunk in x.split(INFERENCE_BATCH)])

    def accuracy(images: torch.Tensor) -> float:
        return (classifier(images).argmax(1) == y).float().mean().item()

    return {
        "encoder/classifier_accuracy_on_reconstructions": accuracy(recon),
        "ldm_vae/classifier_accuracy_on_reconstructions": accuracy(latent_recon),
        "dcgan/smallest_class_share_of_samples": shares.min().item(),
        "dcgan/largest_class_share_of_samples": shares.max().item(),
    }


def models_table(models: list[str], directory: str | None = None) -> list[dict]:
    """What the manifest records for each model: quality figure, epochs, steps, seconds, seed."""
    manifest = read_manifest(directory)
    rows = []
    for name in models:
        entry = manifest.get(name)
        if entry is None:
            rows.append({"model": name, "note": f"not trained: `{get_spec(name).command}`"})
            continue
        rows.append({"model": name, **entry["quality"], "epochs": entry["epochs"], "steps": entry["steps"],
                     "seconds": entry["seconds"], "seed": entry["seed"]})
    return rows


def pair_models_table(family: str, pairs: list[tuple[int, int]], directory: str | None = None) -> list[dict]:
    """:func:`models_table` of one family's per-pair models."""
    return models_table([pair_name(family, pair) for pair in pairs], directory)


@torch.inference_mode()
def diffusion_samples(unet: torch.nn.Module | None = None, per_class: int = 100, steps: int = 20,
                      guidance: float = 3.0, seed: int = 0) -> tuple[list[dict], torch.Tensor]:
    """Class-conditional samples of the latent diffusion model, judged per class: the classifier's accuracy
    and FID (kit feature space) against that class's test digits. Returns the rows and the images
    (10, per_class, 1, 28, 28). FID at small n is biased upward: compare only at equal ``per_class``.
    ``unet`` defaults to the shipped ``ldm_unet``."""
    from .diffusion import sample_latents
    from .feature_space import FeatureExtractor, fid

    unet, vae = unet or load("ldm_unet"), load("ldm_vae")
    classifier, features = load("classifier"), FeatureExtractor(load("features"))
    labels = torch.arange(10).repeat_interleave(per_class)
    images = vae.decode(sample_latents(unet, labels, steps, guidance, torch.Generator().manual_seed(seed)))
    read = torch.cat([classifier(chunk).argmax(1) for chunk in images.split(INFERENCE_BATCH)])
    rows = []
    for digit in range(10):
        mine = labels == digit
        rows.append({"class": digit, "n": per_class, "accuracy": (read[mine] == digit).float().mean().item(),
                     "fid": fid(features, images[mine], load_mnist("test", digits=(digit,))[0])})
    return rows, images.view(10, per_class, 1, 28, 28)
