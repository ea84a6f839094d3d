"""results/table.png reads at a glance: the paper's IM1 stars sit on the calibrated IM1 panel (the column on the
paper's scale), the reference IM1 panel says it is not on that scale, and `cfkit table --from-csv` redraws the figure
from a written table.csv without runs/."""
from __future__ import annotations

import shutil
from pathlib import Path

import matplotlib.pyplot as plt

from cfkit.methods import catalog
from cfkit.paths import RESULTS_DIR
from cfkit.running.cli import main
from cfkit.scoring import columns, plots, table


def _stars(ax) -> list[float]:
    return [y for line in ax.get_lines() if line.get_marker() == "*" for y in line.get_ydata()]


def test_the_paper_stars_sit_on_the_calibrated_panel() -> None:
    rows = table.read_csv(RESULTS_DIR / "table.csv")
    figure = plots.table_figure(rows)
    panels = {ax.get_title(): ax for ax in figure.axes if ax.get_visible()}
    calibrated, reference = panels[columns.get("im1_calibrated").title], panels[columns.get("im1").title]
    assert sorted(_stars(calibrated)) == sorted(catalog.paper_im1().values())
    assert _stars(reference) == [], "the paper's values are not on the reference IM1's scale"
    notes = {ax.get_title(): [t.get_text() for t in ax.texts] for ax in panels.values()}
    assert any("not on the paper's scale" in t for t in notes[columns.get("im1").title])
    assert any("paper's scale" in t for t in notes[columns.get("im1_calibrated").title])
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert "paper's IM1 (mean)" in legend, legend
    assert [c.name for c in columns.panels() if c.paper_scale] == ["im1_calibrated"]
    plt.close(figure)


def test_the_figure_is_redrawn_from_the_csv(tmp_path: Path, capsys) -> None:
    shutil.copy2(RESULTS_DIR / "table.csv", tmp_path / "table.csv")
    before = (tmp_path / "table.csv").read_bytes()
    assert main(["table", "--from-csv", str(tmp_path / "table.csv")]) == 0
    assert (tmp_path / "table.png").stat().st_size > 10_000
    assert (tmp_path / "table.csv").read_bytes() == before and not (tmp_path / "table.md").exists()
    assert main(["table", "--from-csv", str(tmp_path / "nothing.csv")]) == 2
    assert "make reproduce" in capsys.readouterr().err
