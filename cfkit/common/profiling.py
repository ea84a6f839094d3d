"""Where a notebook's seconds go: named phases timed inside its kernel, and the per-notebook profile of a run.

The kit's hot paths open a :func:`phase` ("method" around a method's ``explain``, "metrics" around scoring a
set, "inception" around Inception-v3 forward passes); a nested phase's time counts for it alone, never for the
phase around it. :func:`cfkit.running.run.record` writes the kernel's totals beside the recorded numbers, and
:func:`notebook_profile` adds papermill's per-cell durations and the run's wall time: startup (process, papermill
and kernel start), each phase, and the rest of the cells' time (imports, model loading, plots).
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PHASES = ("method", "metrics", "inception")
"""The phases the kit times, in the order the profile shows them."""

_totals: dict[str, float] = {}
_devices: dict[str, set[str]] = {}
_open: list[list[float]] = []  # per open phase: [seconds spent in phases nested inside it]


@contextmanager
def phase(name: str, device: object = None) -> Iterator[None]:
    """Add the time spent inside the block to phase ``name`` of this process, less that of phases nested in it;
    ``device`` (where the phase's tensors live) is kept for :func:`devices`."""
    if device is not None:
        _devices.setdefault(name, set()).add(str(device))
    start = time.perf_counter()
    _open.append([0.0])
    try:
        yield
    finally:
        nested = _open.pop()[0]
        elapsed = time.perf_counter() - start
        _totals[name] = _totals.get(name, 0.0) + elapsed - nested
        if _open:
            _open[-1][0] += elapsed


def phases() -> dict[str, float]:
    """Seconds per phase so far in this process (rounded to 0.1 s)."""
    return {name: round(seconds, 1) for name, seconds in _totals.items()}


def devices() -> dict[str, list[str]]:
    """The devices each phase ran on so far in this process, e.g. ``{"method": ["cuda:0"], "metrics": ["cpu"]}``."""
    return {name: sorted(found) for name, found in _devices.items()}


def reset() -> None:
    """Forget the phases timed so far (a fresh count, as in a fresh kernel)."""
    _totals.clear()
    _devices.clear()


def cell_seconds(executed_notebook: str | Path) -> float:
    """Total execution time of the code cells of a notebook papermill executed (its per-cell ``duration``)."""
    cells = json.loads(Path(executed_notebook).read_text())["cells"]
    return sum(cell.get("metadata", {}).get("papermill", {}).get("duration") or 0.0 for cell in cells)


def notebook_profile(wall: float, executed_notebook: str | Path, timed: dict[str, float]) -> dict[str, float]:
    """One notebook's row of the profile: ``wall`` seconds split into startup (wall − the cells' time), the
    kernel's ``timed`` phases, and ``other`` (the cells' time outside any phase)."""
    cells = cell_seconds(executed_notebook)
    row = {"wall": round(wall, 1), "startup": round(max(0.0, wall - cells), 1)}
    row.update({name: round(timed.get(name, 0.0), 1) for name in PHASES})
    row.update({name: round(seconds, 1) for name, seconds in timed.items() if name not in PHASES})
    row["other"] = round(max(0.0, cells - sum(timed.values())), 1)
    return row
