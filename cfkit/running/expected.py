"""Expected values of a notebook's recorded numbers, each with a tolerance measured rather than guessed.

``write_expected("02_cem", {"n_queries": 20, "inception": False})`` runs the notebook at those parameters
on this machine's cores (the reference), again on each of ``threads`` torch threads and at each seed
offset, and stores per number its value, the spread across thread counts and across seeds, and its
tolerance: the largest of the base ``abs + rel·|value|``, twice the thread spread, the seed spread and
``INTERVAL_SHARE`` of the number's own 95 % bootstrap half-width. A CEM or LDCE figure that moves by a
fraction of its statistical uncertainty on another CPU still reproduces; one that moves by half its
interval does not. ``mismatches`` is the comparison the tests make.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..common.threads import cores, thread_limits
from ..errors import NotebookFailedError
from ..paths import NOTEBOOK_DIR, atomic_write_json
from .run import child_command, literal_defaults, notebook_parameters, read_record, reproducible

EXPECTED_DIR = NOTEBOOK_DIR / "expected"
INTERVAL_SHARE = 0.5
"""A number with a bootstrap interval may move by this share of its half-width (another CPU's rounding can
flip a hinge or a sign step; that moves a figure within its uncertainty, not across it)."""
THREAD_FACTOR = 2.0
"""The tolerance is at least this many times the spread measured across thread counts."""


def _run(name: str, parameters: dict[str, Any], threads: int | None, folder: Path) -> dict[str, float]:
    """The notebook's reproducible numbers from a ``cfkit run`` child on ``threads`` torch threads (None: all)."""
    run_dir = folder / f"t{threads}-s{parameters.get('seed', 0)}"  # a runs folder of its own: scoring reads it whole
    out = run_dir / Path(name).stem
    values = dict(parameters)
    if "runs_dir" in notebook_parameters(name):
        values["runs_dir"] = str(run_dir)
    env = {**os.environ, **(thread_limits(threads) if threads else {})}
    done = subprocess.run(child_command(name, values, out), capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise NotebookFailedError(f"{name} failed on {threads or cores()} threads: {done.stderr[-2000:]}")
    return reproducible(read_record(out)["numbers"])


def _spread(runs: list[dict[str, float]]) -> dict[str, float]:
    """Max minus min of every number the runs share."""
    shared = set.intersection(*(set(r) for r in runs))
    return {k: max(r[k] for r in runs) - min(r[k] for r in runs) for k in shared}


def _half_width(values: dict[str, float], key: str) -> float | None:
    """Half the bootstrap interval of ``key`` (or of the metric whose bound ``key`` is)."""
    metric = key[:-3] if key.endswith(("_lo", "_hi")) else key
    low, high = values.get(f"{metric}_lo"), values.get(f"{metric}_hi")
    return None if low is None or high is None else (high - low) / 2


def tolerances(values: dict[str, float], thread_spread: dict[str, float], seed_spread: dict[str, float],
               rel: float, abs_tol: float, rel_without_interval: float | None = None) -> dict[str, float]:
    """Each number's absolute tolerance (see the module docstring); ``rel_without_interval`` replaces ``rel`` for
    numbers that have no bootstrap interval (summaries of a few discrete decisions, say)."""
    out = {}
    for key, value in values.items():
        half = _half_width(values, key)
        base_rel = rel if half is not None or rel_without_interval is None else rel_without_interval
        out[key] = max(abs_tol + base_rel * abs(value), THREAD_FACTOR * thread_spread.get(key, 0.0),
                       seed_spread.get(key, 0.0), INTERVAL_SHARE * half if half is not None else 0.0)
    return out


def retolerance(name: str, rel: float, abs_tol: float, rel_without_interval: float | None = None,
                directory: str | Path | None = None) -> Path:
    """Recompute an expected file's tolerances from its stored values and spreads with other base tolerances
    (no notebook runs)."""
    path = Path(directory or EXPECTED_DIR) / f"{Path(name).stem}.json"
    expected = json.loads(path.read_text())
    expected["tolerance"].update(rel=rel, abs=abs_tol, rel_without_interval=rel_without_interval)
    expected["tolerances"] = tolerances(expected["values"], expected["spread"]["threads"],
                                        expected["spread"]["seeds"], rel, abs_tol, rel_without_interval)
    return atomic_write_json(path, expected)


def write_expected(name: str, parameters: dict[str, Any], rel: float = 1e-3, abs_tol: float = 1e-6,
                   threads: tuple[int, ...] = (1, 4), seed_offsets: tuple[int, ...] = (1,),
                   directory: str | Path | None = None, rel_without_interval: float | None = None) -> Path:
    """Measure and store ``notebooks/expected/<name>.json``: the reference run's numbers, their spread across
    ``threads`` (beside the reference on every core: 1, 2 and 4 on the 2-core machine) and seed offsets, and each
    one's tolerance. Use after a deliberate change (a retrained model, a new metric); the runs go two at a time.

    The stored parameters pin every size the protocol sets (:data:`cfkit.running.reproduce.PROTOCOL`) at the value this
    run used, the notebook's current default where not given: a later change of an interactive default leaves the
    tests' run the same."""
    from .reproduce import PROTOCOL  # lazy: the reproduction imports the zoo and torch

    spec = notebook_parameters(name)
    defaults = literal_defaults(spec)
    pinned = {key: defaults[key] for key in PROTOCOL.get(Path(name).stem, {}) if key in defaults}
    parameters = {**pinned, **parameters}
    seeded = "seed" in spec
    seed = parameters.get("seed", 0)
    plan = [(parameters, None)] + [(parameters, t) for t in threads]
    plan += [({**parameters, "seed": seed + offset}, None) for offset in seed_offsets if seeded]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda job: _run(name, job[0], job[1], Path(tmp)), plan))
    reference, by_threads, by_seed = runs[0], runs[1:1 + len(threads)], runs[1 + len(threads):]
    if not reference:
        raise NotebookFailedError(f"{name} recorded no numbers at {parameters}: nothing to expect.")
    thread_spread, seed_spread = _spread([reference, *by_threads]), _spread([reference, *by_seed])
    expected = {
        "parameters": parameters,
        "tolerance": {"rel": rel, "abs": abs_tol, "rel_without_interval": rel_without_interval,
                      "interval_share": INTERVAL_SHARE, "thread_factor": THREAD_FACTOR},
        "measured": {"threads": [cores(), *threads], "seeds": [seed] + [seed + o for o in seed_offsets if seeded]},
        "values": reference,
        "spread": {"threads": thread_spread, "seeds": seed_spread},
        "tolerances": tolerances(reference, thread_spread, seed_spread, rel, abs_tol, rel_without_interval),
    }
    return atomic_write_json(Path(directory or EXPECTED_DIR) / f"{Path(name).stem}.json", expected)


def mismatches(got: dict[str, float], expected: dict) -> list[str]:
    """Every expected number that ``got`` lacks or misses by more than its tolerance, described; an empty list
    when the run reproduces. Files without per-number tolerances use ``abs + rel·|value|``."""
    base = expected["tolerance"]
    problems = []
    for key, value in expected["values"].items():
        allowed = expected.get("tolerances", {}).get(key, base["abs"] + base["rel"] * abs(value))
        if key not in got:
            problems.append(f"{key}: missing")
        elif not abs(got[key] - value) <= allowed:
            problems.append(f"{key}: got {got[key]:.6g}, expected {value:.6g} ± {allowed:.3g}")
    return problems
