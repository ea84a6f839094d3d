"""A tiny gallery for the tests: a small executed notebook, a copy of results/'s figures and a README section."""
from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import papermill

from cfkit.paths import RESULTS_DIR

TINY = "99_tiny"
TINY_CELLS = [
    ("markdown", "# 99 · A tiny notebook\n\nOne figure, one Markdown table, one printed line."),
    ("code", "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n%matplotlib inline\n"
             "fig, ax = plt.subplots(figsize=(3, 2))\nax.plot([0, 1, 2], [2, 0, 1])\nplt.show()"),
    ("code", "from IPython.display import Markdown, display\n"
             "display(Markdown('| method | IM1 |\\n|---|---|\\n| tiny | 0.5 |'))\nprint('tiny notebook ran')"),
]
README = """# a project

## The table

| method | IM1 ↓ |
|---|---|
| Original Data | 0.867 |

See [the study](notebooks/12_faithfulness.ipynb) and `results/table.md`.

![every metric per method](results/table.png)

## Next section

Not in the gallery.
"""


def tiny_notebook(folder: Path) -> Path:
    """A three-cell notebook executed by papermill into ``folder`` (a figure and a table in its outputs)."""
    source = folder / "source" / f"{TINY}.ipynb"
    source.parent.mkdir(parents=True, exist_ok=True)
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell(text) if kind == "markdown" else nbformat.v4.new_code_cell(text)
                      for kind, text in TINY_CELLS]
    nbformat.write(notebook, source)
    executed = folder / f"{TINY}.ipynb"
    papermill.execute_notebook(str(source), str(executed), kernel_name="python3", progress_bar=False,
                               log_output=False)
    return executed


def results_copy(folder: Path) -> Path:
    """results/'s figures, table.md and benchmark.md, plus an app.png (the app's screenshot when there is one)."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in [*RESULTS_DIR.glob("*.png"), RESULTS_DIR / "table.md", RESULTS_DIR / "benchmark.md"]:
        if path.is_file():
            shutil.copy2(path, folder / path.name)
    if not (folder / "app.png").is_file():
        shutil.copy2(RESULTS_DIR / "counterfactuals.png", folder / "app.png")
    return folder


def readme(folder: Path) -> Path:
    path = folder / "README.md"
    path.write_text(README)
    return path
