"""The results files: ``results/table.{csv,md,png}``, ``counterfactuals.png`` and ``comparisons.csv``, from the
numbers the metrics notebook recorded."""
from __future__ import annotations

import csv
import io
from pathlib import Path

from ..methods import catalog
from ..paths import RESULTS_DIR, RUNS_DIR, atomic_write_text
from ..scoring import plots
from ..scoring.evaluation import gallery
from ..scoring.store import find_counterfactuals, load_counterfactuals
from ..scoring.table import read_csv, to_markdown, versus, versus_markdown, write_table
from .run import RECORD_FILE, read_record

COMPARISON_COLUMNS = ("metric", "pair", "a", "b", "difference", "lo", "hi", "p_value", "significant")


def collect_table(runs_dir: str | Path | None = None, write: bool = True, results_dir: str | Path | None = None) -> str:
    """The table from the metrics notebook's recorded rows; unless ``write`` is False, written to results/ as
    table.csv, table.md and table.png, with counterfactuals.png: the same queries explained by every method."""
    runs_dir = Path(runs_dir or RUNS_DIR)
    record = read_record(runs_dir / "10_metrics")
    rows, note = record["rows"], record.get("inception_note")
    if write:
        results_dir = Path(results_dir or RESULTS_DIR)
        write_table(rows, results_dir, note)
        if "comparisons" in record:
            write_comparisons(record["comparisons"], results_dir)
        queries, counterfactuals, titles = gallery(runs_dir)
        labelled = {catalog.label(method): images for method, images in counterfactuals.items()}
        plots.save_figure(plots.method_gallery(queries, labelled, titles), results_dir / "counterfactuals.png")
    return to_markdown(rows, note)


def write_comparisons(comparisons: list[dict], results_dir: str | Path) -> Path:
    """``results/comparisons.csv``: every two methods' paired-bootstrap difference in IM1 and FID, per pair and
    on the mean (A − B, its 95 % interval, p-value, whether the interval excludes zero)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, COMPARISON_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(comparisons)
    return atomic_write_text(Path(results_dir) / "comparisons.csv", buffer.getvalue())


VERSUS_FILE = "versus_default.md"
"""In a reference reproduction's results: its table beside the default one (:func:`cfkit.scoring.table.versus`)."""


def write_versus(default_csv: str | Path, results_dir: str | Path) -> Path:
    """``results_dir/versus_default.md``: the mean row of every method in the default table (``default_csv``) and
    in the table just written to ``results_dir``, bold where their 95 % intervals do not overlap."""
    rows = versus(read_csv(default_csv), read_csv(Path(results_dir) / "table.csv"))
    return atomic_write_text(Path(results_dir) / VERSUS_FILE, versus_markdown(rows))


def reproduction_cost(runs_dir: str | Path, notebooks: list[str]) -> dict[str, dict]:
    """What each of ``notebooks`` cost, from what it left under ``runs_dir``, whichever run made it: the method's
    seconds summed over its saved sets (so a pair reused by a resumed run still counts the run that made it), its
    Inception and metric phases from its record, and the devices they ran on. A reproduction run in pieces thus
    still records the whole profile's cost."""
    cost = {}
    for notebook in notebooks:
        folder = Path(runs_dir) / notebook
        if not (folder / RECORD_FILE).is_file():
            continue
        record = read_record(folder)
        phases = {name: record.get("phases", {}).get(name) for name in ("inception", "metrics")}
        made = [load_counterfactuals(path).seconds for path in find_counterfactuals(folder)]
        method = round(sum(s for s in made if s is not None), 1) if made else record.get("phases", {}).get("method")
        entry = {"method": method, **phases}
        cost[notebook] = {**{k: v for k, v in entry.items() if v is not None}, "devices": record.get("devices", {})}
    return cost
