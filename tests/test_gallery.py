"""The rendered gallery (`make docs`): built from executed notebooks without running them, offline, whole.

The site is built once from a tiny run: 12_faithfulness executed by papermill (its recorded study, seconds) and a
three-cell notebook with a figure, beside a copy of results/'s figures and a README with a table section.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from cfkit.errors import InputError
from cfkit.interactive import gallery
from cfkit.running.cli import main
from cfkit.running.run import run_notebook
from gallery_support import TINY, readme, results_copy, tiny_notebook


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gallery")
    notebooks = root / "notebooks"
    notebooks.mkdir()
    executed = run_notebook("12_faithfulness", {}, out_dir=root / "runs" / "12_faithfulness")
    shutil.copy2(executed, notebooks / executed.name)
    tiny_notebook(notebooks)
    index = gallery.build(notebooks, root / "site" / "html", results=results_copy(root / "results"),
                          readme=readme(root))
    assert index == root / "site" / "html" / "index.html"
    return index.parent


def _local(site: Path, page: Path, url: str) -> Path | None:
    """The file a relative src/href of ``page`` points at; None for anchors, internet and mail links."""
    parsed = urlparse(url)
    if parsed.scheme or parsed.netloc or not parsed.path:
        return None
    return (page.parent / unquote(parsed.path)).resolve()


def test_the_pages(site: Path) -> None:
    index = (site / "index.html").read_text()
    for page in ("notebooks/12_faithfulness.html", f"notebooks/{TINY}.html", "benchmark.html"):
        assert (site / page).is_file(), page
        assert page in index, f"the index links {page}"
    assert "<table" in index and "Original Data" in index, "the README's table section"
    assert "Not in the gallery" not in index, "only that section"
    for figure in ("table.png", "counterfactuals.png", "faithfulness.png", "im_calibration.png", "app.png"):
        assert f'src="_images/{figure}"' in index, figure
    tiny = (site / "notebooks" / f"{TINY}.html").read_text()
    assert "tiny notebook ran" in tiny, "the printed output"
    assert re.search(r"<td[^>]*>(<p>)?0\.5(</p>)?</td>", tiny), "a Markdown output rendered as a table"
    assert re.search(r'<img[^>]+src="\.\./_images/[0-9a-f]+\.png"', tiny), "the notebook's figure"
    faithfulness = (site / "notebooks" / "12_faithfulness.html").read_text()
    assert "<table" in faithfulness and "Faithfulness" in faithfulness


def test_every_reference_resolves_and_nothing_comes_from_the_internet(site: Path) -> None:
    pages = gallery.pages(site)
    assert len(pages) >= 4
    broken = []
    for page in pages:
        for tag, attribute, url in gallery.references(page):
            target = _local(site, page, url)
            if target is not None and not target.exists():
                broken.append(f"{page.relative_to(site)}: <{tag} {attribute}={url}>")
    assert not broken, broken
    assert gallery.external_loads(site) == []
    scripts = [url for page in pages for tag, _, url in gallery.references(page) if tag == "script"]
    assert scripts and not [url for url in scripts if re.match(r"^(https?:)?//", url)]
    assert not any("mathjax" in url.lower() or "require" in url.lower() for url in scripts)


def test_no_executed_notebooks_says_to_reproduce_first(tmp_path: Path, capsys) -> None:
    with pytest.raises(InputError, match=r"run `make reproduce` first"):
        gallery.build(tmp_path / "missing", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"no executed notebooks in .*empty"):
        gallery.build(tmp_path / "empty", tmp_path / "out")
    assert main(["docs", "--notebooks", str(tmp_path / "missing"), "--out", str(tmp_path / "out")]) == 2
    assert "make reproduce" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_table_section_falls_back_to_table_md(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# no table here\n")
    (tmp_path / "table.md").write_text("| method | im1 |\n|---|---|\n| cem | 1.2 |\n")
    section = gallery.table_section(tmp_path / "README.md", tmp_path)
    assert section.startswith(gallery.TABLE_HEADING) and "| cem | 1.2 |" in section


def test_a_foreign_output_folder_is_left_alone(tmp_path: Path) -> None:
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "00_x.ipynb").write_text("{}")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "precious.txt").write_text("keep")
    with pytest.raises(InputError, match="not a Sphinx build"):
        gallery.build(notebooks, out, results=tmp_path, readme=tmp_path / "README.md")
    assert (out / "precious.txt").read_text() == "keep"
