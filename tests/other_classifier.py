"""A second classifier, not the zoo's: a small ResNet-style CNN trained in seconds. The tests explain it with
every method that needs no per-pair training, through the same `-p classifier` a user would pass. Like the
zoo's, it exposes ``features`` (a 7x7 map here, 4x4 there) and ``head``, which CVE swaps cells between."""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from cfkit.data import load_mnist

MIN_ACCURACY = 0.9
"""d2l-style: the training function refuses a model that does not reach this on the test set."""


class Residual(nn.Module):
    """x + conv(relu(conv(x))): the block that makes it ResNet-style."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(channels, channels, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.body(x))


class SmallResNet(nn.Module):
    """conv(16) - residual block - pool - conv(32) - pool: a (32, 7, 7) map, then one linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), Residual(16), nn.MaxPool2d(2),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * 7 * 7, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def small_resnet() -> nn.Module:
    """The factory of the ``package.module:factory`` form."""
    return SmallResNet()


def train_small_resnet(images: int = 12_000, seed: int = 0) -> nn.Module:
    """One epoch of Adam on the first ``images`` training digits (seconds on 2 cores), checked on the test set."""
    return _train(small_resnet, images, seed)


def _train(factory: Callable[[], nn.Module], images: int, seed: int) -> nn.Module:
    """One epoch of Adam on the first ``images`` training digits for the model ``factory`` builds (after seeding),
    refused below :data:`MIN_ACCURACY` on the test set."""
    torch.manual_seed(seed)
    model = factory()
    x, y = load_mnist("train")
    x, y = x[:images], y[:images]
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for batch in torch.randperm(len(x)).split(64):
        loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    test_x, test_y = load_mnist("test")
    with torch.inference_mode():
        accuracy = torch.cat([model(c).argmax(1) for c in test_x.split(2000)]).eq(test_y).float().mean().item()
    assert accuracy >= MIN_ACCURACY, f"{type(model).__name__} reached {accuracy:.3f} test accuracy, below {MIN_ACCURACY}"
    return model


class TwoWay(nn.Module):
    """A binary classifier (is it a 4?): the kit must refuse it before any work starts."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(28 * 28, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x.flatten(1))


class Probabilities(nn.Module):
    """A classifier with a softmax on top: it returns probabilities, which the methods' losses must not get."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.model(x), dim=1)


def plain_cnn() -> nn.Sequential:
    """An ordinary ``nn.Sequential`` CNN, no ``features``/``head``: conv-pool-conv-pool, a (32, 5, 5) map, then a
    linear layer (a 5x5 map does not divide the 28-pixel image into equal tiles: CVE's tiling copes)."""
    return nn.Sequential(nn.Conv2d(1, 16, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 5 * 5, 10))


def train_plain_cnn(images: int = 12_000, seed: int = 0) -> nn.Sequential:
    """:func:`plain_cnn` trained like the small ResNet (one epoch of Adam, checked on the test set)."""
    return _train(plain_cnn, images, seed)


def export_classifier(model: nn.Module, path) -> None:
    """The README's torch.export recipe: eval mode, a batch dimension of any size."""
    program = torch.export.export(model.eval(), (torch.rand(2, 1, 28, 28),),
                                  dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.export.save(program, str(path))
