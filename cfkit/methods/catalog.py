"""The method catalog: every method the kit saves, scores, tables, plots and benchmarks, declared once.

An entry says what the method is called in the table, how to build it for a classifier with the
settings its notebook uses, which notebook makes its sets, the paper's IM1 and whether it needs a
model trained per (query, target) pair. Everything that lists methods (the store's order, the
table's labels, the figure, the reproduction, the benchmark, the tests) reads :func:`entries`.

A method added at run time is one :func:`register` call; a module that registers methods can be
named in ``CFKIT_PLUGINS`` (comma-separated) so that child processes (notebook kernels, the
benchmark's workers) see it too.
"""
from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from torch import nn

from ..errors import CfkitError, InputError
from ..zoo.checkpoints import load
from .adversarial import ATTACK_KIT, AdversarialAttack, AttackConfig
from .base import CounterfactualMethod
from .c3lt import C3LT
from .cem import CEM, CEMConfig
from .cve import CVE, CVE_KIT
from .expgan import ExpGAN
from .ldce import LDCE, LDCEConfig
from .original import OriginalData

PLUGINS_VARIABLE = "CFKIT_PLUGINS"
"""Environment variable: modules imported when the catalog loads, each registering its methods or metrics."""


@dataclass(frozen=True)
class MethodEntry:
    """One method of the table: its class and everything the rest of the kit needs to know about it."""

    method: type[CounterfactualMethod]
    label: str  # how the table and figures name it
    build: Callable[..., CounterfactualMethod] | None = None  # build(classifier, **options) at its notebook's defaults
    notebook: str | None = None  # the notebook that saves its counterfactual sets (None: run_method by hand)
    paper_im1: float | None = None  # IM1 on MNIST in Khorram & Fuxin (CVPR 2022), Table 1
    per_pair: bool = False  # needs a model trained for each (query, target) pair
    reference: bool = False  # a reference row (real data), not an explanation method: never benchmarked
    quick: Callable[..., CounterfactualMethod] | None = None
    """A cheap setting of the same algorithm that still reaches the target (validity >= 0.9 on real digits): what
    the contract test and quick demos run. None: the notebook's setting is cheap enough."""

    @property
    def name(self) -> str:
        """The key of its saved sets and table rows: the method class's ``name``."""
        return self.method.name

    def make(self, classifier: nn.Module, **options: Any) -> CounterfactualMethod:
        """The method for ``classifier`` with the settings its notebook uses; ``options`` go to the method (device,
        batch_size, a per-pair method's pair_dir, …)."""
        return (self.build or self.method)(classifier, **options)

    def make_quick(self, classifier: nn.Module, **options: Any) -> CounterfactualMethod:
        """The method at its :attr:`quick` setting (its notebook's when it has none)."""
        return (self.quick or self.build or self.method)(classifier, **options)


_ENTRIES: dict[str, MethodEntry] = {}


def register(entry: MethodEntry, replace: bool = False) -> MethodEntry:
    """Add a method to the catalog (after the shipped ones, in table order); a taken name is an error."""
    if not isinstance(entry, MethodEntry):
        raise InputError(f"register takes a MethodEntry, got {type(entry).__name__}.")
    if entry.name in _ENTRIES and not replace:
        raise InputError(f"a method named {entry.name!r} is already in the catalog; pick another `name` for "
                         f"{entry.method.__name__} or pass replace=True.")
    _ENTRIES[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Take a method out of the catalog (a test's run-time method, say)."""
    get(name)
    del _ENTRIES[name]


@contextmanager
def registered(entry: MethodEntry) -> Iterator[MethodEntry]:
    """The method in the catalog for the duration of a ``with`` block."""
    register(entry)
    try:
        yield entry
    finally:
        _ENTRIES.pop(entry.name, None)


def entries() -> list[MethodEntry]:
    """Every method, in table order (the real-data reference first)."""
    _load_plugins()
    return list(_ENTRIES.values())


def names() -> list[str]:
    return [entry.name for entry in entries()]


def get(name: str) -> MethodEntry:
    """The entry of ``name``; an error listing the known methods when there is none."""
    _load_plugins()
    if name not in _ENTRIES:
        raise InputError(f"unknown method {name!r}; the catalog knows {', '.join(_ENTRIES)}. A new method is "
                         "registered with cfkit.methods.catalog.register (README: How to add a method).")
    return _ENTRIES[name]


def cannot_explain(entry: MethodEntry, classifier: nn.Module) -> str | None:
    """Why ``entry``'s method cannot explain ``classifier`` (the error of building it at its notebook's settings: a
    model CVE cannot split, one without an input gradient, …), or None when it can. A per-pair method's models are
    not looked at: they are trained for one classifier (``cfkit train … --classifier``)."""
    if entry.per_pair:
        return None
    try:
        entry.make(classifier)
    except CfkitError as exc:
        return " ".join(str(exc).split())
    return None


def labels() -> dict[str, str]:
    """Method name -> table label, in table order."""
    return {entry.name: entry.label for entry in entries()}


def paper_im1() -> dict[str, float]:
    """Method name -> the paper's IM1, for the methods the paper ran."""
    return {entry.name: entry.paper_im1 for entry in entries() if entry.paper_im1 is not None}


def notebooks() -> dict[str, str]:
    """Method name -> the notebook that makes its sets (methods without a notebook left out)."""
    return {entry.name: entry.notebook for entry in entries() if entry.notebook is not None}


def label(name: str) -> str:
    """A method's table label; an unknown name is shown as it is (a set from an older catalog, say)."""
    return labels().get(name, name)


_loaded_plugins: set[str] = set()


def _load_plugins() -> None:
    """Import the modules named in ``CFKIT_PLUGINS`` once each: they register their methods and metrics."""
    for module in filter(None, (m.strip() for m in os.environ.get(PLUGINS_VARIABLE, "").split(","))):
        if module in _loaded_plugins:
            continue
        _loaded_plugins.add(module)
        try:
            importlib.import_module(module)
        except ImportError as exc:
            _loaded_plugins.discard(module)
            raise InputError(f"{PLUGINS_VARIABLE} names {module!r}, which cannot be imported ({exc}); fix the "
                             "module name or unset the variable.") from exc


for _entry in (
    MethodEntry(OriginalData, "Original Data", notebook="10_metrics", paper_im1=0.47, reference=True),
    # the attack and CVE quick at the kit's first settings: their references often do not flip (notebook 12)
    MethodEntry(AdversarialAttack, "Adv. Attack", notebook="01_adversarial", paper_im1=1.02,
                quick=lambda c, **o: AdversarialAttack(c, AttackConfig(radius=ATTACK_KIT.radius, steps=40), **o)),
    MethodEntry(CEM, "CEM", lambda c, **o: CEM(c, load("ae_all"), **o), "02_cem", paper_im1=1.68,
                quick=lambda c, **o: CEM(c, load("ae_all"), CEMConfig(iterations=15, search_steps=2), **o)),
    MethodEntry(CVE, "CVE", notebook="03_cve", paper_im1=1.44, quick=lambda c, **o: CVE(c, CVE_KIT, **o)),
    MethodEntry(ExpGAN, "ExpGAN", notebook="04_expgan", paper_im1=0.72, per_pair=True),
    MethodEntry(C3LT, "C3LT", notebook="05_c3lt", paper_im1=0.70, per_pair=True),
    MethodEntry(LDCE, "LDCE", notebook="06_ldce",  # not run on MNIST before: no paper figure
                quick=lambda c, **o: LDCE(c, LDCEConfig(steps=20), **o)),
):
    register(_entry)
