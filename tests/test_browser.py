"""The JupyterLab experience in a real browser: 06_ldce runs and its explorer sliders redraw the counterfactual.

Debian's Chromium driven by playwright (``playwright install`` is not needed). JupyterLab serves a copy of
the notebook at its own defaults (the small interactive size a person gets; only ``out_dir`` points into the test's
folder) from the test's folder; the test runs all cells from the Run menu,
moves the target-class and guidance-scale sliders with the keyboard and checks that each move changes the
readout and redraws the figure with a different counterfactual (the pixels of its panel, not just the note).
Screenshots, the figures as drawn and the server's log (jupyter/lab.log) stay in the test's folder.
"""
from __future__ import annotations

import base64
import io
import re
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
from PIL import Image
from papermill.iorw import load_notebook_node, write_ipynb
from papermill.parameterize import parameterize_notebook

from browser_support import LabServer, require_browser
from cfkit.running.run import check_parameters, notebook_path

NOTEBOOK = "06_ldce"
# The notebook's own defaults, as a person opening it gets them (issue 27: the explorer within seconds); no sizes.
PARAMETERS = {"interactive": True}
RUN_TIMEOUT_MS = 480_000  # running every cell on a busy 2-core machine
REDRAW_TIMEOUT_S = 180  # one LDCE counterfactual plus a figure


def write_notebook_copy(folder: Path, out_dir: Path) -> Path:
    """A copy of the notebook with ``out_dir`` (and ``interactive``) injected after its parameters cell, as papermill
    does: its sizes stay the defaults."""
    parameters = {**PARAMETERS, "out_dir": str(out_dir)}
    check_parameters(NOTEBOOK, parameters)
    notebook = parameterize_notebook(load_notebook_node(str(notebook_path(NOTEBOOK))), parameters)
    path = folder / f"{NOTEBOOK}.ipynb"
    write_ipynb(notebook, str(path))
    return path


@pytest.fixture
def browser_path() -> str:
    return require_browser()


@pytest.fixture
def lab(tmp_path: Path):
    """JupyterLab on a folder inside the test's folder; its log stays there as jupyter/lab.log."""
    root = tmp_path / "lab"
    root.mkdir()
    with LabServer(root, tmp_path / "jupyter") as server:
        yield server


def slider(explorer, description: str):
    """The ipywidgets slider whose label reads ``description``."""
    return explorer.locator(".widget-slider").filter(
        has=explorer.page.locator(".widget-label", has_text=description)).first


def wait_for_new_image(image, before: str, timeout_s: float = REDRAW_TIMEOUT_S) -> str:
    """Poll the output image's ``src`` until it differs from ``before``; return the new one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if image.count():
            src = image.get_attribute("src") or ""
            if src and src != before:
                return src
        time.sleep(0.5)
    raise AssertionError(f"the counterfactual image did not change within {timeout_s:.0f} s")


class Moved(NamedTuple):
    readouts: tuple[str, str]  # the slider's value as displayed, before and after
    src: str  # the redrawn figure's data URI


def move(explorer, description: str, key: str, image, screenshot: Path) -> Moved:
    """Press ``key`` on a slider's handle (noUiSlider's keyboard step), wait for the redraw, screenshot it."""
    control = slider(explorer, description)
    readout = control.locator(".widget-readout")
    value, src = readout.inner_text(), image.get_attribute("src")
    control.locator(".noUi-handle").focus()
    explorer.page.keyboard.press(key)
    new_src = wait_for_new_image(image, src)
    explorer.screenshot(path=screenshot)
    return Moved((value, readout.inner_text()), new_src)


def run_and_move_sliders(page, lab: LabServer, shots: Path) -> tuple[str, Moved, Moved]:
    """Open the notebook, Run > Run All Cells, wait for the explorer's figure, then move the target slider
    9 -> 8 and the guidance slider 3 -> 3.5. The first figure's data URI and both moves."""
    page.goto(lab.lab_url(f"{NOTEBOOK}.ipynb"))
    # The notebook's own cells, then its kernel (the status bar), before anything runs: Run All Cells
    # without a kernel would ask for one in a dialog.
    page.locator(".jp-Notebook .jp-Cell", has_text="samples_per_class").first.wait_for(timeout=120_000)
    page.get_by_text(re.compile(r"^Python 3.* \| Idle$")).first.wait_for(timeout=120_000)
    page.screenshot(path=shots / "0_opened.png")

    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    explorer = page.locator(".widget-vbox").filter(has=page.locator(".widget-label", has_text="guidance")).first
    image = explorer.locator(".jp-OutputArea-output img").first
    image.wait_for(timeout=RUN_TIMEOUT_MS)
    explorer.scroll_into_view_if_needed()
    page.screenshot(path=shots / "1_ran.png")
    explorer.screenshot(path=shots / "2_explorer.png")
    first = image.get_attribute("src")
    target = move(explorer, "target", "ArrowLeft", image, shots / "3_target_moved.png")
    guidance = move(explorer, "guidance", "ArrowRight", image, shots / "4_guidance_moved.png")
    return first, target, guidance


def png(src: str) -> bytes:
    """The PNG inside an image's data URI."""
    return base64.b64decode(src.split(",", 1)[1])


def counterfactual_panel(src: str) -> np.ndarray:
    """The middle of the counterfactual's panel (the 2nd of ``plots.explain_one``'s five, widths 1:1:1:1.6:1.6)
    of the explorer's figure, from the image's data URI, in grey levels; clear of the titles and the note."""
    image = np.asarray(Image.open(io.BytesIO(png(src))).convert("L"), dtype=float)
    height, width = image.shape
    return image[int(0.40 * height) : int(0.80 * height), int(0.20 * width) : int(0.28 * width)]


def assert_counterfactual_changed(before: str, after: str, what: str) -> None:
    changed = (np.abs(counterfactual_panel(before) - counterfactual_panel(after)) > 8).mean()
    assert changed > 0.01, f"moving {what} redrew the figure but the counterfactual stayed ({changed:.1%} changed)"


def test_ldce_explorer_sliders_redraw_the_counterfactual(browser_path: str, lab: LabServer, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    write_notebook_copy(lab.root_dir, tmp_path / "out")
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            first, target, guidance = run_and_move_sliders(page, lab, shots)
        except BaseException:
            page.screenshot(path=shots / "failed.png")
            print(f"failed at {shots / 'failed.png'}; JupyterLab log ({lab.log_path}):\n{lab.log()[-6000:]}")
            raise
        finally:
            browser.close()
    for name, src in (("first", first), ("target_moved", target.src), ("guidance_moved", guidance.src)):
        (shots / f"figure_{name}.png").write_bytes(png(src))  # the explorer's figure as the kernel drew it
    print("screenshots:", *sorted(str(path) for path in shots.glob("*.png")), sep="\n  ")
    assert target.readouts == ("9", "8"), f"the target readout went {target.readouts}"
    assert guidance.readouts == ("3.00", "3.50"), f"the guidance readout went {guidance.readouts}"
    assert_counterfactual_changed(first, target.src, "the target class")
    assert_counterfactual_changed(target.src, guidance.src, "the guidance scale")
