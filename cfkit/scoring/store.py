"""Counterfactual sets on disk: the hand-off between a method's notebook and the metrics.

A set is one method on one pair: ``cfs_<method>_<q>to<t>.pt`` holding the query indices (into the
MNIST test images of the query class), ``x``, ``x_cf``, ``source``, ``target``, ``valid``, the
seconds it took and the fingerprint of the classifier it explains, so any metric can be recomputed
later without re-running the method, and never against another classifier.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from ..common.fingerprint import fingerprint
from ..data import PAIRS
from ..errors import InputError, MissingResultsError
from ..methods import base, catalog
from ..methods.base import CounterfactualMethod, PerPairMethod, Result
from ..paths import atomic_torch_save

PREFIX = "cfs_"
EXTRA_VALUES_PER_QUERY = 1024
"""A result's extras are kept in its set up to this many values a query: per-image statistics (CEM's constants,
LDCE's per-step mask shares), not images (LDCE's decoded trajectory, 34 images a query)."""


@dataclass
class CounterfactualSet:
    method: str
    pair: tuple[int, int]
    query: torch.Tensor
    x: torch.Tensor
    x_cf: torch.Tensor
    source: torch.Tensor
    target: torch.Tensor
    valid: torch.Tensor
    seconds: float | None
    classifier: str  # SHA-256 of the explained classifier's weights (cfkit.common.fingerprint)
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # the method's per-image extras
    run_key: str | None = None  # what made the set (:func:`run_key`); None in sets from before keys were kept

    @property
    def pair_name(self) -> str:
        return f"{self.pair[0]}->{self.pair[1]}"


def set_path(out_dir: str | Path, method: str, pair: tuple[int, int]) -> Path:
    return Path(out_dir) / f"{PREFIX}{method}_{pair[0]}to{pair[1]}.pt"


def save_counterfactuals(
    out_dir: str | Path, method: str, pair: tuple[int, int], query: torch.Tensor, result: Result, classifier: str,
    timed: bool = True, run_key: str | None = None,
) -> Path:
    """Write a method's result for one pair atomically, with the ``classifier`` fingerprint it explains;
    ``timed=False`` leaves seconds empty (reference rows). The method must be in the catalog. The result's tensor
    extras are kept (up to :data:`EXTRA_VALUES_PER_QUERY` values a query), and ``run_key`` (:func:`run_key`) lets a
    resumed run reuse the set."""
    catalog.get(method)
    if not isinstance(classifier, str) or len(classifier) != 64:
        raise InputError(f"classifier must be the explained classifier's SHA-256 fingerprint "
                         f"(cfkit.common.fingerprint), got {classifier!r}.")
    payload = {
        "method": method, "pair": torch.tensor(pair), "query": _own(query), "x": _own(result.x),
        "x_cf": _own(result.x_cf), "source": _own(result.source), "target": _own(result.target),
        "valid": _own(result.valid), "seconds": torch.tensor(result.seconds if timed else float("nan")),
        "classifier": classifier,
        "extras": {k: _own(v) for k, v in result.extras.items()
                   if isinstance(v, torch.Tensor) and v.numel() <= EXTRA_VALUES_PER_QUERY * max(1, len(query))},
    }
    if run_key is not None:
        payload["run_key"] = run_key
    return atomic_torch_save(set_path(out_dir, method, pair), payload)


def run_key(method: CounterfactualMethod, pair: tuple[int, int]) -> str:
    """What a saved set must match for a resumed run to reuse it instead of explaining the pair again: the method,
    its settings and batch size, the source of its module and of the base class, the device type, and the weights
    of every network it holds (the classifier, autoencoders, denoisers, and a per-pair method's model for
    ``pair``)."""
    weights = {name: fingerprint(value) for name, value in sorted(vars(method).items()) if isinstance(value, nn.Module)}
    if isinstance(method, PerPairMethod):
        weights["pair_model"] = fingerprint(method.pair_model(pair))
    code = hashlib.sha256()
    try:
        for module in (inspect.getmodule(type(method)), base):
            code.update(Path(inspect.getsourcefile(module)).read_bytes())
    except (TypeError, OSError):  # a method defined where its source cannot be read: never reused
        code.update(os.urandom(32))
    parts = {"method": method.name, "config": repr(getattr(method, "config", None)), "batch": method.batch_size,
             "device": torch.device(method.device).type, "code": code.hexdigest(), "weights": weights,
             "pair": list(pair)}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def reusable_result(path: str | Path, key: str, query: torch.Tensor) -> Result | None:
    """The saved set at ``path`` as a :class:`Result` when it was made under ``key`` for these ``query`` indices
    (a resumed run takes it instead of explaining again), else None: no file, another key, other queries, or a
    set from before run keys were recorded."""
    if not Path(path).is_file():
        return None
    try:
        saved = load_counterfactuals(path)
    except InputError:  # an unreadable set is made again, never trusted
        return None
    if saved.run_key != key or not torch.equal(saved.query, query.cpu()):
        return None
    return Result(x=saved.x, x_cf=saved.x_cf, source=saved.source, target=saved.target, valid=saved.valid,
                  seconds=float("nan") if saved.seconds is None else saved.seconds, extras=saved.extras)


def _own(tensor: torch.Tensor) -> torch.Tensor:
    """A detached CPU copy holding only its own elements: torch.save writes a view's whole storage, so a set of 4
    queries sliced from the 982 test fours would otherwise carry all of them."""
    return tensor.detach().cpu().clone(memory_format=torch.contiguous_format)


def load_counterfactuals(path: str | Path) -> CounterfactualSet:
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise InputError(f"{path} is not a readable counterfactual set ({exc}); re-run the notebook that wrote it.")
    if "classifier" not in payload:
        raise InputError(f"{path} records no classifier fingerprint: an older cfkit wrote it; re-run the notebook "
                         "that made it.")
    seconds = float(payload["seconds"])
    return CounterfactualSet(
        method=payload["method"], pair=tuple(payload["pair"].tolist()), query=payload["query"], x=payload["x"],
        x_cf=payload["x_cf"], source=payload["source"], target=payload["target"], valid=payload["valid"],
        seconds=None if math.isnan(seconds) else seconds, classifier=payload["classifier"],
        extras=dict(payload.get("extras", {})), run_key=payload.get("run_key"),
    )


def _set_paths(runs_dir: str | Path) -> list[Path]:
    return sorted(Path(runs_dir).glob(f"*/{PREFIX}*.pt")) + sorted(Path(runs_dir).glob(f"{PREFIX}*.pt"))


def _set_method(path: Path) -> str:
    return path.stem[len(PREFIX):].rsplit("_", 1)[0]


def find_counterfactuals(runs_dir: str | Path) -> list[Path]:
    """Every counterfactual set under ``runs_dir`` (one level of notebook folders deep), in table order. Two sets
    of one method and pair are an error, never a silent extra row: the table scores one set of each."""
    paths = _set_paths(runs_dir)
    first: dict[str, Path] = {}
    for path in paths:
        if (other := first.setdefault(path.name, path)) != path:
            raise InputError(f"two sets of {_set_method(path)} for one pair under {runs_dir}: {other} and {path}. "
                             f"The table scores one set a method and pair: move the one that is not the protocol's "
                             f"out of {runs_dir} (a side run writes elsewhere: `cfkit run NOTEBOOK --out DIR` with "
                             "DIR outside it).")

    def key(p: Path) -> tuple[int, int, str]:
        method, pair = p.stem[len(PREFIX):].rsplit("_", 1)
        pair_order = [f"{q}to{t}" for q, t in PAIRS]
        methods = catalog.names()
        return (methods.index(method) if method in methods else len(methods),
                pair_order.index(pair) if pair in pair_order else len(pair_order), p.name)

    return sorted(paths, key=key)


def stray_sets(runs_dir: str | Path) -> list[Path]:
    """Sets under ``runs_dir`` outside their method's notebook folder (and not at its top): a side run that
    scoring the folder would put in the table beside the protocol's set, found before hours are spent."""
    writers = catalog.notebooks()
    return [path for path in _set_paths(runs_dir) if path.parent != Path(runs_dir)
            and path.parent.name != writers.get(_set_method(path))]


def saved_sets(runs_dir: str | Path, methods: Iterable[str], pairs: Iterable[tuple[int, int]]
               ) -> dict[tuple[str, tuple[int, int]], CounterfactualSet]:
    """The saved set of every method and pair, from its catalog notebook's folder under ``runs_dir``; a missing
    one is a clear error naming the notebook that writes it."""
    sets = {}
    for method in methods:
        notebook = catalog.get(method).notebook
        for pair in pairs:
            path = set_path(Path(runs_dir) / notebook, method, pair)
            if not path.is_file():
                raise MissingResultsError(f"no {method} set for {pair[0]}->{pair[1]} at {path}: run "
                                          f"`cfkit run {notebook}` (or `make reproduce`) first.")
            sets[(method, pair)] = load_counterfactuals(path)
    return sets
