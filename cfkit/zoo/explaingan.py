"""ExplainGAN (Samangouei et al., ECCV 2018) for one pair of classes (q, t).

A shared encoder reads the query; three decoders write a transformed digit of each class of the
pair and a mask m. The counterfactual composites the transformed digit into the query only where
the mask is on: x′ = m·T_t(x) + (1 − m)·x. Trained on both directions at once (q → t and t → q)::

    cls   = NLL(t | x′) for queries of q, NLL(q | x′) for images of t
    rec   = L1(T_q(x), x) for x of q and L1(T_t(x), x) for x of t: each decoder must also
            reproduce digits of its own class, which ties the transformed digit to the query
    mask  = mean(m) (size), smoothness(m), and ExplainGAN's binary-mask prior min(m, 1 − m) (entropy),
            which drives the mask to 0 or 1 so the composite is never a half-transparent blend
    adv   = a two-headed critic (real q? real t?) calls the composites real digits of their class
    loss  = cls + λ_rec·rec + λ_size·mean(m) + λ_smooth·smoothness(m) + λ_entropy·entropy(m) + λ_adv·adv

The critic trains against real digits of each class with the usual discriminator loss.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ..data import load_mnist
from .gan import Discriminator
from .losses import binary_entropy, check_weights, critic_loss, looks_real, smoothness, target_nll
from .spec import ModelSpec, pair_command, pair_name
from .training import Needed, TrainConfig, pair_batches, pair_schedule

FAMILY = "expgan"
"""The zoo's per-pair ExplainGANs are named ``expgan_<q>_<t>``; the ExpGAN method explains with them."""
EXPGAN_EPOCHS = 30
"""ExplainGAN until its validity and oracle agreement stop rising (the first generation had 5 epochs)."""


def _decoder(out_channels: int = 1) -> nn.Sequential:
    """7×7 code → 28×28 in [0, 1]; nearest upsampling then convolution, free of transposed-conv checkerboards."""
    return nn.Sequential(
        nn.Upsample(scale_factor=2), nn.Conv2d(64, 32, 3, 1, 1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Upsample(scale_factor=2), nn.Conv2d(32, out_channels, 3, 1, 1), nn.Sigmoid(),
    )


class ExplainGANGenerator(nn.Module):
    """Encoder, one image decoder per class of the pair, and a mask decoder."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 32, 4, 2, 1), nn.LeakyReLU(0.2),
            nn.Conv2d(32, 64, 4, 2, 1), nn.BatchNorm2d(64), nn.LeakyReLU(0.2),
            nn.Conv2d(64, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.LeakyReLU(0.2),
        )
        self.decoders = nn.ModuleList([_decoder(), _decoder()])  # index 0: query class, 1: target class
        self.mask = _decoder()

    def forward(self, x: torch.Tensor, to: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Translate ``x`` toward side ``to`` (1: the target class): (composite, mask, transformed digit)."""
        code = self.encoder(x)
        transformed, mask = self.decoders[to](code), self.mask(code)
        return mask * transformed + (1 - mask) * x, mask, transformed

    def reconstruct(self, x: torch.Tensor, side: int) -> torch.Tensor:
        """The decoder of ``x``'s own class applied to it (the reconstruction term)."""
        return self.decoders[side](self.encoder(x))


class PairCritic(Discriminator):
    """The DCGAN discriminator's architecture with one real/fake logit per class of the pair."""

    def __init__(self) -> None:
        super().__init__(outputs=2)

    def forward(self, x: torch.Tensor, side: int) -> torch.Tensor:
        return self.net(x)[:, side]


class ExplainGAN(nn.Module):
    """Generator and critic of one pair in one checkpoint; the pair is a buffer."""

    def __init__(self, pair: tuple[int, int]) -> None:
        super().__init__()
        self.register_buffer("pair", torch.tensor(pair))
        self.generator = ExplainGANGenerator()
        self.critic = PairCritic()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Counterfactuals of query-class images toward the target class."""
        return self.generator(x, to=1)[0]


@dataclass(frozen=True)
class ExplainGANWeights:
    """Loss weights; the classification term has weight 1. Tuned on 4->9 (3 and 5 epochs, validity, oracle
    agreement and the look of the masks): an adversarial weight of 0.1 left noisy, oracle-rejected digits."""

    reconstruction: float = 1.0
    size: float = 0.5  # mean mask value
    smooth: float = 1.0  # mask smoothness
    entropy: float = 1.0  # binary-mask prior min(m, 1 − m); 0 was the kit's first setting (blotchy soft masks)
    adversarial: float = 1.0

    def __post_init__(self) -> None:
        check_weights(self)


def generator_terms(model: ExplainGAN, classifier: nn.Module, x_query: torch.Tensor, x_target: torch.Tensor,
                    w: ExplainGANWeights = ExplainGANWeights()) -> dict[str, torch.Tensor]:
    """Every generator term for one batch of each class, and their weighted sum ``total``."""
    labels = model.pair.tolist()
    g = model.generator
    terms = {"cls": 0.0, "rec": 0.0, "size": 0.0, "smooth": 0.0, "entropy": 0.0, "adv": 0.0}
    composites = []
    for side, x in ((0, x_query), (1, x_target)):
        other = 1 - side
        x_cf, mask, _ = g(x, to=other)
        composites.append(x_cf)
        terms["cls"] = terms["cls"] + target_nll(classifier, x_cf, labels[other]) / 2
        terms["rec"] = terms["rec"] + (g.reconstruct(x, side) - x).abs().mean() / 2
        terms["size"] = terms["size"] + mask.mean() / 2
        terms["smooth"] = terms["smooth"] + smoothness(mask) / 2
        terms["entropy"] = terms["entropy"] + binary_entropy(mask) / 2
        terms["adv"] = terms["adv"] + looks_real(model.critic(x_cf, other)) / 2
    terms["total"] = (terms["cls"] + w.reconstruction * terms["rec"] + w.size * terms["size"]
                      + w.smooth * terms["smooth"] + w.entropy * terms["entropy"] + w.adversarial * terms["adv"])
    terms["composites"] = composites
    return terms


def fit_expgan(model: ExplainGAN, config: TrainConfig, needed: Needed, max_steps: int | None = None,
               progress: bool = True, desc: str = "", weights: ExplainGANWeights = ExplainGANWeights(),
               after_step: Callable[[], None] | None = None) -> int:
    """Alternate critic and generator steps over paired batches (Adam, β = (0.5, 0.999)) against the frozen
    ``needed["classifier"]``."""
    classifier = needed["classifier"]
    model.to(config.device)
    opt_g = torch.optim.Adam(model.generator.parameters(), lr=config.lr, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(model.critic.parameters(), lr=config.lr, betas=(0.5, 0.999))
    schedules = [pair_schedule(opt, config, max_steps) for opt in (opt_g, opt_d)]
    model.train()
    step = 0
    for x_query, x_target in pair_batches(config, max_steps, progress, desc):
        terms = generator_terms(model, classifier, x_query, x_target, weights)
        opt_g.zero_grad(set_to_none=True)
        terms["total"].backward()
        opt_g.step()
        fake_query_side, fake_target_side = (x.detach() for x in reversed(terms["composites"]))
        loss_d = (critic_loss(model.critic(x_query, 0), model.critic(fake_query_side, 0))
                  + critic_loss(model.critic(x_target, 1), model.critic(fake_target_side, 1))) / 2
        opt_d.zero_grad(set_to_none=True)
        loss_d.backward()
        opt_d.step()
        for schedule in schedules:
            if schedule is not None:
                schedule.step()
        step += 1
        if after_step is not None:
            after_step()
    model.eval()
    return step


@torch.inference_mode()
def expgan_test_validity(model: ExplainGAN, _: TrainConfig, needed: Needed) -> float:
    """Share of MNIST test images of the query class whose counterfactual ``needed["classifier"]`` calls the target."""
    query, target = model.pair.tolist()
    x = load_mnist("test", digits=(query,))[0]
    return (needed["classifier"](model(x)).argmax(1) == target).float().mean().item()


def pair_spec(pair: tuple[int, int]) -> ModelSpec:
    """The zoo entry of one (query, target) pair's ExplainGAN, trained against the shipped classifier."""
    q, t = pair
    return ModelSpec(pair_name(FAMILY, pair), lambda: ExplainGAN(pair), fit_expgan, expgan_test_validity,
                     "test_validity", True,
                     TrainConfig(epochs=EXPGAN_EPOCHS, seed=50, lr=2e-4, batch_size=64, digits=pair, cosine=False),
                     0.99, f"ExplainGAN generator (digit + mask, binary-mask prior) and critic for {q}<->{t}",
                     pair_command(FAMILY, pair), needs=("classifier",))
