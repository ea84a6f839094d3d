"""cfkit.running.compute: FLOP counts that match hand formulas (forward, backward, inside PGD and inference mode), and a
matmul peak that is a plausible number."""
from __future__ import annotations

import math
import time

import pytest
import torch
from torch import nn

from cfkit.data import load_mnist
from cfkit.methods import catalog
from cfkit.methods.adversarial import AdversarialAttack, AttackConfig
from cfkit.running.compute import (conv_peak_gflops, count_flops, flops_per_counterfactual, matmul_peak_gflops, peak_gflops,
                           torch_threads)
from cfkit.zoo.checkpoints import load

PIXELS = 28 * 28


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Small tensors: on a busy 2-core machine a second thread spins against the counter's Python work (20x slower)."""
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def fours() -> torch.Tensor:
    return load_mnist("test", digits=(4,))[0][:4]


def linear_classifier() -> nn.Module:
    """The smallest classifier the methods accept: one Linear(784 -> 10), 2·784·10 FLOPs an image, trained for a
    moment on real digits (the methods refuse a model that cannot read them)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(PIXELS, 10))
    x, y = load_mnist("train")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for batch in torch.arange(4000).split(100):
        loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def test_linear_forward_is_two_flops_per_multiply_add() -> None:
    layer, x = nn.Linear(300, 20), torch.rand(7, 300)
    assert count_flops(lambda: layer(x)) == 2 * 7 * 300 * 20


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode, torch.enable_grad])
def test_conv_forward_under_every_grad_mode(mode) -> None:
    conv, x = nn.Conv2d(3, 8, kernel_size=5), torch.rand(6, 3, 28, 28)
    with mode():
        flops = count_flops(lambda: conv(x))
    assert flops == 2 * 6 * 24 * 24 * 8 * 3 * 5 * 5  # N · output positions · out channels · (in channels · k²)


def test_backward_to_the_input_counts_the_input_gradient_only() -> None:
    """``autograd.grad`` on a leaf input (what PGD, CEM and LDCE call; it fails under the stock module tracker,
    pytorch#131753): forward plus the input gradient, no weight gradient."""
    layer = nn.Linear(PIXELS, 10)
    x = torch.rand(5, PIXELS, requires_grad=True)
    with torch.enable_grad():
        flops = count_flops(lambda: torch.autograd.grad(layer(x).sum(), x))
    assert flops == 2 * (2 * 5 * PIXELS * 10)


def test_pgd_steps_match_the_hand_formula(fours) -> None:
    """Inside captum's PGD: each step is a forward and an input gradient of the linear classifier; the base's
    validity check adds one forward. Per image: (2·steps + 1) · 2·784·10."""
    for steps in (1, 6):
        attack = AdversarialAttack(linear_classifier(), AttackConfig(steps=steps), device="cpu")
        per_cf = flops_per_counterfactual(attack, fours, 9, torch.full((4,), 4))
        assert per_cf == (2 * steps + 1) * 2 * PIXELS * 10


def test_the_quick_attack_scales_with_steps(fours) -> None:
    """The catalog's quick attack (40 steps) on real digits: 20 more steps cost 20 forward+backward passes of the
    zoo classifier, counted here on their own."""
    classifier = load("classifier")
    quick = catalog.get("adv_attack").make_quick(classifier, device="cpu")
    half = AdversarialAttack(classifier, AttackConfig(radius=quick.config.radius, steps=quick.config.steps // 2),
                             device="cpu")
    source = torch.full((4,), 4)
    full_cost, half_cost = (flops_per_counterfactual(m, fours, 9, source) for m in (quick, half))
    x = fours.clone().requires_grad_(True)
    with torch.enable_grad():
        step = count_flops(lambda: torch.autograd.grad(classifier(x).sum(), x)) / len(x)
    assert half_cost > 0 and step > 0
    assert full_cost - half_cost == pytest.approx((quick.config.steps - half.config.steps) * step)


def test_matmul_peak_is_a_quick_positive_number() -> None:
    start = time.perf_counter()
    peak = matmul_peak_gflops(threads=2, size=128, repeats=2)
    assert time.perf_counter() - start < 5
    assert math.isfinite(peak) and peak > 0
    assert torch.get_num_threads() == 1, "the thread count is restored"


def test_torch_threads_restores_the_count_after_an_error() -> None:
    with pytest.raises(RuntimeError), torch_threads(2):
        assert torch.get_num_threads() == 2
        raise RuntimeError
    assert torch.get_num_threads() == 1


def test_matmul_peak_refuses_an_empty_matrix() -> None:
    with pytest.raises(ValueError, match="size and repeats"):
        matmul_peak_gflops(size=0)
    with pytest.raises(ValueError, match="channels, side, batch and repeats"):
        conv_peak_gflops(channels=0)


def test_the_peak_is_the_faster_of_matmul_and_convolution(monkeypatch) -> None:
    """A quick real convolution rate, then the choice: the peak is never the slower kernel family's."""
    rate = conv_peak_gflops(threads=1, channels=16, side=8, batch=2, repeats=2)
    assert math.isfinite(rate) and rate > 0 and torch.get_num_threads() == 1
    import cfkit.running.compute as compute

    monkeypatch.setattr(compute, "matmul_peak_gflops", lambda threads=None: 217.0)
    monkeypatch.setattr(compute, "conv_peak_gflops", lambda threads=None: 490.0)
    assert peak_gflops() == {"matmul": 217.0, "conv": 490.0, "peak": 490.0}
