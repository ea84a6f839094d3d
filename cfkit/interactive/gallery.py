"""The rendered gallery (`make docs`, `cfkit docs`): a static HTML site of the findings, readable without running
anything.

Its pages: an index with the README's table section (or ``results/table.md``) and every figure of ``results/``, a
page per notebook as executed by the last `make reproduce` (``results/notebooks/``, outputs included; nothing is
re-executed) and the benchmark page. :func:`build` assembles them in a staging folder and runs Sphinx with myst-nb
(execution off) and the configuration in ``docs/``; it builds offline and its pages load nothing from the internet.
"""
from __future__ import annotations

import html.parser
import re
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

from ..errors import CfkitError, InputError
from ..paths import RESULTS_DIR, ROOT

CONF_DIR = Path(__file__).resolve().parents[2] / "docs"
"""Sphinx's configuration (conf.py, _static/): part of the checkout, like the notebooks."""
BUILD_DIR = CONF_DIR / "_build"
NOTEBOOKS_DIR = RESULTS_DIR / "notebooks"
"""Where `make reproduce` leaves each notebook as it executed it: the gallery's default source."""
TABLE_HEADING = "## The table"
_MARKER = ".cfkit-gallery"  # marks a staging folder as ours, so a rebuild may clear it
FIGURES = {  # a figure of results/: its heading and caption on the index (any other PNG is shown by its name)
    "table.png": ("The table at a glance", "Every metric per method: bars are the mean over pairs, markers each "
                  "pair, red stars the paper's IM1 (on the calibrated IM1 panel, the one on its scale)."),
    "counterfactuals.png": ("The same queries, every method", "The same queries explained by every method."),
    "faithfulness.png": ("Are the baselines faithful?", "Each method's metrics over its budget: the kit's setting "
                         "and the reference (12_faithfulness)."),
    "im_calibration.png": ("IM1 calibration", "The IM1/IM2 autoencoder calibration study (`cfkit calibrate`)."),
    "app.png": ("The explorer app", "The explorer app (`make app`): any digit, any target, every method."),
}


def executed_notebooks(folder: str | Path | None = None) -> list[Path]:
    """The executed notebooks to render, by name; an error that says how to get them when there are none."""
    folder = Path(folder or NOTEBOOKS_DIR)
    found = sorted(folder.glob("*.ipynb")) if folder.is_dir() else []
    if not found:
        raise InputError(f"no executed notebooks in {folder}: run `make reproduce` first (it keeps every notebook as "
                         "executed there), or pass --notebooks DIR with papermill outputs (`cfkit run NB --out DIR`).")
    return found


def table_section(readme: Path, results: Path) -> str:
    """The README's "The table" section (up to the next level-2 heading); else results/table.md under that
    heading; else a line saying the table is missing."""
    text = readme.read_text() if readme.is_file() else ""
    start = text.find(f"\n{TABLE_HEADING}\n")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        return text[start + 1:end if end >= 0 else len(text)].strip() + "\n"
    table = results / "table.md"
    body = table.read_text() if table.is_file() else "No table yet: `make reproduce` writes results/table.md."
    return f"{TABLE_HEADING}\n\n{body.strip()}\n"


def _localise(markdown: str, results: Path, figures: Path) -> tuple[str, set[str]]:
    """Images of results/ point at the staged figures/ (copied there); other relative links become their text.
    Returns the markdown and the names of the figures it shows."""
    shown: set[str] = set()

    def image(match: re.Match) -> str:
        alt, target = match.group(1), match.group(2)
        name = Path(target).name
        if target.startswith("results/") and (results / name).is_file():
            shutil.copy2(results / name, figures / name)
            shown.add(name)
            return _figure(name, alt or FIGURES.get(name, (name, name))[1])
        return alt

    def link(match: re.Match) -> str:
        text, target = match.group(1), match.group(2)
        return match.group(0) if re.match(r"^(https?:|mailto:|#)", target) else text

    markdown = re.sub(r"!\[([^\]]*)\]\(([^)\s]+)\)", image, markdown)
    return re.sub(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)", link, markdown), shown


def _figure(name: str, caption: str) -> str:
    """A MyST figure of figures/<name>, scaled to the column, a click away from its full size."""
    return f"```{{figure}} figures/{name}\n:alt: {caption}\n:target: _images/{name}\n\n{caption}\n```"


def _title(notebook: Path) -> str:
    import nbformat

    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return notebook.stem


def stage(notebooks: list[Path], staging: Path, results: Path, readme: Path) -> Path:
    """Write the site's source into ``staging`` (cleared first): index.md, figures/, notebooks/, benchmark.md."""
    if staging.exists():
        if not (staging / _MARKER).is_file():
            raise InputError(f"{staging} exists and is not a gallery staging folder; pick another --out.")
        shutil.rmtree(staging)
    figures = staging / "figures"
    (staging / "notebooks").mkdir(parents=True)
    figures.mkdir()
    (staging / _MARKER).write_text("staging folder of `cfkit docs`: rewritten by every build\n")
    for notebook in notebooks:
        shutil.copy2(notebook, staging / "notebooks" / notebook.name)
    table, shown = _localise(table_section(readme, results), results, figures)
    rest = [path for path in sorted(results.glob("*.png")) if path.name not in shown]
    for path in rest:
        shutil.copy2(path, figures / path.name)
    pages = [f"notebooks/{notebook.stem}" for notebook in notebooks]
    if (results / "benchmark.md").is_file():
        shutil.copy2(results / "benchmark.md", staging / "benchmark.md")
        pages.append("benchmark")
    listing = "\n".join(f"- [{_title(notebook)}](notebooks/{notebook.stem}.ipynb)" for notebook in notebooks)
    figure_section = "\n\n".join(f"### {heading}\n\n{_figure(path.name, caption)}" for path in rest
                                 for heading, caption in [FIGURES.get(path.name, (path.stem, path.name))])
    index = [
        "# cfkit: the rendered gallery",
        "Counterfactual explanations of one MNIST classifier, scored on the C3LT protocol. Every page shows the "
        "notebooks as the last `make reproduce` executed them, with their outputs; nothing was run to build this "
        "site (`make docs`).",
        "## The notebooks",
        listing + ("\n- [Benchmarks](benchmark.md)" if "benchmark" in pages else ""),
        table.strip(),
    ]
    if figure_section:
        index += ["## More figures", figure_section]
    index.append("```{toctree}\n:hidden:\n:maxdepth: 1\n\n" + "\n".join(pages) + "\n```")
    (staging / "index.md").write_text("\n\n".join(index) + "\n")
    return staging


def build(notebooks: str | Path | None = None, out: str | Path | None = None, results: str | Path | None = None,
          readme: str | Path | None = None) -> Path:
    """Build the gallery into ``out`` (default docs/_build/html) from the executed notebooks (default
    results/notebooks/); return its index.html. The staging folder is ``<out>-source`` beside it."""
    found = executed_notebooks(notebooks)
    missing = [module for module in ("sphinx", "myst_nb", "pydata_sphinx_theme") if find_spec(module) is None]
    if missing:
        raise InputError(f"the gallery needs the docs extra ({', '.join(missing)} missing): "
                         "pip install -e '.[docs]' (`make docs` does).")
    out = Path(out or BUILD_DIR / "html").resolve()
    if out.exists() and any(out.iterdir()):
        if not (out / ".buildinfo").is_file():
            raise InputError(f"{out} is not empty and not a Sphinx build; pick another --out.")
        shutil.rmtree(out)  # no page of an earlier build's notebooks stays behind
    staging = stage(found, out.with_name(out.name + "-source"), Path(results or RESULTS_DIR),
                    Path(readme or ROOT / "README.md"))
    built = staging / "_build" / "html"  # myst-nb writes its jupyter_execute/ beside it: inside the staging folder
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E", "-c", str(CONF_DIR),
               "-d", str(built.parent / "doctrees"), str(staging), str(built)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise CfkitError(f"sphinx-build failed ({' '.join(command)}):\n{(done.stdout + done.stderr)[-4000:]}")
    if done.stderr.strip():
        print(done.stderr.strip(), file=sys.stderr)
    shutil.copytree(built, out, dirs_exist_ok=True)
    return out / "index.html"


class _References(html.parser.HTMLParser):
    """What a page loads or links to: ``(tag, attribute, value)`` of every src and href."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found += [(tag, name, value) for name, value in attrs if name in ("src", "href") and value]


def references(page: str | Path) -> list[tuple[str, str, str]]:
    """Every ``(tag, attribute, url)`` of src and href in an HTML page."""
    parser = _References()
    parser.feed(Path(page).read_text())
    return parser.found


def pages(site: str | Path) -> list[Path]:
    """The built site's HTML pages (not the theme's templates under _static)."""
    return [page for page in sorted(Path(site).rglob("*.html")) if "_static" not in page.relative_to(site).parts]


def external_loads(site: str | Path) -> list[str]:
    """What any page of a built site would fetch from the internet: http(s) scripts, stylesheets, images,
    fonts and frames (links a reader may follow are not loads)."""
    loads = []
    for page in pages(site):
        for tag, attribute, url in references(page):
            fetched = tag in ("script", "img", "iframe", "source") or (tag == "link" and attribute == "href")
            if fetched and re.match(r"^(https?:)?//", url):
                loads.append(f"{page.name}: <{tag} {attribute}={url}>")
    for sheet in sorted(Path(site).rglob("*.css")):
        loads += [f"{sheet.name}: {url}" for url in re.findall(r"url\(\s*['\"]?((?:https?:)?//[^)'\"]+)",
                                                               sheet.read_text(errors="replace"))]
    return loads
