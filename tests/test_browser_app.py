"""The explorer app (``make app``) in a real browser: Voilà serves app/explorer.ipynb, a digit is drawn with the mouse,
a target picked, Explain pressed, and every enabled method's panel shows its counterfactual and validity: first 4→8
(the per-pair methods greyed out: no model for that pair), then 4→9 (every method).

Debian's Chromium driven by playwright, on a free port of 127.0.0.1; every request that leaves 127.0.0.1 is refused
and recorded (the app works offline). The page must show no code and no traceback. Screenshots stay in the test's
folder, and go to ``$CFKIT_SCREENSHOT_DIR`` too when it is set (``results/app.png``).
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from browser_support import VoilaServer, require_browser
from cfkit.interactive.app import NOTEBOOK, explained_entries

PER_PAIR = [entry.name for entry in explained_entries() if entry.per_pair]

LOAD_TIMEOUT_MS = 180_000  # Voilà starts a kernel and runs the page's cell (the models load) on a busy machine
EXPLAIN_TIMEOUT_MS = 240_000  # six methods on one query, first calls included, on 2 busy cores
# A "4"-like digit in canvas pixels (224×224): a down stroke, a bar, a long down stroke.
STROKES = [[(70, 40), (62, 90), (58, 120), (120, 118), (165, 115)], [(140, 45), (138, 110), (136, 190)]]


@pytest.fixture
def browser_path() -> str:
    return require_browser()


@pytest.fixture
def voila(tmp_path: Path):
    with VoilaServer(NOTEBOOK, tmp_path / "jupyter") as server:
        yield server


def draw(page, canvas, strokes) -> None:
    """Each stroke as mouse down, moves, up, in canvas pixels from the canvas's top left corner."""
    box = canvas.bounding_box()
    for stroke in strokes:
        (x, y), rest = stroke[0], stroke[1:]
        page.mouse.move(box["x"] + x, box["y"] + y)
        page.mouse.down()
        for x, y in rest:
            page.mouse.move(box["x"] + x, box["y"] + y, steps=6)
        page.mouse.up()


def explain_a_drawing(page, voila: VoilaServer, shots: Path) -> int:
    """Open the app, draw, pick a target, explain; return the predicted class of the drawing."""
    page.goto(voila.page_url(), timeout=LOAD_TIMEOUT_MS)
    page.wait_for_selector("img.cfkit-query", timeout=LOAD_TIMEOUT_MS)
    page.screenshot(path=shots / "0_opened.png", full_page=True)
    page.locator(".widget-toggle-button", has_text="draw").click()
    canvas = page.locator("canvas.cfkit-canvas").last
    canvas.wait_for(timeout=30_000)
    page.locator(".cfkit-explain").click()  # a blank drawing: a message, not a traceback
    page.wait_for_selector(".cfkit-error", timeout=30_000)
    assert "blank" in page.locator(".cfkit-error").inner_text()
    draw(page, canvas, STROKES)
    page.wait_for_function("document.querySelector('.cfkit-query') && /your drawing/.test(document.body.innerText)",
                           timeout=60_000)
    predicted = int(page.locator(".cfkit-query-class").inner_text())
    assert predicted == 4, "the strokes draw a 4 (rasterised and preprocessed on the server, deterministically)"
    assert page.locator(".cfkit-target-4").is_disabled(), "the predicted class must not be a target"
    page.screenshot(path=shots / "1_drawn.png", full_page=True)
    explain(page, 8)  # no per-pair model for 4→8: C3LT and ExpGAN greyed out
    return predicted


def explain(page, target: int) -> None:
    """Pick ``target``, press Explain, wait until every panel is in."""
    page.locator(f".cfkit-target-{target}").click()
    page.locator(".cfkit-explain").click()
    page.wait_for_function(f"(document.querySelector('.cfkit-done') || {{}}).innerText?.includes('→{target}')",
                           timeout=EXPLAIN_TIMEOUT_MS)
    time.sleep(1)  # the last images decode


def check_panels(page, greyed_expected: int) -> None:
    """Every enabled method's counterfactual drawn and its validity shown; the greyed-out ones say how to train."""
    enabled, greyed = page.locator(".cfkit-panel"), page.locator(".cfkit-panel-disabled")
    assert enabled.count() + greyed.count() == len(explained_entries())
    assert greyed.count() == greyed_expected
    for i in range(enabled.count()):
        panel = enabled.nth(i)
        drawn = panel.locator("img.cfkit-cf").evaluate("img => img.complete && img.naturalWidth > 0")
        assert drawn, f"panel {i}: the counterfactual image was not drawn"
        assert panel.locator(".cfkit-validity").inner_text().strip() in ("valid ✓", "not valid ✗")
    for i in range(greyed.count()):
        assert "cfkit train" in greyed.nth(i).locator(".cfkit-reason").inner_text()


def test_draw_a_digit_and_explain_it(browser_path: str, voila: VoilaServer, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    shots = tmp_path / "screenshots"
    shots.mkdir()
    outside: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1720, "height": 1100})  # six panels in a row

        def local_only(route) -> None:
            if route.request.url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:")):
                route.continue_()
            else:
                outside.append(route.request.url)
                route.abort()

        page.route("**/*", local_only)
        try:
            explain_a_drawing(page, voila, shots)
            page.screenshot(path=shots / "2_explained_4_to_8.png", full_page=True)
            check_panels(page, greyed_expected=len(PER_PAIR))
            explain(page, 9)  # a trained pair: every method
            page.screenshot(path=shots / "3_explained_4_to_9.png", full_page=True)
            check_panels(page, greyed_expected=0)
            text = page.locator("body").inner_text()
            assert "Traceback" not in text and "ExplorerApp.from_environment" not in text, "code or a traceback shows"
        except Exception:
            page.screenshot(path=shots / "failed.png", full_page=True)
            print(voila.log()[-5000:])
            raise
        finally:
            browser.close()
            if os.environ.get("CFKIT_SCREENSHOT_DIR"):
                folder = Path(os.environ["CFKIT_SCREENSHOT_DIR"])
                folder.mkdir(parents=True, exist_ok=True)
                for shot in shots.glob("*.png"):
                    shutil.copy(shot, folder / f"app_{shot.name}")
    assert not outside, f"the app asked for addresses outside 127.0.0.1: {outside[:5]}"
    print("screenshots:", *sorted(str(path) for path in shots.glob("*.png")), sep="\n  ")
