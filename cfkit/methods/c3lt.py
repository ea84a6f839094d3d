"""C3LT: cycle-consistent counterfactuals by latent transformations (Khorram & Fuxin, CVPR 2022).

The query is encoded into the DCGAN's latent space, z = E(x), moved by the pair's learned map g
and decoded: x′ = G(g(z)). g and its inverse h were trained per pair with a classification,
proximity, cycle-consistency and adversarial loss (:mod:`cfkit.zoo.latent_maps`); explaining is a
single forward pass. ``fraction`` walks only part of the map's step, tracing the latent path
from the reconstruction G(E(x)) (fraction 0) to the counterfactual (fraction 1). ``extras["cycled"]``
is G(h(g(z))), the trip back that the cycle loss asks to return to the query.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..zoo import latent_maps
from ..zoo.checkpoints import load, load_pair, parse_pair_name
from .base import PerPairMethod, pair_groups
from .knobs import one_of, positive, unit_interval


BACKBONES = {"kit": (latent_maps.FAMILY, latent_maps.KIT_BACKBONE),
             "reference": (latent_maps.REFERENCE_FAMILY, latent_maps.REFERENCE_BACKBONE)}
"""The generator and encoders C3LT's maps work in, with the maps' zoo family: the kit's small DCGAN and shared
encoder, or the C3LT code's DCGAN and per-pair encoders (:mod:`cfkit.zoo.reference_gan`)."""


@dataclass(frozen=True)
class C3LTConfig:
    steps: int = 1  # map steps applied (the maps are trained for 1, as in the C3LT code)
    fraction: float = 1.0  # how far along the last step to go: 0 is G(E(x)), 1 the counterfactual
    backbone: str = "kit"  # "kit": the kit's 2-layer DCGAN, one shared encoder; "reference": the C3LT code's DCGAN
    # (4 transposed convolutions, ngf 64; shipped) and an encoder per pair with its maps, once trained
    # (`cfkit train encoder_reference c3lt_reference --pair Q T`, README "Backbones")

    def __post_init__(self) -> None:
        positive("steps", self.steps, integer=True)
        unit_interval("fraction", self.fraction)
        one_of("backbone", self.backbone, tuple(BACKBONES))


class C3LT(PerPairMethod):
    name = "c3lt"
    family = latent_maps.FAMILY
    config_type = C3LTConfig

    def __init__(self, classifier: nn.Module, config: C3LTConfig | None = None,
                 pair_dir: str | Path | None = None, **kwargs: Any) -> None:
        super().__init__(classifier, config, pair_dir, **kwargs)
        self.family, self.backbone = BACKBONES[self.config.backbone]
        self.generator = load(self.backbone.gan, device=self.device).generator

    def encoder(self, pair: tuple[int, int]) -> nn.Module:
        """The backbone's encoder for ``pair`` (the kit's one shared encoder, or the pair's own)."""
        name = self.backbone.encoder(tuple(pair))
        parsed = parse_pair_name(name)
        return load(name, device=self.device) if parsed is None else load_pair(*parsed, device=self.device)

    def _encode(self, x: torch.Tensor, groups: list[tuple[tuple[int, int], torch.Tensor]]) -> torch.Tensor:
        """E(x) for every query: in one pass with a shared encoder, else pair by pair."""
        if parse_pair_name(self.backbone.encoder(groups[0][0])) is None:
            return self.encoder(groups[0][0])(x)
        z = torch.empty(len(x), self.generator.latent_dim, device=x.device)
        for pair, rows in groups:
            z[rows] = self.encoder(pair)(x[rows])
        return z

    @torch.inference_mode()
    def latent_path(self, x: torch.Tensor, pair: tuple[int, int], points: int = 6) -> torch.Tensor:
        """Images along the walk z → g(z) at ``points`` evenly spaced fractions: (points, N, 1, 28, 28)."""
        maps, z = self.pair_model(pair), self.encoder(pair)(x.to(self.device))
        before = maps(z, self.config.steps - 1)  # full steps first; the last one is walked in fractions
        return torch.stack([self.generator(maps(before, 1, f)) for f in torch.linspace(0, 1, points).tolist()]).cpu()

    def _explain_batch(
        self, x: torch.Tensor, target: torch.Tensor, source: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        c = self.config
        latent = torch.empty(len(x), self.generator.latent_dim, device=x.device)
        back = torch.empty_like(latent)
        with torch.inference_mode():
            groups = pair_groups(source, target)
            z = self._encode(x, groups)
            for pair, rows in groups:
                maps = self.pair_model(pair)
                latent[rows] = maps(maps(z[rows], c.steps - 1), 1, c.fraction)
                back[rows] = maps.backward_map(latent[rows], c.steps)
            x_cf, reconstruction, cycled = (self.generator(v) for v in (latent, z, back))
        return x_cf, {"latent": latent, "reconstruction": reconstruction, "cycled": cycled}
