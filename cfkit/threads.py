"""How many torch threads a notebook kernel gets: kernels inherit their launcher's environment."""
from __future__ import annotations

import os

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""What caps a kernel's torch/BLAS threads."""


def cores() -> int:
    """The CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def threads_per_job(jobs: int) -> int:
    """Threads for each of ``jobs`` runs at once, so that together they use this machine's cores once."""
    return max(1, cores() // max(1, jobs))


def thread_limits(threads: int) -> dict[str, str]:
    """The environment that caps a child's kernel at ``threads`` torch/BLAS threads."""
    return {var: str(threads) for var in THREAD_VARS}
