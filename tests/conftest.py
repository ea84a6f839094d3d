"""Shared fixtures: MNIST is fetched once per session (as `cfkit data` would), the shipped zoo is loaded."""
from __future__ import annotations

import pytest
import torch

from cfkit.data import ensure_mnist, load_mnist


@pytest.fixture(scope="session", autouse=True)
def mnist() -> None:
    ensure_mnist(verbose=False)
    torch.set_num_threads(max(1, torch.get_num_threads()))


@pytest.fixture(scope="session")
def fours_and_nines() -> tuple[torch.Tensor, torch.Tensor]:
    """A few real test 4s and 9s for metric checks."""
    return load_mnist("test", digits=(4,))[0][:64], load_mnist("test", digits=(9,))[0][:64]


class Scale(torch.nn.Module):
    """A hand-built 'autoencoder' whose output is known: x -> factor * x."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.factor * x


@pytest.fixture
def scale():
    return Scale
