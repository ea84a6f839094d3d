"""The rendered gallery in a real browser: every image of the index and of a notebook page loads, from files only.

Debian's Chromium driven by playwright opens the built pages through file:// (as a reader who double-clicks
index.html would); any request that is not a local file fails the test. Screenshots stay in the test's folder.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from browser_support import require_browser
from cfkit.interactive import gallery
from gallery_support import TINY, readme, results_copy, tiny_notebook


@pytest.fixture
def browser_path() -> str:
    return require_browser()


def test_the_gallery_in_chromium(browser_path: str, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    tiny_notebook(notebooks)
    index = gallery.build(notebooks, tmp_path / "html", results=results_copy(tmp_path / "results"),
                          readme=readme(tmp_path))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            outside, failed = [], []
            page.on("request", lambda r: None if r.url.startswith(("file://", "data:")) else outside.append(r.url))
            page.on("requestfailed", lambda r: failed.append(r.url))
            for target, least in ((index, 5), (index.parent / "notebooks" / f"{TINY}.html", 1)):
                page.goto(target.as_uri(), wait_until="load")
                images = page.evaluate("Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, "
                                       "i.naturalWidth, i.getBoundingClientRect().width])")
                page.screenshot(path=str(tmp_path / f"{target.stem}.png"), full_page=True)
                assert len(images) >= least, (target.name, images)
                assert all(complete and natural > 0 for _, complete, natural, _ in images), images
                assert all(0 < shown <= 1400 for *_, shown in images), "every figure fits the window"
                assert page.evaluate("document.documentElement.scrollWidth") <= 1400, "no sideways page scroll"
            assert not outside, f"the pages asked the internet for {outside}"
            assert not failed, failed
        finally:
            browser.close()
