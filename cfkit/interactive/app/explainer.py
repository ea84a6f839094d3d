"""The explorer's logic, no browser: the classifier and the metric models loaded once, methods built once per setting,
which methods can explain a (source, target) pair (and why the others cannot), fastest-first order, and one panel's
numbers.

Every catalog method runs on the pair at the active one of :data:`SETTINGS`: ``quick``, the default, is each method's
catalog quick setting (the cheap setting of the same algorithm: one query through every method in about 2-3 s on 2
cores); ``table`` is the settings of the results table and the method notebooks (slower). Methods run fastest first
by measured latency. A panel holds the counterfactual, the Integrated Gradients attribution of the change, the
classifier's probabilities, validity, the oracle's verdict, proximity, the calibrated IM1, the seconds it took and
the setting it ran at. Per-pair methods (C3LT, ExpGAN) explain their trained pairs only; for the others
:class:`Availability` gives the reason and the command that trains one.
"""
from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ...data import load_mnist
from ...errors import CfkitError, CheckpointError, InputError
from ...methods import catalog
from ...methods.attributions import counterfactual_attribution
from ...methods.base import CounterfactualMethod, PerPairMethod
from ...paths import CHECKPOINT_DIR, RESULTS_DIR
from ...scoring import columns as table_columns
from ...scoring.metrics import MetricModels, per_image_ratios
from ...zoo.checkpoints import parse_pair_name, read_manifest
from ...zoo.classifiers import DEFAULT, load_classifier
from ..drawing import mnist_preprocess, rasterise

PANEL_COLUMNS = ("validity", "oracle_agreement", "proximity", "im1_calibrated")
"""The table's columns each panel shows, computed by the columns' own score functions on the one image."""
IG_STEPS = 32
"""Integrated Gradients steps of the attribution of the change."""
SETTINGS = {
    "quick": "each method's catalog quick setting: the same algorithm, cheaper (e.g. LDCE 7 of 20 DDIM steps, CEM "
             "2×15 iterations), one query through every method in under a second",
    "table": "the settings of the results table and the method notebooks, as make reproduce runs them (e.g. LDCE 34 "
             "of 100 DDIM steps, CEM 3×40 iterations), one query through every method in about 2 s",
}
"""The settings the app can build the methods at, with what each one is."""
DEFAULT_SETTING = "table"
"""The table's settings: a warm query through all six methods took 1.83 s at them and 0.77 s at the quick ones on
2 idle cores (``benchmarks/app_latency.py``, results/benchmark.md), both "a few seconds", so the app shows by default
what the setting behind the table's numbers does to a digit."""


@dataclass
class Panel:
    """One method's explanation of the query, with what the app shows of it."""

    name: str
    label: str
    x: torch.Tensor  # (1, 1, 28, 28)
    x_cf: torch.Tensor  # (1, 1, 28, 28)
    source: int
    target: int
    probabilities: torch.Tensor  # (10,) the classifier's, on the counterfactual
    valid: bool
    oracle_class: int
    scores: dict[str, float]  # PANEL_COLUMNS' values for this image
    attribution: torch.Tensor  # (1, 1, 28, 28) IG of the change toward the target
    seconds: float  # the method's own explain time
    timings: dict[str, float] = field(default_factory=dict)  # method, scores, attribution, draw: wall seconds
    setting: str = DEFAULT_SETTING  # the SETTINGS key the method ran at


@dataclass(frozen=True)
class Availability:
    """Whether a catalog method can explain a (source, target) pair here; ``reason`` says why not."""

    entry: catalog.MethodEntry
    reason: str | None = None

    @property
    def enabled(self) -> bool:
        return self.reason is None


def explained_entries() -> list[catalog.MethodEntry]:
    """The catalog's explanation methods (the real-data reference left out)."""
    return [entry for entry in catalog.entries() if not entry.reference]


def seeded_latencies(table: str | Path | None = None) -> dict[str, float]:
    """Each method's seconds per counterfactual from the results table's mean rows: the order of the first query,
    before the app has measured anything (empty when there is no table)."""
    from ...scoring.table import read_csv

    path = Path(table or RESULTS_DIR / "table.csv")
    if not path.is_file():
        return {}
    return {row["method"]: row["seconds_per_cf"] for row in read_csv(path)
            if row["pair"] == "mean" and row.get("seconds_per_cf") is not None}


def fastest_first(names: list[str], latencies: dict[str, float]) -> list[str]:
    """``names`` by latency, unmeasured ones last in their given order."""
    return sorted(names, key=lambda name: (latencies.get(name, math.inf), names.index(name)))


def check_setting(setting: str) -> str:
    """``setting`` when it is one of :data:`SETTINGS`; else an :class:`InputError` naming them."""
    if not isinstance(setting, str) or setting not in SETTINGS:
        raise InputError(f"unknown setting {setting!r}: the methods run at the {' or the '.join(map(repr, SETTINGS))} "
                         "settings.")
    return setting


def trained_pairs(family: str, pair_dir: str | Path | None = None) -> list[tuple[int, int]]:
    """The (query, target) pairs a per-pair family has a checkpoint for in ``pair_dir`` (default: the zoo)."""
    folder = Path(pair_dir or CHECKPOINT_DIR)
    pairs = []
    for name in read_manifest(folder):
        parsed = parse_pair_name(name)
        if parsed is not None and parsed[0] == family and (folder / f"{name}.pt").is_file():
            pairs.append(parsed[1])
    return pairs


def check_target(source: int, target: int) -> int:
    """The target as an int; an :class:`InputError` naming the fix when it is no digit or the predicted class."""
    if isinstance(target, bool) or not isinstance(target, (int, np.integer)) or not 0 <= target <= 9:
        raise InputError(f"the target must be a digit 0-9, got {target!r}.")
    if int(target) == int(source):
        raise InputError(f"the classifier already calls this digit a {source}: a counterfactual changes its class, "
                         "so pick another target digit.")
    return int(target)


def check_message(source: int, target: int) -> str:
    """What :func:`check_target` says about ``target`` ("" when it is a fine target)."""
    try:
        check_target(source, target)
    except InputError as error:
        return str(error)
    return ""


class Explainer:
    """The app's logic: the classifier and the metric models loaded once, methods built once per setting, run
    fastest first.

    ``classifier`` (and ``classifier_state``) as in :func:`cfkit.zoo.classifiers.load_classifier`; ``pair_dir``: per-pair
    models for it (``cfkit train c3lt --pair Q T --classifier ... --out DIR``). A classifier that cannot be loaded
    is a :class:`~cfkit.errors.CfkitError` with the fix.

    ``setting`` (a :data:`SETTINGS` key, changeable later) is what :meth:`method` builds the methods at; each method is
    built once per setting. Latencies are kept per setting. Both settings are seeded with ``latencies`` (default: the
    results table's seconds per counterfactual, measured at the table setting): for ``quick`` too, because the table's
    order (the per-pair generators, then CVE, the attack, CEM and LDCE) is nearly the order the app measures at the
    quick setting (results/benchmark.md), a better first order than the catalog's. A seed only orders the first query: a
    method's first measurement at a setting replaces it (it is batch seconds per counterfactual, not a panel's wall
    time), later ones are averaged in (:meth:`measured`).
    """

    def __init__(self, classifier: str | nn.Module = DEFAULT, classifier_state: str | None = None,
                 pair_dir: str | Path | None = None, device: str = "cpu",
                 latencies: dict[str, float] | None = None, setting: str = DEFAULT_SETTING) -> None:
        self.setting = setting
        self.classifier_name = classifier if isinstance(classifier, str) else type(classifier).__name__
        self.device = device
        self.classifier = load_classifier(classifier, classifier_state, device=device)
        self.models = MetricModels.from_zoo(device=device, inception=False, classifier=self.classifier)
        self.pair_dir = None if pair_dir in (None, "") else Path(pair_dir)
        seeds = seeded_latencies() if latencies is None else latencies
        self.latencies_by_setting = {key: dict(seeds) for key in SETTINGS}
        self._seeded = {key: set(seeds) for key in SETTINGS}  # the names whose latency is still the seed
        self._methods: dict[tuple[str, str], CounterfactualMethod] = {}
        self._test: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def setting(self) -> str:
        """The :data:`SETTINGS` key the next query's methods run at; anything else is an :class:`InputError`."""
        return self._setting

    @setting.setter
    def setting(self, value: str) -> None:
        self._setting = check_setting(value)

    def _resolve(self, setting: str | None) -> str:
        """``setting`` checked, or the active one when it is None."""
        return self.setting if setting is None else check_setting(setting)

    @property
    def latencies(self) -> dict[str, float]:
        """Seconds per method at the active setting (the dict itself: the order of the next query)."""
        return self.latencies_by_setting[self.setting]

    # queries
    def test_digits(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The MNIST test images and labels (loaded once)."""
        if self._test is None:
            self._test = load_mnist("test")
        return self._test

    def test_digit(self, digit: int, index: int) -> torch.Tensor:
        """The ``index``-th test image of class ``digit`` as (1, 1, 28, 28)."""
        x, y = self.test_digits()
        rows = (y == digit).nonzero().flatten()
        if not 0 <= index < len(rows):
            raise InputError(f"there are {len(rows)} test digits of class {digit}: pick an index from 0 to "
                             f"{len(rows) - 1}.")
        return x[rows[index]][None]

    def count(self, digit: int) -> int:
        return int((self.test_digits()[1] == digit).sum())

    @staticmethod
    def drawn_digit(strokes: list) -> torch.Tensor:
        """Mouse strokes as an MNIST digit (1, 1, 28, 28); a blank drawing is an :class:`InputError`."""
        return mnist_preprocess(rasterise(strokes))

    @torch.inference_mode()
    def probabilities(self, x: torch.Tensor) -> torch.Tensor:
        """The classifier's ten probabilities for one image."""
        return torch.softmax(self.classifier(x.to(self.device)), 1)[0].cpu()

    # methods
    def availability(self, source: int, target: int, setting: str | None = None) -> list[Availability]:
        """Every explanation method of the catalog, with the reason it cannot explain source→target here at
        ``setting`` (default: the active one)."""
        return [Availability(entry, self._unavailable(entry, source, target, setting))
                for entry in explained_entries()]

    def _unavailable(self, entry: catalog.MethodEntry, source: int, target: int, setting: str | None) -> str | None:
        try:
            method = self.method(entry.name, setting)
        except CfkitError as error:  # e.g. CVE needs .features and .head, which a TorchScript model may lack
            return f"cannot be built for this classifier: {error}"
        if not entry.per_pair or not issubclass(entry.method, PerPairMethod):
            return None
        family = entry.method.family
        pairs = trained_pairs(family, self.pair_dir)
        if (source, target) not in pairs:
            shown = ", ".join(f"{q}→{t}" for q, t in pairs) or "no pair"
            where = f" in {self.pair_dir}" if self.pair_dir else ""
            return (f"needs a model trained per pair; trained for {shown} only{where}. Train this one: "
                    f"cfkit train {family} --pair {source} {target}")
        try:
            method.pair_model((source, target))
        except CheckpointError as error:
            return f"{error} (then: cfkit app --pair-dir <folder>)"
        return None

    def method(self, name: str, setting: str | None = None) -> CounterfactualMethod:
        """The method ``name`` for this classifier at ``setting`` (default: the active one): the catalog's quick
        setting (``entry.make_quick``) or the table's (``entry.make``, its notebook's), built once per setting."""
        setting = self._resolve(setting)
        if (name, setting) not in self._methods:
            entry = catalog.get(name)
            options = {"device": self.device}
            if entry.per_pair:
                options["pair_dir"] = self.pair_dir
            build = entry.make if setting == "table" else entry.make_quick
            self._methods[name, setting] = build(self.classifier, **options)
        return self._methods[name, setting]

    def order(self, names: list[str], setting: str | None = None) -> list[str]:
        """``names`` fastest first, by what the app has measured at ``setting`` (default: the active one; seeded
        from the results table)."""
        setting = self._resolve(setting)
        return fastest_first(names, self.latencies_by_setting[setting])

    def measured(self, name: str, seconds: float, setting: str | None = None) -> None:
        """Record a panel's wall time at ``setting`` (default: the active one): the next query at that setting orders
        by it (the first measurement replaces the seed, later ones are the mean of the last and this one)."""
        setting = self._resolve(setting)
        latencies, seeded = self.latencies_by_setting[setting], self._seeded[setting]
        previous = None if name in seeded else latencies.get(name)
        seeded.discard(name)
        latencies[name] = seconds if previous is None else (previous + seconds) / 2

    def explain(self, name: str, x: torch.Tensor, source: int, target: int, setting: str | None = None) -> Panel:
        """One method's counterfactual of ``x`` toward ``target`` at ``setting`` (default: the active one) and
        everything its panel shows."""
        target = check_target(source, target)
        setting = self._resolve(setting)
        timings = {}
        start = time.perf_counter()
        method = self.method(name, setting)
        result = method.explain(x, target, source=torch.tensor([source]))
        timings["method"] = time.perf_counter() - start
        start = time.perf_counter()
        x_cf = result.x_cf
        with torch.inference_mode():
            probabilities = torch.softmax(self.classifier(x_cf.to(self.device)), 1)[0].cpu()
            oracle_class = int(self.models.oracle(x_cf.to(self.device)).argmax(1))
        scores = self.scores(x, x_cf, source, target)
        timings["scores"] = time.perf_counter() - start
        start = time.perf_counter()
        attribution = counterfactual_attribution(self.classifier, x.to(self.device), x_cf.to(self.device), target,
                                                 steps=IG_STEPS).cpu()
        timings["attribution"] = time.perf_counter() - start
        return Panel(name, catalog.label(name), x, x_cf, source, target, probabilities, bool(result.valid[0]),
                     oracle_class, scores, attribution, result.seconds, timings, setting)

    def scores(self, x: torch.Tensor, x_cf: torch.Tensor, source: int, target: int) -> dict[str, float]:
        """:data:`PANEL_COLUMNS` for one counterfactual, by the table columns' own score functions."""
        given = table_columns.ScoreInput(x, x_cf, torch.tensor([source]), torch.tensor([target]), self.models)
        values = {}
        for name in PANEL_COLUMNS:
            score = table_columns.get(name).score(given)
            if isinstance(score, tuple):  # a ratio of sums: for one image, its ratio
                score = per_image_ratios(*score)
            values[name] = math.nan if score is None else float(score[0])
        return values

    def run(self, x: torch.Tensor, target: int, setting: str | None = None) -> Iterator[Availability | Panel]:
        """Explain ``x`` (classed by the classifier) toward ``target`` at ``setting`` (default: the active one as it
        is when the run starts): first every unavailable method's :class:`Availability`, then each available one's
        :class:`Panel`, fastest first, as each finishes."""
        setting = self._resolve(setting)
        source = int(self.probabilities(x).argmax())
        target = check_target(source, target)
        available = []
        for item in self.availability(source, target, setting):
            if item.enabled:
                available.append(item.entry.name)
            else:
                yield item
        for name in self.order(available, setting):
            start = time.perf_counter()
            try:
                panel = self.explain(name, x, source, target, setting)
            except Exception as error:  # one method's failure (a user's classifier, say) leaves the others running
                detail = str(error) if isinstance(error, CfkitError) else f"{type(error).__name__}: {error}"
                yield Availability(catalog.get(name), f"failed on this query: {detail}")
                continue
            self.measured(name, time.perf_counter() - start, setting)
            yield panel
