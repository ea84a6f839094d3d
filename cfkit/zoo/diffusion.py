"""The latent diffusion zoo for LDCE, part one: the latent autoencoder.

``LatentVAE`` encodes a digit into a 4×7×7 latent and decodes it back; it is trained with the summed
pixel BCE plus a small KL term (1e-4), and its latents are rescaled to unit variance by a stored
``scale`` (as Stable Diffusion does), so a diffusion model can use the usual noise schedule on them.
The class-conditional denoiser on these latents comes next (issue 5).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..data import load_mnist
from .training import TrainConfig, batches

LATENT_SHAPE = (4, 7, 7)


class LatentVAE(nn.Module):
    """28×28 digit ↔ 4×7×7 latent (mean and log-variance out of the encoder, logits out of the decoder)."""

    def __init__(self) -> None:
        super().__init__()
        channels = LATENT_SHAPE[0]
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 32, 3, 1, 1), nn.SiLU(),
            nn.Conv2d(32, 64, 4, 2, 1), nn.SiLU(),  # 14×14
            nn.Conv2d(64, 64, 4, 2, 1), nn.SiLU(),  # 7×7
            nn.Conv2d(64, 2 * channels, 3, 1, 1),
        )
        self.decoder = nn.Sequential(
            nn.Conv2d(channels, 64, 3, 1, 1), nn.SiLU(),
            nn.ConvTranspose2d(64, 64, 4, 2, 1), nn.SiLU(),  # 14×14
            nn.ConvTranspose2d(64, 32, 4, 2, 1), nn.SiLU(),  # 28×28
            nn.Conv2d(32, 1, 3, 1, 1),
        )
        self.register_buffer("scale", torch.tensor(1.0))  # 1 / std of the latents, set after training

    def encode_moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, logvar = self.encoder(x).chunk(2, dim=1)
        return mean, logvar.clamp(-20, 10)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """The scaled latent mean of each image (what the diffusion model works on)."""
        return self.encode_moments(x)[0] * self.scale

    def decode_logits(self, z: torch.Tensor) -> torch.Tensor:
        return self.decoder(z)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Scaled latents back to images in [0, 1]."""
        return torch.sigmoid(self.decode_logits(z / self.scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.decode_logits(self.encode_moments(x)[0]))


def fit_vae(model: LatentVAE, config: TrainConfig, max_steps: int | None = None, progress: bool = True,
            desc: str = "", kl_weight: float = 1e-4) -> int:
    """Summed pixel BCE + ``kl_weight``·KL per image; then set ``scale`` to 1/std of the training latents."""
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr)
    model.train()
    step = 0
    for x, _ in batches(config, max_steps, progress, desc):
        mean, logvar = model.encode_moments(x)
        z = mean + torch.randn_like(mean) * (0.5 * logvar).exp()
        bce = F.binary_cross_entropy_with_logits(model.decode_logits(z), x, reduction="none").flatten(1).sum(1)
        kl = 0.5 * (mean.pow(2) + logvar.exp() - 1 - logvar).flatten(1).sum(1)
        loss = (bce + kl_weight * kl).mean()
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        step += 1
    model.eval()
    with torch.inference_mode():
        x = load_mnist("train")[0][:10_000]
        latents = torch.cat([model.encode_moments(c)[0] for c in x.split(1000)])
        model.scale.fill_(1.0 / latents.std().item())
    return step


@torch.inference_mode()
def vae_reconstruction_mse(model: LatentVAE, _: TrainConfig) -> float:
    """Mean squared error of the decoded latent mean on the MNIST test set."""
    x = load_mnist("test")[0]
    return torch.cat([(model(c) - c).pow(2).flatten(1).mean(1) for c in x.split(1000)]).mean().item()
