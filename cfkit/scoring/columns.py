"""The table's metric columns, declared once: name, label, direction, bounds, format, figure panel, score.

``results/table.csv``, ``table.md``, the table figure, sweeps and comparisons all read :func:`columns`.
A column with a ``score`` is computed by :func:`cfkit.scoring.pairs.evaluate_pair` from a pair's
counterfactuals: a per-image tensor (the column is its mean, the interval resamples images), a
``(numerators, denominators)`` pair (a ratio of sums) or None (left empty, e.g. a model is missing).
Columns without a score (n, FID/KID, timing) are filled by the scoring code itself. A new metric is
one :func:`register` call.
"""
from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..errors import InputError
from .metrics import (MetricModels, agreement_scores, cout_scores, im1_scores, im1_terms, im2_scores, proximity_scores,
                      sparsity_scores)


@dataclass(frozen=True)
class ScoreInput:
    """What a column's score sees: one pair's queries, counterfactuals, their classes and the metric models."""

    x: torch.Tensor
    x_cf: torch.Tensor
    source: torch.Tensor
    target: torch.Tensor
    models: MetricModels


Score = Callable[[ScoreInput], "torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None"]


@dataclass(frozen=True)
class Column:
    """One number of the results table."""

    name: str  # the CSV header and the key of every row
    label: str  # how figures and sweeps title it
    lower_is_better: bool | None = True  # None: neither (a count)
    bounds: tuple[float | None, float | None] = (None, None)  # where it can lie: intervals are clipped to it
    digits: int = 3  # significant places in table.md
    score: Score | None = None  # how it is computed (see the module docstring); None: the scoring code fills it
    interval: bool = True  # has a bootstrap interval (<name>_lo, <name>_hi)
    count: bool = False  # an integer; the mean row sums it
    panel: bool = True  # a panel of the table figure
    log_scale: bool = False  # that panel on a log axis
    share: bool = False  # a fraction of 0 to 1: figures keep the whole [0, 1] scale
    beside: str | None = None  # table.md shows it right after this column (the CSV appends it at the end)
    paper_scale: bool = False  # on the paper's IM1 scale: its panel carries the paper's IM1 as stars
    note: str = ""  # a line under the panel's title (what its scale is)

    @property
    def title(self) -> str:
        """The label with its direction: ``IM1 ↓``."""
        arrow = {True: " ↓", False: " ↑", None: ""}[self.lower_is_better]
        head, _, note = self.label.partition(" (")
        return f"{head}{arrow}" + (f" ({note}" if note else "")


_COLUMNS: dict[str, Column] = {}


def register(column: Column, replace: bool = False) -> Column:
    """Add a column to the table (after the shipped ones); a taken name is an error."""
    if not isinstance(column, Column):
        raise InputError(f"register takes a Column, got {type(column).__name__}.")
    if column.name in _COLUMNS and not replace:
        raise InputError(f"the table already has a column {column.name!r}; pick another name or pass replace=True.")
    _COLUMNS[column.name] = column
    return column


@contextmanager
def registered(column: Column) -> Iterator[Column]:
    """The column in the table for the duration of a ``with`` block."""
    register(column)
    try:
        yield column
    finally:
        _COLUMNS.pop(column.name, None)


def columns() -> list[Column]:
    """Every column, in CSV order."""
    return list(_COLUMNS.values())


def get(name: str) -> Column:
    if name not in _COLUMNS:
        raise InputError(f"no column {name!r}; the table has {', '.join(_COLUMNS)}.")
    return _COLUMNS[name]


def interval_columns() -> list[str]:
    """``<metric>_lo``, ``<metric>_hi`` for every column with an interval: the CSV's last columns."""
    return [f"{c.name}_{side}" for c in columns() if c.interval for side in ("lo", "hi")]


def header() -> list[str]:
    """The CSV header: method, pair, every column, then the intervals."""
    return ["method", "pair", *(c.name for c in columns()), *interval_columns()]


def display_order() -> list[Column]:
    """The columns as table.md and the figure show them: each column followed by those ``beside`` it."""
    unknown = [c for c in columns() if c.beside is not None and c.beside not in _COLUMNS]
    if unknown:
        raise InputError(f"column {unknown[0].name!r} is to be shown beside {unknown[0].beside!r}, which is not a "
                         f"column; the columns are {', '.join(_COLUMNS)}.")
    order: list[Column] = []

    def place(column: Column) -> None:
        order.append(column)
        for neighbour in columns():
            if neighbour.beside == column.name:
                place(neighbour)

    for column in columns():
        if column.beside is None:
            place(column)
    return order


def panels() -> list[Column]:
    """The table figure's panels, in display order."""
    return [c for c in display_order() if c.panel]


def lower_is_better() -> set[str]:
    return {c.name for c in columns() if c.lower_is_better}


def shares() -> set[str]:
    return {c.name for c in columns() if c.share}


def digest() -> str:
    """What the columns compute (names and score code): a changed or added metric never reuses a cached score."""
    sha = hashlib.sha256()
    for column in columns():
        sha.update(repr((column.name, column.bounds, column.interval)).encode())
        if column.score is not None:
            try:
                sha.update(inspect.getsource(column.score).encode())
            except (OSError, TypeError):
                sha.update(column.score.__qualname__.encode())
    return sha.hexdigest()


def _calibrated_im1(s: ScoreInput) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None:
    """IM1 with the calibrated autoencoders, aggregated as the calibration study chose (mean or ratio of sums)."""
    if s.models.calibrated is None:
        return None
    terms = im1_terms(s.x_cf, s.target, s.source, s.models.calibrated)
    return terms if s.models.calibrated_aggregation == "sum" else im1_scores(s.x_cf, s.target, s.source,
                                                                           s.models.calibrated)


def _calibrated_im2(s: ScoreInput) -> torch.Tensor | None:
    return None if s.models.calibrated is None else im2_scores(s.x_cf, s.target, s.models.calibrated, s.models.ae_all)


_NON_NEGATIVE, _FRACTION = (0, None), (0, 1)
for _column in (
    Column("n", "n", None, interval=False, count=True, panel=False),
    Column("im1", "IM1", bounds=_NON_NEGATIVE,
           note="reference autoencoders: not on the paper's scale (★ → calibrated)",
           score=lambda s: im1_scores(s.x_cf, s.target, s.source, s.models.autoencoders)),
    Column("im2", "IM2", bounds=_NON_NEGATIVE,
           score=lambda s: im2_scores(s.x_cf, s.target, s.models.autoencoders, s.models.ae_all)),
    Column("fid", "FID (kit features)", bounds=_NON_NEGATIVE),
    Column("kid", "KID (kit features)", digits=4),  # an unbiased estimate: can be negative
    Column("validity", "validity", False, _FRACTION, share=True,
           score=lambda s: agreement_scores(s.models.classifier, s.x_cf, s.target).double()),
    Column("oracle_agreement", "oracle agreement", False, _FRACTION, share=True,
           score=lambda s: agreement_scores(s.models.oracle, s.x_cf, s.target).double()),
    Column("proximity", "proximity (mean |x′−x|)", True, _FRACTION, score=lambda s: proximity_scores(s.x, s.x_cf)),
    Column("sparsity", "sparsity (share > 0.1)", True, _FRACTION, share=True,
           score=lambda s: sparsity_scores(s.x, s.x_cf)),
    Column("cout", "COUT", False, (-1, 1),
           score=lambda s: cout_scores(s.models.classifier, s.x, s.x_cf, s.source, s.target)),
    Column("seconds_per_cf", "seconds per CF (log)", True, interval=False, log_scale=True),
    Column("n_inception", "n (Inception)", None, interval=False, count=True, panel=False, beside="kid"),
    Column("fid_inception", "FID (Inception, first n)", bounds=_NON_NEGATIVE, beside="n_inception"),
    Column("kid_inception", "KID (Inception, first n)", digits=4, beside="fid_inception"),
    Column("im1_calibrated", "IM1 (calibrated autoencoders)", bounds=_NON_NEGATIVE, beside="im1_sum",
           paper_scale=True, note="on the paper's scale: ★ the paper's IM1", score=_calibrated_im1),
    Column("im2_calibrated", "IM2 (calibrated autoencoders)", bounds=_NON_NEGATIVE, panel=False, beside="im2",
           score=_calibrated_im2),
    Column("im1_sum", "IM1 (ratio of sums)", bounds=_NON_NEGATIVE, beside="im1",
           score=lambda s: im1_terms(s.x_cf, s.target, s.source, s.models.autoencoders)),
):
    register(_column)
