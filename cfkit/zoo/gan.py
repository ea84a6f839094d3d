"""The generator zoo for C3LT and ExpGAN: a DCGAN for 28×28 MNIST and an encoder that inverts it.

``DCGAN`` holds the generator G: z ∈ R^100 ~ N(0, I) → [0, 1] images and the discriminator D
(logits), trained together with the non-saturating GAN loss. ``Encoder`` E maps images back to
latents, trained against the frozen G so that G(E(x)) reconstructs x and E(G(z)) recovers z.
Their quality figures: FID of 10,000 samples against the MNIST test set in the kit's feature
space, and the reconstruction MSE of G(E(x)) on the test set.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..common.batching import INFERENCE_BATCH
from ..data import load_mnist
from .losses import critic_loss, looks_real
from .snapshots import StepSnapshots
from .training import Needed, TrainConfig, batches, fit_loop

LATENT_DIM = 100


class Generator(nn.Module):
    def __init__(self, latent_dim: int = LATENT_DIM) -> None:
        super().__init__()
        self.latent_dim = latent_dim
        self.net = nn.Sequential(
            nn.Linear(latent_dim, 64 * 7 * 7), nn.BatchNorm1d(64 * 7 * 7), nn.ReLU(), nn.Unflatten(1, (64, 7, 7)),
            nn.ConvTranspose2d(64, 32, 4, 2, 1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.ConvTranspose2d(32, 1, 4, 2, 1), nn.Sigmoid(),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class Discriminator(nn.Module):
    """Real/fake logits of 28×28 images; ``outputs`` > 1 gives one logit per head (ExplainGAN's critic)."""

    def __init__(self, outputs: int = 1) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 32, 4, 2, 1), nn.LeakyReLU(0.2),
            nn.Conv2d(32, 64, 4, 2, 1), nn.BatchNorm2d(64), nn.LeakyReLU(0.2),
            nn.Flatten(), nn.Linear(64 * 7 * 7, outputs),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(1)


class GAN(nn.Module):
    """A generator and its discriminator in one checkpoint (C3LT keeps D frozen as its adversarial critic)."""

    def __init__(self, generator: nn.Module, discriminator: nn.Module) -> None:
        super().__init__()
        self.generator = generator
        self.discriminator = discriminator

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator(z)

    def sample(self, n: int, seed: int = 0) -> torch.Tensor:
        """``n`` images from seeded N(0, I) latents (drawn on the CPU, so the same on any device)."""
        z = torch.randn(n, self.generator.latent_dim, generator=torch.Generator().manual_seed(seed))
        device = next(self.parameters()).device
        with torch.inference_mode():
            return torch.cat([self.generator(chunk.to(device)).cpu() for chunk in z.split(INFERENCE_BATCH)])


class DCGAN(GAN):
    """The kit's generator zoo: a small DCGAN for 28×28 MNIST."""

    def __init__(self) -> None:
        super().__init__(Generator(), Discriminator())


class Encoder(nn.Module):
    """E: image → latent, the inverse of the frozen generator."""

    def __init__(self, latent_dim: int = LATENT_DIM) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 32, 4, 2, 1), nn.LeakyReLU(0.2),
            nn.Conv2d(32, 64, 4, 2, 1), nn.BatchNorm2d(64), nn.LeakyReLU(0.2),
            nn.Flatten(), nn.Linear(64 * 7 * 7, latent_dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def fit_dcgan(model: DCGAN, config: TrainConfig, _: Needed, max_steps: int | None = None, progress: bool = True,
              desc: str = "") -> int:
    """Alternate D and G steps (Adam 2e-4, β = (0.5, 0.999), non-saturating loss); return steps taken."""
    g, d = model.generator, model.discriminator
    opt_g = torch.optim.Adam(g.parameters(), lr=config.lr, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(d.parameters(), lr=config.lr, betas=(0.5, 0.999))
    model.train()
    step = 0
    for real, _ in batches(config, max_steps, progress, desc):
        z = torch.randn(len(real), g.latent_dim)
        fake = g(z)
        loss_d = critic_loss(d(real), d(fake.detach()))
        opt_d.zero_grad(set_to_none=True)
        loss_d.backward()
        opt_d.step()
        loss_g = looks_real(d(fake))
        opt_g.zero_grad(set_to_none=True)
        loss_g.backward()
        opt_g.step()
        step += 1
    model.eval()
    return step


def fit_encoder(model: Encoder, config: TrainConfig, needed: Needed, max_steps: int | None = None,
                progress: bool = True, desc: str = "", snapshots: StepSnapshots | None = None) -> int:
    """Train E against the frozen ``needed["dcgan"]``'s G: ‖G(E(x)) − x‖² + 0.1·‖E(G(z)) − z‖²; return steps taken."""
    generator = needed["dcgan"].generator.eval()

    def loss(encoder: nn.Module, real: torch.Tensor, _: torch.Tensor) -> torch.Tensor:
        z = torch.randn(len(real), generator.latent_dim, device=real.device)
        with torch.no_grad():
            fake = generator(z)
        return F.mse_loss(generator(encoder(real)), real) + 0.1 * F.mse_loss(encoder(fake), z)

    return fit_loop(model, loss, config, max_steps, progress, desc, snapshots=snapshots)


def sample_fid(model: DCGAN, _: TrainConfig, needed: Needed, n: int = 10_000) -> float:
    """FID of ``n`` seeded samples against the MNIST test set, in the space of ``needed["features"]``."""
    from .feature_space import FeatureExtractor, fid

    return fid(FeatureExtractor(needed["features"]), model.sample(n), load_mnist("test")[0])


@torch.inference_mode()
def encoder_reconstruction_mse(model: Encoder, _: TrainConfig, needed: Needed) -> float:
    """Mean squared error of G(E(x)) against x over the MNIST test set, G from ``needed["dcgan"]``."""
    generator = needed["dcgan"].generator
    x = load_mnist("test")[0]
    return torch.cat([(generator(model(c)) - c).pow(2).flatten(1).mean(1) for c in x.split(INFERENCE_BATCH)]).mean().item()
