"""Architectures of the discriminative zoo: classifier, oracle, feature network, autoencoders.

All take (N, 1, 28, 28) images in [0, 1]; classifiers return logits.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def _quarters(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The four strided quarters of every 2×2 window, in torch's scan order (row-major); an odd last row/column is
    dropped (floor mode)."""
    x = x[..., : x.shape[-2] // 2 * 2, : x.shape[-1] // 2 * 2]
    return x[..., 0::2, 0::2], x[..., 0::2, 1::2], x[..., 1::2, 0::2], x[..., 1::2, 1::2]


def _window_max(quarters: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The elementwise maximum of the four quarters: each window's max, exactly."""
    return torch.maximum(torch.maximum(quarters[0], quarters[1]), torch.maximum(quarters[2], quarters[3]))


class _MaxPool2x2WithGradient(torch.autograd.Function):
    """2×2 max-pooling whose backward sends each window's gradient to the first of its maxima in scan order, as
    torch's max_pool2d does, from four boolean masks instead of torch's argmax indices (2.6× faster forward and
    backward on the classifier's first pooling, 128×32×24×24 on 2 threads: 4.2 ms against 10.9)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        quarters = _quarters(x)
        top = _window_max(quarters)
        taken = torch.zeros_like(top, dtype=torch.bool)
        winners = []
        for quarter in quarters[:3]:
            winner = (quarter == top) & ~taken
            taken |= winner
            winners.append(winner)
        winners.append(~taken)  # NaN windows too: torch also routes them to some entry; finite inputs never get here
        ctx.save_for_backward(torch.stack(winners))
        ctx.input_shape = x.shape
        return top

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (winners,) = ctx.saved_tensors
        out = grad.new_zeros(ctx.input_shape)
        for quarter, winner in zip(_quarters(out), winners):
            quarter.copy_(grad * winner)
        return out


class MaxPool2x2(nn.MaxPool2d):
    """``MaxPool2x2()``, with the same output and gradients as ``nn.MaxPool2d(2)``, faster on CPU.

    Torch's CPU max-pooling always computes argmax indices: it took 44 % of the classifier's inference time and
    28 % of PGD's. The elementwise maximum of the four strided quarters gives the same values (a max is exact);
    with a gradient, four boolean masks route it to the first maximum of each window, as torch does, so the
    gradients are equal to the bit (ties included).
    """

    def __init__(self) -> None:
        super().__init__(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting():  # torch's own op in a TorchScript or torch.export file of the model: the same
            return F.max_pool2d(x, 2)  # values and gradients, and no custom autograd function for them to carry
        return self._eager(x)

    @torch.jit.unused
    def _eager(self, x: torch.Tensor) -> torch.Tensor:
        """The fast path in eager mode (torch's op while torch.export traces the model)."""
        if torch.compiler.is_exporting():
            return F.max_pool2d(x, 2)
        if torch.is_grad_enabled() and x.requires_grad:
            return _MaxPool2x2WithGradient.apply(x)
        return _window_max(_quarters(x))


class Classifier(nn.Module):
    """The model under explanation: the C3LT MNIST CNN (returns logits, not log-probabilities).

    Conv5x5(32)-ReLU-MaxPool-Conv5x5(64)-ReLU-MaxPool-FC(1024->256)-ReLU-Dropout-FC(10).
    ``features`` is the convolutional part, ``head`` the rest, so methods can split the model.
    """

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, kernel_size=5), nn.ReLU(), MaxPool2x2(),
            nn.Conv2d(32, 64, kernel_size=5), nn.ReLU(), MaxPool2x2(),
        )
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(4 * 4 * 64, 256), nn.ReLU(), nn.Dropout(0.5), nn.Linear(256, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _conv_bn(cin: int, cout: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]


class Oracle(nn.Module):
    """An independent judge of another architecture: 3x3 conv + batch-norm blocks, global pooling."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            *_conv_bn(1, 32), *_conv_bn(32, 32), MaxPool2x2(),
            *_conv_bn(32, 64), *_conv_bn(64, 64), MaxPool2x2(),
            *_conv_bn(64, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.head = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class FeatureNet(nn.Module):
    """The FID/KID feature space: conv32-conv64-fc128 with batch-norm, trained as a digit classifier.

    ``embed`` gives the 128-d features the metrics use; ``forward`` the logits used to train it.
    """

    num_features = 128

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), MaxPool2x2(),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), MaxPool2x2(),
            nn.Flatten(), nn.Linear(64 * 7 * 7, self.num_features), nn.BatchNorm1d(self.num_features), nn.ReLU(),
        )
        self.head = nn.Linear(self.num_features, 10)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(x))


class ClassAutoencoder(nn.Module):
    """Per-class IM1 autoencoder (Van Looveren & Klaise): Conv16-pool-Conv8-pool-Conv8, mirrored decoder.

    ``channels`` widens or narrows the three encoder convolutions (the last sets the 7×7 latent's depth);
    ``signed`` feeds the network [-1, 1] pixels, as the C3LT code does, and maps its output back to [0, 1],
    so inputs and reconstructions stay in the kit's range either way. ``code`` squeezes the 7×7 latent through a
    dense code of that many numbers (None: the spatial latent itself is the code); ``code_relu`` ends the encoder
    in ReLU (the kit's nets) or leaves the code linear (the common Van Looveren port). The IM1 calibration study
    varies all four.
    """

    def __init__(self, channels: tuple[int, int, int] = (16, 8, 8), signed: bool = False, code: int | None = None,
                 code_relu: bool = True) -> None:
        super().__init__()
        first, second, latent = channels
        self.signed = signed
        code_activation = [nn.ReLU()] if code_relu else []
        spatial = latent * 7 * 7
        encoder = [nn.Conv2d(1, first, 3, padding=1), nn.ReLU(), MaxPool2x2(),
                   nn.Conv2d(first, second, 3, padding=1), nn.ReLU(), MaxPool2x2(),
                   nn.Conv2d(second, latent, 3, padding=1)]
        decoder = [nn.Conv2d(latent, second, 3, padding=1), nn.ReLU(), nn.Upsample(scale_factor=2),
                   nn.Conv2d(second, first, 3, padding=1), nn.ReLU(), nn.Upsample(scale_factor=2),
                   nn.Conv2d(first, 1, 3, padding=1)]
        if code is None:
            encoder += code_activation
        else:
            encoder += [nn.ReLU(), nn.Flatten(), nn.Linear(spatial, code), *code_activation]
            decoder = [nn.Linear(code, spatial), nn.ReLU(), nn.Unflatten(1, (latent, 7, 7)), *decoder]
        self.encoder, self.decoder = nn.Sequential(*encoder), nn.Sequential(*decoder)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.signed:
            return (self.decoder(self.encoder(x * 2 - 1)) + 1) / 2
        return self.decoder(self.encoder(x))


class AllClassAutoencoder(nn.Module):
    """All-class IM2 autoencoder (Van Looveren & Klaise): Conv16-Conv16-pool-Conv1, latent 1x14x14."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), MaxPool2x2(),
            nn.Conv2d(16, 1, 3, padding=1),
        )
        self.decoder = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Upsample(scale_factor=2),
            nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 1, 3, padding=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))
