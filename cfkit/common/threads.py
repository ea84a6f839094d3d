"""How many torch threads a notebook kernel gets: kernels inherit their launcher's environment.

Runs launched side by side start on ``cores // runs`` threads each. When the launcher also names a share file
(:data:`SHARE_VAR`, written by ``cfkit reproduce --jobs``), a kernel re-reads it between batches
(:func:`follow_share`) and takes ``cores // (runs going on now)`` threads: the last notebook running gets every
core instead of leaving one idle.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from ..paths import atomic_write_text

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""What caps a kernel's torch/BLAS threads."""
SHARE_VAR = "CFKIT_CORE_SHARE"
"""Environment variable naming the file that holds how many runs share this machine's cores right now."""
SHARE_CHECK_SECONDS = 2.0
"""A kernel reads the share file at most this often (a batch of a method takes longer)."""
_last_check = [float("-inf")]


def cores() -> int:
    """The CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def threads_per_job(jobs: int) -> int:
    """Threads for each of ``jobs`` runs at once, so that together they use this machine's cores once."""
    return max(1, cores() // max(1, jobs))


def thread_limits(threads: int) -> dict[str, str]:
    """The environment that caps a child's kernel at ``threads`` torch/BLAS threads."""
    return {var: str(threads) for var in THREAD_VARS}


def write_share(path: str | Path, running: int) -> None:
    """Tell the kernels following ``path`` that ``running`` runs now share the cores (atomic)."""
    atomic_write_text(path, str(int(running)))


def follow_share() -> None:
    """Take this machine's share of cores named by the launcher's share file (no file named: do nothing).
    Cheap enough to call on every batch: the file is read at most every :data:`SHARE_CHECK_SECONDS`."""
    path = os.environ.get(SHARE_VAR)
    now = time.monotonic()
    if not path or now - _last_check[0] < SHARE_CHECK_SECONDS:
        return
    _last_check[0] = now
    try:
        running = int(Path(path).read_text())
    except (OSError, ValueError):  # not written yet, or gone with its run: keep the threads we have
        return
    wanted = threads_per_job(running)
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)
