"""Shared fixtures: MNIST is fetched once per session (as `cfkit data` would), the shipped zoo is loaded.

Torch threads: with pytest-xdist's ``-n N`` each worker (and every notebook kernel or child it starts) takes
cores // N threads, so the workers use the cores once. ``CFKIT_TEST_THREADS=4 pytest …`` runs every test and
kernel on 4 threads instead (the recorded numbers must hold at 1, 2 and 4).
"""
from __future__ import annotations

import os

import papermill
import pytest
import torch

from cfkit.common.threads import thread_limits, threads_per_job
from cfkit.data import ensure_mnist, load_mnist

TEST_THREADS_VAR = "CFKIT_TEST_THREADS"


def worker_threads() -> int:
    """Torch threads of this test process: CFKIT_TEST_THREADS, else this worker's share of the cores."""
    given = os.environ.get(TEST_THREADS_VAR, "").strip()
    if given:
        if not given.isdigit() or int(given) < 1:
            raise pytest.UsageError(f"{TEST_THREADS_VAR} must be an int >= 1, got {given!r}.")
        return int(given)
    return threads_per_job(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def pytest_configure(config: pytest.Config) -> None:
    threads = worker_threads()
    os.environ.update(thread_limits(threads))  # kernels and child processes inherit it
    torch.set_num_threads(threads)


@pytest.fixture(scope="session", autouse=True)
def mnist() -> None:
    ensure_mnist(verbose=False)


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


@pytest.fixture
def no_kernel(monkeypatch) -> list[str]:
    """papermill.execute_notebook replaced: the notebooks it was asked to run, and no kernel."""
    started: list[str] = []
    monkeypatch.setattr(papermill, "execute_notebook", lambda path, *args, **kwargs: started.append(path))
    return started
