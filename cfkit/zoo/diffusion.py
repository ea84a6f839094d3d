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

from ..common.batching import INFERENCE_BATCH
from ..data import load_mnist
from .training import Needed, TrainConfig, batches

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


def fit_vae(model: LatentVAE, config: TrainConfig, _: Needed, max_steps: int | None = None, progress: bool = True,
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
        latents = torch.cat([model.encode_moments(c)[0] for c in x.split(INFERENCE_BATCH)])
        model.scale.fill_(1.0 / latents.std().item())
    return step


@torch.inference_mode()
def vae_reconstruction_mse(model: LatentVAE, _: TrainConfig, __: Needed) -> float:
    """Mean squared error of the decoded latent mean on the MNIST test set."""
    x = load_mnist("test")[0]
    return torch.cat([(model(c) - c).pow(2).flatten(1).mean(1) for c in x.split(INFERENCE_BATCH)]).mean().item()


# --- part two: the class-conditional denoiser --------------------------------------------------------------

NULL_CLASS = 10
"""Class id of the unconditional branch (classifier-free guidance): labels are replaced by it at training."""

TRAIN_TIMESTEPS = 1000


def noise_schedule():
    """The training schedule: T = 1000, linear β from 1e-4 to 0.02 (diffusers' ``DDPMScheduler``)."""
    from diffusers import DDPMScheduler

    return DDPMScheduler(num_train_timesteps=TRAIN_TIMESTEPS, beta_schedule="linear", beta_start=1e-4, beta_end=0.02)


def ddim_schedule(steps: int):
    """A deterministic DDIM sampler with ``steps`` steps on the training schedule (ε-prediction, no clipping)."""
    from diffusers import DDIMScheduler

    scheduler = DDIMScheduler(num_train_timesteps=TRAIN_TIMESTEPS, beta_schedule="linear", beta_start=1e-4,
                              beta_end=0.02, clip_sample=False, set_alpha_to_one=False)
    scheduler.set_timesteps(steps)
    return scheduler


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of integer timesteps, shape (batch, dim)."""
    half = dim // 2
    frequencies = torch.exp(-torch.arange(half, dtype=torch.float32) * (torch.log(torch.tensor(10_000.0)) / half))
    angles = t.float()[:, None] * frequencies[None]
    return torch.cat([angles.sin(), angles.cos()], dim=1)


class ResBlock(nn.Module):
    """GroupNorm–SiLU–conv twice, with the (time + class) embedding added in between; a residual skip."""

    def __init__(self, channels_in: int, channels_out: int, embedding: int) -> None:
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(8, channels_in), nn.Conv2d(channels_in, channels_out, 3, 1, 1)
        self.embed = nn.Linear(embedding, channels_out)
        self.norm2, self.conv2 = nn.GroupNorm(8, channels_out), nn.Conv2d(channels_out, channels_out, 3, 1, 1)
        self.skip = nn.Conv2d(channels_in, channels_out, 1) if channels_in != channels_out else nn.Identity()

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x))) + self.embed(emb)[:, :, None, None]
        return self.skip(x) + self.conv2(F.silu(self.norm2(h)))


class LatentUNet(nn.Module):
    """ε-prediction on 4×7×7 latents: two levels (7×7 and 4×4) with skips, conditioned on t and the class.

    Class id ``NULL_CLASS`` (10) is the unconditional branch used by classifier-free guidance.
    """

    def __init__(self, width: int = 48, blocks: int = 2) -> None:
        super().__init__()
        channels, wide, emb = LATENT_SHAPE[0], 2 * width, 4 * width
        self.width = width
        self.time = nn.Sequential(nn.Linear(width, emb), nn.SiLU(), nn.Linear(emb, emb))
        self.label = nn.Embedding(NULL_CLASS + 1, emb)
        self.stem = nn.Conv2d(channels, width, 3, 1, 1)
        self.down_fine = nn.ModuleList([ResBlock(width, width, emb) for _ in range(blocks)])
        self.downsample = nn.Conv2d(width, width, 3, 2, 1)  # 7×7 -> 4×4
        self.down_coarse = nn.ModuleList([ResBlock(width if i == 0 else wide, wide, emb) for i in range(blocks)])
        self.middle = ResBlock(wide, wide, emb)
        self.up_coarse = nn.ModuleList([ResBlock(2 * wide if i == 0 else wide, wide, emb) for i in range(blocks)])
        self.upsample = nn.Conv2d(wide, width, 3, 1, 1)
        self.up_fine = nn.ModuleList([ResBlock(2 * width if i == 0 else width, width, emb) for i in range(blocks)])
        self.out = nn.Sequential(nn.GroupNorm(8, width), nn.SiLU(), nn.Conv2d(width, channels, 3, 1, 1))
        nn.init.zeros_(self.out[-1].weight)
        nn.init.zeros_(self.out[-1].bias)

    def forward(self, z: torch.Tensor, t: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        emb = self.time(timestep_embedding(t, self.width)) + self.label(labels)
        h = self.stem(z)
        for block in self.down_fine:
            h = block(h, emb)
        fine = h
        h = self.downsample(h)
        for block in self.down_coarse:
            h = block(h, emb)
        coarse = h
        h = self.middle(h, emb)
        h = torch.cat([h, coarse], dim=1)
        for block in self.up_coarse:
            h = block(h, emb)
        h = self.upsample(F.interpolate(h, size=fine.shape[-2:], mode="nearest"))
        h = torch.cat([h, fine], dim=1)
        for block in self.up_fine:
            h = block(h, emb)
        return self.out(h)


def fit_denoiser(model: LatentUNet, config: TrainConfig, needed: Needed, max_steps: int | None = None,
                 progress: bool = True, desc: str = "", label_dropout: float = 0.1, ema_decay: float = 0.999) -> int:
    """ε-prediction MSE on the latents of ``needed["ldm_vae"]``, labels dropped to the null class with probability
    ``label_dropout``; the model ends holding the EMA (``ema_decay``) of its weights, which sample better."""
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    from .training import fit_loop

    vae, schedule = needed["ldm_vae"], noise_schedule()
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(ema_decay))

    def loss(unet: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            z = vae.encode(x)
        labels = torch.where(torch.rand(len(y)) < label_dropout, torch.full_like(y, NULL_CLASS), y)
        t = torch.randint(0, TRAIN_TIMESTEPS, (len(y),))
        noise = torch.randn_like(z)
        return F.mse_loss(unet(schedule.add_noise(z, noise, t), t, labels), noise)

    steps = fit_loop(model, loss, config, max_steps, progress, desc, after_step=lambda: ema.update_parameters(model))
    with torch.no_grad():
        for parameter, averaged in zip(model.parameters(), ema.module.parameters()):
            parameter.copy_(averaged)
    return steps


def guided_noise(unet: nn.Module, z: torch.Tensor, t: torch.Tensor | int, labels: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(ε_cond, ε_uncond) from one batched call: the batch twice, once with ``labels``, once with the null class."""
    t = torch.as_tensor(t, device=z.device)  # a scheduler's timesteps live on the CPU
    t = t.expand(len(z)) if t.dim() == 0 else t
    both = unet(torch.cat([z, z]), torch.cat([t, t]), torch.cat([labels, torch.full_like(labels, NULL_CLASS)]))
    return both.chunk(2)


@torch.no_grad()
def sample_latents(unet: nn.Module, labels: torch.Tensor, steps: int = 50, guidance: float = 3.0,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """Class-conditional DDIM samples with classifier-free guidance ε_u + ``guidance``·(ε_c − ε_u)."""
    scheduler = ddim_schedule(steps)
    z = torch.randn((len(labels), *LATENT_SHAPE), generator=generator)
    for t in scheduler.timesteps:
        cond, uncond = guided_noise(unet, z, t, labels)
        z = scheduler.step(uncond + guidance * (cond - uncond), t, z).prev_sample
    return z


SAMPLES_PER_CLASS = 50


@torch.inference_mode()
def denoiser_sample_accuracy(model: LatentUNet, _: TrainConfig, needed: Needed) -> float:
    """Share of DDIM-50, guidance-3 samples (50 per class, seeded), decoded by ``needed["ldm_vae"]``, that
    ``needed["classifier"]`` reads as the class asked for."""
    labels = torch.arange(10).repeat_interleave(SAMPLES_PER_CLASS)
    images = needed["ldm_vae"].decode(sample_latents(model, labels, generator=torch.Generator().manual_seed(0)))
    return (needed["classifier"](images).argmax(1) == labels).float().mean().item()
