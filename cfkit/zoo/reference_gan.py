"""C3LT's reference backbone: the DCGAN and the per-pair encoder of the C3LT code (khorrams/c3lt), in the kit's units.

The C3LT code trains a DCGAN (the PyTorch examples' one for 28×28: four transposed convolutions from a latent of
100, BatchNorm, ReLU, Tanh; ngf = 64, weights N(0, 0.02), Adam 2e-4 with β1 = 0.5, batch 64, BCE) and one encoder
per pair (four strided convolutions with BatchNorm, images of the pair's two classes). Its images live in [−1, 1];
the kit's stay in [0, 1], so the mapping sits inside ``forward``: the generator returns (tanh + 1) / 2 and the
encoder and discriminator read 2x − 1. The kit's smaller generator (:mod:`cfkit.zoo.gan`) stays the default
backbone until the curve (:mod:`cfkit.studies.curve`) says this one has converged.
"""
from __future__ import annotations

import torch
from torch import nn

from ..common.batching import INFERENCE_BATCH
from ..data import load_mnist
from .gan import GAN, fit_encoder
from .spec import ModelSpec, pair_command, pair_name
from .snapshots import StepSnapshots
from .training import Needed, TrainConfig

LATENT_DIM = 100
"""The C3LT code's latent size (``--latent_dim 100``)."""
WIDTH = 64
"""ngf = ndf = 64, as in the PyTorch DCGAN example the C3LT code copies."""


def reference_init(module: nn.Module) -> None:
    """The DCGAN example's initialisation: convolutions N(0, 0.02), BatchNorm scales N(1, 0.02) and biases 0."""
    if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.normal_(module.weight, 0.0, 0.02)
    elif isinstance(module, nn.BatchNorm2d):
        nn.init.normal_(module.weight, 1.0, 0.02)
        nn.init.zeros_(module.bias)


def _up(inputs: int, outputs: int, stride: int, padding: int) -> list[nn.Module]:
    return [nn.ConvTranspose2d(inputs, outputs, 4, stride, padding, bias=False), nn.BatchNorm2d(outputs), nn.ReLU()]


def _down(inputs: int, outputs: int, norm: bool) -> list[nn.Module]:
    return [nn.Conv2d(inputs, outputs, 4, 2, 1, bias=False), *([nn.BatchNorm2d(outputs)] if norm else []),
            nn.LeakyReLU(0.2)]


class ReferenceGenerator(nn.Module):
    """z (N, 100) -> 4×4 -> 8×8 -> 16×16 -> 32×32 -> a 1×1 transposed convolution with padding 2 crops to 28×28;
    Tanh, then mapped to [0, 1]."""

    def __init__(self, latent_dim: int = LATENT_DIM, width: int = WIDTH) -> None:
        super().__init__()
        self.latent_dim = latent_dim
        self.net = nn.Sequential(
            *_up(latent_dim, width * 8, 1, 0), *_up(width * 8, width * 4, 2, 1), *_up(width * 4, width * 2, 2, 1),
            *_up(width * 2, width, 2, 1), nn.ConvTranspose2d(width, 1, 1, 1, 2, bias=False), nn.Tanh())
        self.apply(reference_init)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return (self.net(z.view(len(z), -1, 1, 1)) + 1) / 2


class ReferenceDiscriminator(nn.Module):
    """28×28 -> 14 -> 7 -> 3 -> 1: real/fake logits (the code's Sigmoid moved into the loss)."""

    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        self.net = nn.Sequential(*_down(1, width, False), *_down(width, width * 2, True),
                                 *_down(width * 2, width * 4, True), nn.Conv2d(width * 4, 1, 4, 2, 1, bias=False))
        self.apply(reference_init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(2 * x - 1).flatten()


class ReferenceDCGAN(GAN):
    """The C3LT code's generator and discriminator, with the interface of the kit's ``DCGAN``."""

    def __init__(self) -> None:
        super().__init__(ReferenceGenerator(), ReferenceDiscriminator())


class PairEncoder(nn.Module):
    """The C3LT code's ``EncoderDCGAN``: 28 -> 14 -> 7 -> 3 -> 1 with BatchNorm, a (N, 100) latent for one pair's
    two classes (the pair is a buffer, so a checkpoint remembers it)."""

    def __init__(self, pair: tuple[int, int] = (4, 9), latent_dim: int = LATENT_DIM, width: int = WIDTH) -> None:
        super().__init__()
        self.latent_dim = latent_dim
        self.register_buffer("pair", torch.tensor(pair))
        self.net = nn.Sequential(*_down(1, width, False), *_down(width, width * 2, True),
                                 *_down(width * 2, width * 4, True), nn.Conv2d(width * 4, latent_dim, 4, 2, 1, bias=False),
                                 nn.BatchNorm2d(latent_dim))
        self.apply(reference_init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(2 * x - 1).flatten(1)


FAMILY = "encoder_reference"
"""The reference backbone's encoders, one a pair: ``encoder_reference_<q>_<t>``."""
ENCODER_EPOCHS = 20
"""The C3LT code ships its encoders (``encoder_mnist_<a>_<b>.pt``) but not how they were trained: the kit trains
each with its own encoder objective on the pair's two classes, 20 epochs (about 2,000 steps of 128)."""


def fit_pair_encoder(model: PairEncoder, config: TrainConfig, needed: Needed, max_steps: int | None = None,
                     progress: bool = True, desc: str = "", snapshots: StepSnapshots | None = None) -> int:
    """E against the frozen reference G on the pair's digits: ‖G(E(x)) − x‖² + 0.1·‖E(G(z)) − z‖² (the kit's
    encoder objective, :func:`cfkit.zoo.gan.fit_encoder`)."""
    return fit_encoder(model, config, {"dcgan": needed["dcgan_reference"]}, max_steps, progress, desc, snapshots)


@torch.inference_mode()
def pair_encoder_mse(model: PairEncoder, _: TrainConfig, needed: Needed) -> float:
    """Mean squared error of G(E(x)) against x over the pair's MNIST test digits."""
    generator = needed["dcgan_reference"].generator
    x = load_mnist("test", digits=tuple(model.pair.tolist()))[0]
    return torch.cat([(generator(model(c)) - c).pow(2).flatten(1).mean(1) for c in x.split(INFERENCE_BATCH)]).mean().item()


def pair_spec(pair: tuple[int, int]) -> ModelSpec:
    """The zoo entry of one pair's reference encoder, trained against the reference DCGAN."""
    return ModelSpec(pair_name(FAMILY, pair), lambda: PairEncoder(pair), fit_pair_encoder, pair_encoder_mse,
                     "test_mse", False, TrainConfig(epochs=ENCODER_EPOCHS, seed=32, digits=pair, cosine=False),
                     0.03, f"the C3LT code's encoder of pair {pair[0]}->{pair[1]}, inverting dcgan_reference",
                     pair_command(FAMILY, pair), needs=("dcgan_reference",))
