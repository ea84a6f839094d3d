"""What a zoo entry is: :class:`ModelSpec`, below every model module so each can declare its own entries.

A spec names the zoo models its training and quality figure use (``needs``); the zoo loads them and
hands them over as ``needed``, so no model module imports the zoo's loader.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from .training import Needed, TrainConfig

Fit = Callable[..., int]  # fit(model, config, needed, max_steps=, progress=, desc=) -> steps taken
Measure = Callable[[nn.Module, TrainConfig, Needed], float]  # the quality figure on held-out data


@dataclass(frozen=True)
class ModelSpec:
    """What a zoo entry is, how it is trained, and the figure it must reach to be shipped."""

    name: str
    build: Callable[[], nn.Module]
    fit: Fit
    measure: Measure
    metric: str  # name of the quality figure in the manifest
    higher_is_better: bool
    config: TrainConfig
    threshold: float
    description: str
    train_command: str | None = None  # defaults to `cfkit train <name>`
    needs: tuple[str, ...] = ()  # zoo models that fit and measure use, handed to them as `needed`

    @property
    def command(self) -> str:
        return self.train_command or f"cfkit train {self.name}"

    @property
    def from_curve(self) -> bool:
        """Shipped from its training curve (``cfkit backbone NAME``), the command that retrains it as shipped."""
        return self.command.startswith("cfkit backbone")

    def passes(self, quality: dict[str, float]) -> bool:
        value = quality[self.metric]
        return value >= self.threshold if self.higher_is_better else value <= self.threshold


def pair_name(family: str, pair: tuple[int, int]) -> str:
    """The zoo name of ``family``'s model for one (query, target) pair: ``<family>_<q>_<t>``."""
    return f"{family}_{pair[0]}_{pair[1]}"


def pair_command(family: str, pair: tuple[int, int]) -> str:
    """The command that trains ``family``'s model for one pair."""
    return f"cfkit train {family} --pair {pair[0]} {pair[1]}"
