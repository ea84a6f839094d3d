"""LDCE's latent diffusion zoo: the latent autoencoder."""
from __future__ import annotations

import torch

from cfkit.data import load_mnist
from cfkit.zoo.checkpoints import load
from cfkit.zoo.diffusion import LATENT_SHAPE


def test_latent_autoencoder_round_trip_keeps_the_digit() -> None:
    vae, classifier = load("ldm_vae"), load("classifier")
    x, y = load_mnist("test")
    x, y = x[:500], y[:500]
    with torch.inference_mode():
        z = vae.encode(x)
        recon = vae.decode(z)
    assert z.shape == (500, *LATENT_SHAPE)
    assert 0.7 < z.std().item() < 1.3, "latents are scaled to about unit variance for the noise schedule"
    assert recon.shape == x.shape and 0 <= recon.min() and recon.max() <= 1
    assert (recon - x).pow(2).mean() < 0.004
    agreement = (classifier(recon).argmax(1) == y).float().mean()
    assert agreement >= 0.97, f"the classifier reads only {agreement:.1%} of the reconstructions as their digit"
