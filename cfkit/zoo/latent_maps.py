"""C3LT's learned latent maps (Khorram & Fuxin, CVPR 2022): per pair, g: z → z′ and h: z′ → z.

The DCGAN generator G, its discriminator D, the encoder E and the classifier stay frozen. For a
query x of class q, z = E(x) and the counterfactual is G(g(z)); h maps target-class latents back.
Each map is a residual, norm-preserving step: z ← ‖z‖ · (z + Δ(z)) / ‖z + Δ(z)‖ with Δ two 1×1
layers (an MLP on the 100-d latent), so g(z) stays on the shell where G's prior puts its mass.

Training, per batch of q images x₁ and t images x₂ (weights as in the C3LT code)::

    cls   = NLL(t | G(g(z₁))) + NLL(q | G(h(z₂)))                            (halves averaged)
    prox  = (L1(x, x′) + p₁·smoothness(m) + p₂·entropy(m)) / (1 + p₁ + p₂)   m: normalised (x′ − x)²
    cycle = L1(z₁, h(g(z₁))) + L1(z₂, g(h(z₂))) + perceptual(x, G(cycled z))  (on classifier features)
    adv   = D calls the counterfactuals and the cycle reconstructions real
    loss  = cls + α·prox + β·cycle + γ·adv
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from ..data import load_mnist
from ..errors import InputError
from .gan import LATENT_DIM
from .losses import binary_entropy, check_weights, difference_mask, looks_real, smoothness, target_nll
from .spec import ModelSpec, pair_command, pair_name
from .snapshots import StepSnapshots
from .training import Needed, TrainConfig, fit_loop

FAMILY = "c3lt"
"""The zoo's per-pair latent maps are named ``c3lt_<q>_<t>``; the C3LT method explains with them."""
C3LT_EPOCHS = 200
"""The C3LT code's MNIST training length (about 9,000 steps a pair; the first generation had 5 epochs)."""


class LatentStep(nn.Module):
    """One residual, norm-preserving step in latent space; ``fraction`` < 1 walks part of the way.

    Δ is the C3LT code's two 1×1 layers of the latent's width; ``hidden`` and ``depth`` widen and deepen it (the
    faithfulness study's capacity ablation)."""

    def __init__(self, latent_dim: int = LATENT_DIM, hidden: int | None = None, depth: int = 1) -> None:
        super().__init__()
        hidden = hidden or latent_dim
        layers: list[nn.Module] = [nn.Linear(latent_dim, hidden), nn.ReLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(hidden, hidden), nn.ReLU()]
        self.delta = nn.Sequential(*layers, nn.Linear(hidden, latent_dim))

    def forward(self, z: torch.Tensor, steps: int = 1, fraction: float = 1.0) -> torch.Tensor:
        for _ in range(steps):
            moved = z + fraction * self.delta(z)
            z = moved * (z.norm(dim=1, keepdim=True) / moved.norm(dim=1, keepdim=True).clamp_min(1e-12))
        return z


class C3LTMaps(nn.Module):
    """The two maps of one pair: ``forward_map`` (g, query → target, also ``forward``) and ``backward_map``
    (h, target → query).

    The pair is a buffer, so a checkpoint remembers which pair it was trained on.
    """

    def __init__(self, pair: tuple[int, int], hidden: int | None = None, depth: int = 1) -> None:
        super().__init__()
        self.register_buffer("pair", torch.tensor(pair))
        self.forward_map = LatentStep(hidden=hidden, depth=depth)
        self.backward_map = LatentStep(hidden=hidden, depth=depth)

    def forward(self, z: torch.Tensor, steps: int = 1, fraction: float = 1.0) -> torch.Tensor:
        return self.forward_map(z, steps, fraction)


@dataclass(frozen=True)
class C3LTWeights:
    """Loss weights of the C3LT code's MNIST defaults."""

    alpha: float = 0.1  # proximity
    beta: float = 0.1  # cycle consistency
    gamma: float = 0.001  # adversarial
    smooth: float = 10.0  # p1: mask smoothness inside the proximity term
    entropy: float = 1.0  # p2: mask entropy inside the proximity term
    steps: int = 1  # map steps per translation
    pixel_scale: float = 1.0  # pixel-L1 terms are measured on [0, 1] images; 2.0 measures them on the C3LT code's
    # [-1, 1] range (the reference), where every pixel distance is twice as large

    def __post_init__(self) -> None:
        check_weights(self)
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise InputError(f"C3LTWeights.steps must be an int >= 1, got {self.steps!r}.")


def proximity(x: torch.Tensor, x_cf: torch.Tensor, w: C3LTWeights) -> torch.Tensor:
    """Pixel L1 plus smoothness and entropy of the normalised squared-difference mask."""
    mask = difference_mask(x, x_cf)  # normalised per image: the same on either pixel range
    return (w.pixel_scale * F.l1_loss(x_cf, x) + w.smooth * smoothness(mask) + w.entropy * binary_entropy(mask)) / (
        1 + w.smooth + w.entropy)


def classifier_features(classifier: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The classifier's two post-ReLU convolutional activations (C3LT's perceptual layers)."""
    features = classifier.features
    first = features[:2](x)
    second = features[2:5](first)
    return [first, second]


def perceptual(classifier: nn.Module, x: torch.Tensor, y: torch.Tensor, pixel_scale: float = 1.0) -> torch.Tensor:
    """L1 between images (times ``pixel_scale``) and between their classifier features, averaged over the three."""
    terms = [F.l1_loss(a, b) for a, b in zip(classifier_features(classifier, x), classifier_features(classifier, y))]
    return (sum(terms) + pixel_scale * F.l1_loss(x, y)) / (len(terms) + 1)


def c3lt_loss(maps: C3LTMaps, x_query: torch.Tensor, x_target: torch.Tensor, frozen: dict[str, nn.Module],
              w: C3LTWeights = C3LTWeights()) -> dict[str, torch.Tensor]:
    """Every term of the C3LT objective for one batch of each class, and their weighted sum ``total``."""
    generator, critic, encoder, classifier = (frozen[k] for k in ("generator", "critic", "encoder", "classifier"))
    query, target = maps.pair.tolist()
    with torch.no_grad():
        z1, z2 = encoder(x_query), encoder(x_target)
    z1_cf, z2_cf = maps.forward_map(z1, w.steps), maps.backward_map(z2, w.steps)
    z1_cycle, z2_cycle = maps.backward_map(z1_cf, w.steps), maps.forward_map(z2_cf, w.steps)
    x1_cf, x2_cf = generator(z1_cf), generator(z2_cf)
    x1_cycle, x2_cycle = generator(z1_cycle), generator(z2_cycle)
    terms = {
        "cls": (target_nll(classifier, x1_cf, target) + target_nll(classifier, x2_cf, query)) / 2,
        "prox": (proximity(x_query, x1_cf, w) + proximity(x_target, x2_cf, w)) / 2,
        "cycle": (perceptual(classifier, x_query, x1_cycle, w.pixel_scale)
                  + perceptual(classifier, x_target, x2_cycle, w.pixel_scale)
                  + F.l1_loss(z1_cycle, z1) + F.l1_loss(z2_cycle, z2)) / 4,
        "adv": sum(looks_real(critic(x)) for x in (x1_cf, x2_cf, x1_cycle, x2_cycle)) / 4,
    }
    terms["total"] = terms["cls"] + w.alpha * terms["prox"] + w.beta * terms["cycle"] + w.gamma * terms["adv"]
    return terms


@dataclass(frozen=True)
class Backbone:
    """Which zoo models a family of maps works in: the GAN and the encoder of a pair (a shared one, or one a pair)."""

    gan: str
    encoder: Callable[[tuple[int, int]], str]


KIT_BACKBONE = Backbone("dcgan", lambda pair: "encoder")
"""The kit's small DCGAN and its one shared encoder."""
REFERENCE_BACKBONE = Backbone("dcgan_reference", lambda pair: pair_name("encoder_reference", pair))
"""The C3LT code's DCGAN and its encoder per pair (:mod:`cfkit.zoo.reference_gan`)."""


def frozen_c3lt_parts(needed: Needed, backbone: Backbone = KIT_BACKBONE,
                      pair: tuple[int, int] | None = None) -> dict[str, nn.Module]:
    """G, D, E and the classifier by their role in the C3LT loss, out of the spec's frozen ``needed`` models."""
    gan = needed[backbone.gan]
    encoder = needed[backbone.encoder(pair)] if pair is not None else needed["encoder"]
    return {"generator": gan.generator, "critic": gan.discriminator, "encoder": encoder,
            "classifier": needed["classifier"]}


REFERENCE_WEIGHTS = C3LTWeights(pixel_scale=2.0)
"""The C3LT code's loss weights with its pixel range [-1, 1] (twice the pixel-L1 distances of [0, 1])."""


def fit_c3lt(maps: C3LTMaps, config: TrainConfig, needed: Needed, max_steps: int | None = None,
             progress: bool = True, desc: str = "", weights: C3LTWeights = REFERENCE_WEIGHTS,
             after_step: Callable[[], None] | None = None, backbone: Backbone = KIT_BACKBONE,
             snapshots: StepSnapshots | None = None) -> int:
    """Adam on g and h together over paired batches, the learning rate halved every ``halve_every`` epochs
    (``snapshots``: resumable in pieces, :mod:`cfkit.zoo.snapshots`)."""
    frozen = frozen_c3lt_parts(needed, backbone, tuple(maps.pair.tolist()))

    def loss(model: nn.Module, x_query: torch.Tensor, x_target: torch.Tensor) -> torch.Tensor:
        return c3lt_loss(model, x_query, x_target, frozen, weights)["total"]

    return fit_loop(maps, loss, config, max_steps, progress, desc, paired=True, after_step=after_step,
                    snapshots=snapshots)


@torch.inference_mode()
def c3lt_test_validity(maps: C3LTMaps, _: TrainConfig, needed: Needed, backbone: Backbone = KIT_BACKBONE) -> float:
    """Share of MNIST test images of the query class whose counterfactual G(g(E(x))) is called the target."""
    frozen = frozen_c3lt_parts(needed, backbone, tuple(maps.pair.tolist()))
    query, target = maps.pair.tolist()
    x = load_mnist("test", digits=(query,))[0]
    x_cf = frozen["generator"](maps(frozen["encoder"](x)))
    return (frozen["classifier"](x_cf).argmax(1) == target).float().mean().item()


def pair_spec(pair: tuple[int, int]) -> ModelSpec:
    """The zoo entry of one (query, target) pair's maps on the frozen dcgan, encoder and classifier."""
    q, t = pair
    return ModelSpec(pair_name(FAMILY, pair), lambda: C3LTMaps(pair), fit_c3lt, c3lt_test_validity,
                     "test_validity", True,
                     # the C3LT code's schedule: 200 epochs, StepLR(25, 0.5), pixel L1 on [-1, 1]
                     TrainConfig(epochs=C3LT_EPOCHS, seed=40, lr=1e-3, digits=pair, cosine=False, halve_every=25),
                     0.95, f"C3LT latent maps g: {q}->{t}, h: {t}->{q} on the frozen dcgan/encoder "
                     "(reference schedule, pixel L1 on [-1, 1])", pair_command(FAMILY, pair),
                     needs=("dcgan", "encoder", "classifier"))


REFERENCE_FAMILY = "c3lt_reference"
"""C3LT's maps on the reference backbone (the C3LT code's DCGAN and per-pair encoders): ``c3lt_reference_<q>_<t>``."""


def reference_pair_spec(pair: tuple[int, int]) -> ModelSpec:
    """One pair's maps on the reference backbone, at the same reference schedule as :func:`pair_spec`."""
    q, t = pair
    encoder = REFERENCE_BACKBONE.encoder(pair)
    return ModelSpec(pair_name(REFERENCE_FAMILY, pair), lambda: C3LTMaps(pair),
                     partial(fit_c3lt, backbone=REFERENCE_BACKBONE),
                     partial(c3lt_test_validity, backbone=REFERENCE_BACKBONE), "test_validity", True,
                     TrainConfig(epochs=C3LT_EPOCHS, seed=40, lr=1e-3, digits=pair, cosine=False, halve_every=25),
                     0.95, f"C3LT latent maps g: {q}->{t}, h: {t}->{q} on the frozen dcgan_reference and {encoder} "
                     "(reference schedule, pixel L1 on [-1, 1])", pair_command(REFERENCE_FAMILY, pair),
                     needs=(REFERENCE_BACKBONE.gan, encoder, "classifier"))
