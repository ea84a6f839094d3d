"""Seconds to the first slider: for each notebook, the wall time of Run All in JupyterLab until its widget explorer
is drawn, at the notebook's own (interactive) defaults, in headless Chromium.

Each notebook gets a cold kernel (opened in a fresh page; its kernel is shut down afterwards) and the shipped
checkpoints. JupyterLab (:class:`cfkit.interactive.servers.LabServer`) serves a scratch copy of ``notebooks/`` under a temporary
folder, so the notebooks' ``../runs/<notebook>`` defaults land in that folder's ``runs/``, never in yours. The
notebooks run in the reproduction's order (method notebooks before ``10_metrics``), so ``10_metrics`` scores the
sets the method notebooks just saved there at their interactive size, as it would for a person who ran them first;
named alone, it finds none and says which notebooks to run (a fresh clone). ``12_faithfulness`` has no explorer.

The timer starts when Run > Run All Cells is clicked and stops when the explorer's figure (an image inside a
``.widget-vbox``) is drawn; the time from opening the page to an idle kernel is reported beside it. One screenshot a
notebook, of its explorer, goes to ``--shots``. With ``--write`` the "## Time to explorer" section of that file
(``results/benchmark.md``) is written or replaced, the other sections kept. Run by hand on an idle machine:

    .venv/bin/python benchmarks/time_to_explorer.py --write results/benchmark.md --shots runs/time_to_explorer
    .venv/bin/python benchmarks/time_to_explorer.py 06_ldce 11_ldce_error_analysis   # some notebooks only
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # throughput.py, the report's other sections

import throughput  # noqa: E402

from cfkit.common.threads import thread_limits  # noqa: E402
from cfkit.interactive.servers import LabServer, find_chromium  # noqa: E402
from cfkit.paths import NOTEBOOK_DIR, atomic_write_text  # noqa: E402
from cfkit.running.reproduce import machine, method_notebooks, reproduce_order  # noqa: E402
from cfkit.scoring.table import markdown  # noqa: E402

LIMIT_S = 30.0
"""What "seconds to the first slider" should stay under on 2 cores (issue 27)."""
KERNEL_TIMEOUT_MS = 180_000
RUN_TIMEOUT_MS = 600_000


def explorer_notebooks() -> list[str]:
    """The notebooks that end in a widget explorer, in the reproduction's order (12_faithfulness has none)."""
    return [nb for nb in reproduce_order() if nb != "12_faithfulness"]


def row(notebook: str, page_open_s: float | None, seconds: float | None, host: dict, error: str = "") -> dict:
    """One table row: seconds from Run All to the drawn explorer, whether within :data:`LIMIT_S`, the machine."""
    return {"notebook": notebook, "seconds_to_explorer": seconds, "within_30_s": "—" if seconds is None else
            ("yes" if seconds <= LIMIT_S else "no"), "page_open_to_idle_kernel_s": page_open_s,
            "machine": f"{host['cpu']}, {host['cores']} cores", "error": error}


def section(rows: list[dict], host: dict, measured_10: str, threads: int | None = None) -> list[str]:
    """The "## Time to explorer" section's lines (heading excluded); ``threads``: the kernels' torch threads (None:
    every core, as a person's kernel gets)."""
    errors = any(r["error"] for r in rows)
    columns = ["notebook", "seconds_to_explorer", "within_30_s", "page_open_to_idle_kernel_s", "machine",
               *(["error"] if errors else [])]
    return [f"Run All in JupyterLab until the widget explorer is drawn, each notebook at its own defaults (the small "
            f"interactive size; `make reproduce` passes the full protocol, `cfkit.running.reproduce.PROTOCOL`), a cold kernel, "
            f"the shipped checkpoints, headless Chromium; measured {time.strftime('%Y-%m-%d %H:%M')} on {host['cpu']}, "
            f"{host['cores']} cores, {host['memory_gib']} GiB, torch {host['torch']}, kernels on "
            f"{f'{threads} torch thread' + 's' * (threads > 1) if threads else 'every core'}, by "
            "`benchmarks/time_to_explorer.py`. `seconds_to_explorer` starts at the click on Run > Run All Cells; "
            "`page_open_to_idle_kernel_s` is opening the notebook until its new kernel is idle (not included). "
            f"{measured_10}", "", markdown([{k: f"{v:.1f}" if isinstance(v, float) else v for k, v in r.items()}
                                             for r in rows], columns)]


def note_on_metrics(notebooks: list[str]) -> str:
    """Which sets ``10_metrics`` scored in this run."""
    if "10_metrics" not in notebooks:
        return ""
    before = [nb for nb in notebooks[: notebooks.index("10_metrics")] if nb in method_notebooks()]
    if before:
        return (f"`10_metrics` scored the sets that {', '.join(before)} saved just before it in the same scratch "
                "folder (interactive size).")
    return "`10_metrics` ran on an empty runs folder (a fresh clone): it scores Original Data and names the rest."


class ThreadCappedLab(LabServer):
    """JupyterLab whose kernels start on ``threads`` torch/BLAS threads (None: every core)."""

    def __init__(self, root_dir: Path, home: Path, threads: int | None = None) -> None:
        super().__init__(root_dir, home)
        self.threads = threads

    def environment(self) -> dict[str, str]:
        return {**super().environment(), **(thread_limits(self.threads) if self.threads else {})}


def time_notebook(page, lab: LabServer, notebook: str, shots: Path) -> tuple[float, float]:
    """Open ``notebook``, wait for its kernel, Run All, wait for the explorer's figure; (page open s, run s)."""
    opened = time.perf_counter()
    # a workspace of its own, reset: JupyterLab would otherwise reopen the notebooks timed before, with kernels
    page.goto(f"{lab.url}/lab/workspaces/{notebook}/tree/notebooks/{notebook}.ipynb?token={lab.token}&reset")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=KERNEL_TIMEOUT_MS)
    page.get_by_text(re.compile(r"^Python 3.* \| Idle$")).first.wait_for(timeout=KERNEL_TIMEOUT_MS)
    idle = time.perf_counter()
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    clicked = time.perf_counter()
    explorer = page.locator(".widget-vbox").filter(has=page.locator(".jp-OutputArea-output img")).first
    explorer.locator(".jp-OutputArea-output img").first.wait_for(timeout=RUN_TIMEOUT_MS)
    drawn = time.perf_counter()
    explorer.scroll_into_view_if_needed()
    explorer.screenshot(path=shots / f"{notebook}.png")
    return round(idle - opened, 1), round(drawn - clicked, 1)


def measure(notebooks: list[str], shots: Path, browser_path: str, threads: int | None = None) -> list[dict]:
    """Every notebook timed in one JupyterLab on a scratch copy of the notebooks; a failure is a row with its error.
    ``threads`` caps the kernels' torch/BLAS threads (None: every core)."""
    from playwright.sync_api import sync_playwright

    host, rows = machine(), []
    shots.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="time_to_explorer_") as tmp:
        root = Path(tmp) / "lab"
        shutil.copytree(NOTEBOOK_DIR, root / "notebooks", ignore=shutil.ignore_patterns("expected", ".*"))
        with ThreadCappedLab(root, Path(tmp) / "jupyter", threads=threads) as lab, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
            try:
                for notebook in notebooks:
                    page = browser.new_page(viewport={"width": 1400, "height": 1000})
                    try:
                        page_open, seconds = time_notebook(page, lab, notebook, shots)
                        rows.append(row(notebook, page_open, seconds, host))
                    except Exception as error:  # noqa: BLE001  (the others still run; the row says what failed)
                        page.screenshot(path=shots / f"{notebook}_failed.png")
                        rows.append(row(notebook, None, None, host, str(error).splitlines()[0][:120]))
                    finally:
                        page.close()
                        for kernel in lab.api("/api/kernels") or []:  # cold kernel for the next notebook
                            lab.api(f"/api/kernels/{kernel['id']}", method="DELETE")
                    print(rows[-1], flush=True)
            finally:
                browser.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", help="notebooks to time (default: every one with an explorer)")
    parser.add_argument("--shots", default="runs/time_to_explorer", help="folder for one screenshot a notebook")
    parser.add_argument("--threads", type=int, default=None,
                        help="cap each kernel at this many torch threads (default: every core, as a person gets)")
    parser.add_argument("--write", default=None, help="write the Time to explorer section into this Markdown file "
                                                      "(e.g. results/benchmark.md), keeping its other sections")
    args = parser.parse_args()
    known = explorer_notebooks()
    unknown = [nb for nb in args.notebooks if nb not in known]
    if unknown:
        parser.error(f"no explorer to time in {', '.join(unknown)}; notebooks: {', '.join(known)}")
    notebooks = [nb for nb in known if nb in args.notebooks] if args.notebooks else known
    browser_path = find_chromium()
    if browser_path is None:
        parser.error("no Chromium (/usr/bin/chromium or chromium on PATH): apt-get install chromium")
    rows = measure(notebooks, Path(args.shots), browser_path, args.threads)
    lines = section(rows, machine(), note_on_metrics(notebooks), args.threads)
    print("\n".join([throughput.EXPLORER_HEADING, "", *lines]))
    if args.write:
        text = Path(args.write).read_text() if Path(args.write).is_file() else "# Benchmarks\n"
        atomic_write_text(args.write, throughput.replace_section(text, throughput.EXPLORER_HEADING, lines))
    if any(r["error"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
