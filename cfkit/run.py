"""Notebook runs with papermill, recorded numbers, and the whole reproduction.

``run_notebook("10_metrics", {"n_queries": 40})`` checks the parameters against the notebook's
``parameters`` cell (names and types) before any kernel starts, then executes it headless into
``runs/<notebook>/``. Notebooks write their numbers with :func:`record` (atomic JSON).
"""
from __future__ import annotations

import ast
import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import MissingResultsError, NotebookFailedError, ParameterError
from .paths import NOTEBOOK_DIR, RESULTS_DIR, RUNS_DIR, atomic_write_json
from .table import NOTEBOOKS as METHOD_NOTEBOOKS

RECORD_FILE = "metrics.json"
TIMING = ("seconds_per_cf",)
"""Recorded columns that measure the machine, not the method: never held to expected values."""


def reproducible(numbers: dict[str, float]) -> dict[str, float]:
    """The recorded numbers without wall-clock timings."""
    return {k: v for k, v in numbers.items() if k.rsplit("/", 1)[-1] not in TIMING}


REPRODUCE_ORDER = ("00_models", "01_adversarial", "02_cem", "03_cve", "04_expgan", "05_c3lt", "06_ldce", "10_metrics",
                   "11_ldce_error_analysis")
"""Notebooks ``make reproduce`` runs, in order: method notebooks before ``10_metrics``, which scores their sets."""
REPRODUCE_NEEDS = {"10_metrics": tuple(nb for nb in METHOD_NOTEBOOKS.values() if nb != "10_metrics")}
"""What a notebook reads from others' output folders: with ``--jobs`` it waits for those to finish."""

_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,), "float": (float, int), "str": (str,), "bool": (bool,), "list": (list,), "dict": (dict,),
}


def notebook_path(name: str | Path) -> Path:
    """Resolve '10_metrics', '10_metrics.ipynb' or a path to an existing notebook."""
    path = Path(name)
    candidates = [path, NOTEBOOK_DIR / path, NOTEBOOK_DIR / f"{path}.ipynb"]
    for candidate in candidates:
        if candidate.suffix == ".ipynb" and candidate.is_file():
            return candidate.resolve()
    known = ", ".join(sorted(p.stem for p in NOTEBOOK_DIR.glob("*.ipynb")))
    raise ParameterError(f"no notebook {str(name)!r}; known notebooks: {known}.")


def notebook_parameters(name: str | Path) -> dict[str, dict[str, Any]]:
    """The parameters cell of a notebook as papermill infers it: name -> {default, inferred_type_name, help}."""
    import papermill

    return papermill.inspect_notebook(str(notebook_path(name)))


def check_parameters(name: str | Path, values: dict[str, Any]) -> dict[str, Any]:
    """Refuse unknown names and values whose type differs from the default's (an int is a fine float)."""
    spec = notebook_parameters(name)
    for key, value in values.items():
        if key not in spec:
            raise ParameterError(
                f"{Path(str(name)).stem} has no parameter {key!r}; its parameters are {', '.join(spec)}."
            )
        expected = _expected_type(spec[key])
        allowed = _TYPES.get(expected)
        if allowed is None:  # None default or an expression papermill cannot type: accept anything
            continue
        ok = isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)
        if not ok:
            raise ParameterError(
                f"parameter {key!r} of {Path(str(name)).stem} expects {expected} (default "
                f"{spec[key]['default']}), got {type(value).__name__} {value!r}."
            )
    return values


def _expected_type(entry: dict[str, Any]) -> str:
    """The annotated type of a parameter, else the type of its default literal ('None' if neither)."""
    if entry["inferred_type_name"] not in ("None", None):
        return entry["inferred_type_name"]
    try:
        return type(ast.literal_eval(entry["default"])).__name__
    except (ValueError, SyntaxError):
        return "None"


def parse_cli_parameters(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """``-p n_queries 40 -p pairs '4->9'`` -> {"n_queries": 40, "pairs": "4->9"}: literals, else strings."""
    values = {}
    for key, raw in pairs:
        try:
            values[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            values[key] = raw
    return values


def run_notebook(
    name: str | Path, parameters: dict[str, Any] | None = None, out_dir: str | Path | None = None,
    progress: bool = False,
) -> Path:
    """Execute a notebook headless; it writes its outputs (and recorded numbers) to ``out_dir``.

    ``out_dir`` defaults to ``runs/<notebook>``; ``interactive`` is always False. Returns the executed
    notebook's path.
    """
    import papermill

    path = notebook_path(name)
    parameters = dict(parameters or {})
    out_dir = Path(out_dir or RUNS_DIR / path.stem).resolve()
    spec = notebook_parameters(path)
    if "out_dir" in spec:
        parameters.setdefault("out_dir", str(out_dir))
    if "interactive" in spec:
        parameters.setdefault("interactive", False)
    check_parameters(path, parameters)
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / path.name
    papermill.execute_notebook(
        str(path), str(output), parameters=parameters, cwd=str(path.parent), kernel_name="python3",
        progress_bar=progress, log_output=False,
    )
    return output


def record(out_dir: str | Path, numbers: dict[str, float], **extra: Any) -> Path:
    """Write a notebook's recorded numbers (flat name -> value) and any extras to ``<out_dir>/metrics.json``.

    Written atomically; the tests compare ``numbers`` with ``notebooks/expected/<notebook>.json``.
    """
    return atomic_write_json(Path(out_dir) / RECORD_FILE, {"numbers": numbers, **extra})


def read_record(out_dir: str | Path) -> dict[str, Any]:
    """A notebook's recorded numbers; a clear error when the notebook has not been run there."""
    path = Path(out_dir) / RECORD_FILE
    if not path.is_file():
        raise MissingResultsError(
            f"no recorded numbers at {path}: run the notebook first (`cfkit run {Path(out_dir).name}`)."
        )
    return json.loads(path.read_text())


def flatten_rows(rows: list[dict], key: str = "method", prefix: str = "") -> dict[str, float]:
    """{'original_data/4->9/im1': 0.9, …}: table rows as flat keys, for comparing with expected values.

    ``key`` names the row (``method``, or ``setting`` for an ablation); ``prefix`` goes in front of every key.
    """
    flat = {}
    for row in rows:
        for column, value in row.items():
            if column not in (key, "pair") and value is not None:
                flat[f"{prefix}{row[key]}/{row['pair']}/{column}"] = value
    return flat


def write_expected(
    name: str, parameters: dict[str, Any], rel: float = 1e-3, abs_tol: float = 1e-6,
    directory: str | Path | None = None,
) -> Path:
    """Run a notebook at its CI parameters and commit-ready store its numbers as the expected values.

    Use after a deliberate change (a retrained model, a new metric); the tests then hold the numbers to
    ``pytest.approx(rel, abs)``.
    """
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        run_parameters = dict(parameters)
        if "runs_dir" in notebook_parameters(name):
            run_parameters["runs_dir"] = tmp
        run_notebook(name, run_parameters, out_dir=Path(tmp) / Path(name).stem)
        numbers = reproducible(read_record(Path(tmp) / Path(name).stem)["numbers"])
    expected = {"parameters": parameters, "tolerance": {"rel": rel, "abs": abs_tol}, "values": numbers}
    return atomic_write_json(Path(directory or NOTEBOOK_DIR / "expected") / f"{Path(name).stem}.json", expected)


def collect_table(runs_dir: str | Path | None = None, write: bool = True, results_dir: str | Path | None = None) -> str:
    """The table from the metrics notebook's recorded rows; unless ``write`` is False, written to results/ as
    table.csv, table.md and table.png, with counterfactuals.png: the same queries explained by every method."""
    from .table import LABELS, to_markdown, write_table

    runs_dir = Path(runs_dir or RUNS_DIR)
    record = read_record(runs_dir / "10_metrics")
    rows, note = record["rows"], record.get("inception_note")
    if write:
        from . import plots
        from .evaluation import gallery

        results_dir = Path(results_dir or RESULTS_DIR)
        write_table(rows, results_dir, note)
        if "comparisons" in record:
            write_comparisons(record["comparisons"], results_dir)
        queries, counterfactuals, titles = gallery(runs_dir)
        labelled = {LABELS.get(method, method): images for method, images in counterfactuals.items()}
        plots.save_figure(plots.method_gallery(queries, labelled, titles), results_dir / "counterfactuals.png")
    return to_markdown(rows, note)


COMPARISON_COLUMNS = ("metric", "pair", "a", "b", "difference", "lo", "hi", "p_value", "significant")


def write_comparisons(comparisons: list[dict], results_dir: str | Path) -> Path:
    """``results/comparisons.csv``: every two methods' paired-bootstrap difference in IM1 and FID, per pair and
    on the mean (A − B, its 95 % interval, p-value, whether the interval excludes zero)."""
    import csv
    import io

    from .paths import atomic_write_text

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, COMPARISON_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(comparisons)
    return atomic_write_text(Path(results_dir) / "comparisons.csv", buffer.getvalue())


REPRODUCE_RECORD = "reproduce.json"
"""In results/: the wall time of each notebook of the last ``cfkit reproduce`` and the machine it ran on."""


def cores() -> int:
    """The CPU cores this process may use."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def machine() -> dict[str, Any]:
    """What a timing was measured on: CPU model, cores, memory, torch and its threads, any GPU."""
    import os
    import platform

    import torch

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory_gib = None
    return {"cpu": cpu, "cores": cores(), "memory_gib": memory_gib and round(memory_gib, 1),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "python": platform.python_version()}


class _SetWatcher:
    """Prints each counterfactual set as a running notebook saves it: which notebook, which pair, time so far."""

    def __init__(self, out_dir: Path, notebook: str, start: float, log: Any) -> None:
        import threading

        self.out_dir, self.notebook, self.start, self.log = out_dir, notebook, start, log
        self.seen = self._sets()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _sets(self) -> dict[str, float]:
        return {p.name: p.stat().st_mtime for p in self.out_dir.glob("cfs_*.pt")}

    def _watch(self) -> None:
        while not self.stop.wait(1.0):
            self._report()

    def _report(self) -> None:
        now = self._sets()
        for name, mtime in sorted(now.items(), key=lambda item: item[1]):
            if self.seen.get(name) != mtime:
                method, pair = name[len("cfs_"):-len(".pt")].rsplit("_", 1)
                print(f"[{time.perf_counter() - self.start:5.0f} s]   {self.notebook}: {method} "
                      f"{pair.replace('to', '->')} saved", file=self.log, flush=True)
        self.seen = now

    def __enter__(self) -> _SetWatcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self._report()


LONGEST = ("02_cem", "06_ldce")
"""The notebooks that take longest at full size (about 9 minutes each on 2 cores): started first."""


def _launch_order(notebooks: list[str], results_dir: Path) -> list[str]:
    """Longest first by the last recorded reproduce (so the parallel run ends together), else :data:`LONGEST`
    first."""
    try:
        last = json.loads((results_dir / REPRODUCE_RECORD).read_text())["notebooks"]
    except (OSError, ValueError, KeyError):
        return sorted(notebooks, key=lambda name: name not in LONGEST)
    return sorted(notebooks, key=lambda name: -last.get(name, 0.0))


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""What caps a kernel's torch/BLAS threads: kernels inherit their launcher's environment."""


def threads_per_job(jobs: int) -> int:
    """Threads for each of ``jobs`` runs at once, so that together they use this machine's cores once."""
    return max(1, cores() // max(1, jobs))


def thread_limits(threads: int) -> dict[str, str]:
    return {var: str(threads) for var in THREAD_VARS}


def _run_in_subprocess(notebook: str, parameters: dict[str, Any], out_dir: Path, threads: int) -> None:
    """``cfkit run`` in a child process whose kernel uses ``threads`` torch threads; its output goes to run.log."""
    import os
    import subprocess

    command = [sys.executable, "-m", "cfkit.cli", "run", notebook, "--out", str(out_dir)]
    for key, value in parameters.items():
        command += ["-p", key, repr(value)]
    env = {**os.environ, **thread_limits(threads)}
    with open(out_dir / "run.log", "w") as log:
        code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    if code != 0:
        raise NotebookFailedError(f"{notebook} failed (exit {code}); its output is in {out_dir / 'run.log'}.")


def reproduce(
    runs_dir: str | Path | None = None, results_dir: str | Path | None = None,
    notebooks: Iterable[str] = REPRODUCE_ORDER, parameters: dict[str, dict[str, Any]] | None = None,
    log: Any = None, jobs: int = 1,
) -> str:
    """Get MNIST, check the zoo loads, run the notebooks (at full size unless ``parameters`` gives a
    notebook other values), write the table, its figures and the timings; return the table.

    ``jobs`` > 1 runs that many notebooks at once, a notebook starting once those it reads
    (:data:`REPRODUCE_NEEDS`) are done, each kernel on cores // (notebooks running with it) torch threads
    (so the last one, ``10_metrics``, gets every core). Progress goes to ``log`` (stderr):
    each notebook as it starts and ends, each pair's set as it is saved.
    """
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    from .data import ensure_mnist
    from .paths import atomic_write_json
    from .zoo.checkpoints import load, names

    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ParameterError(f"jobs must be an int >= 1 (notebooks run at once), got {jobs!r}.")
    log = log or sys.stderr
    runs_dir, results_dir = Path(runs_dir or RUNS_DIR), Path(results_dir or RESULTS_DIR)
    notebooks, parameters = list(notebooks), parameters or {}
    threads: dict[str, int] = {}
    start = time.perf_counter()

    def say(message: str) -> None:
        print(f"[{time.perf_counter() - start:5.0f} s] {message}", file=log, flush=True)

    ensure_mnist()
    for model in names():
        load(model)
    say(f"MNIST and {len(names())} zoo checkpoints verified; {len(notebooks)} notebooks, {jobs} at a time")
    if any(parameters.get(nb, {}).get("inception", True) for nb in notebooks):
        from .zoo.inception import inception_extractor

        extractor, reason = inception_extractor()  # fetched once here, not by two notebooks at once
        if extractor is None:
            say(f"no Inception-space FID/KID: {reason}")
        else:  # the reference features every method notebook needs, on all cores, before they start
            from .data import PAIRS
            from .zoo.inception import reference_features

            for target in dict.fromkeys(t for _, t in PAIRS):
                reference_features(extractor, target)
            say("Inception extractor verified and its reference features cached")
    seconds: dict[str, float] = {}
    counter = iter(range(1, len(notebooks) + 1))

    def run_one(notebook: str) -> None:
        on = f" on {threads[notebook]} torch thread{'s' * (threads[notebook] > 1)}" if jobs > 1 else ""
        say(f"running {notebook} ({next(counter)}/{len(notebooks)}){on} ...")
        began = time.perf_counter()
        out_dir = runs_dir / notebook
        out_dir.mkdir(parents=True, exist_ok=True)
        with _SetWatcher(out_dir, notebook, start, log):
            if jobs == 1:
                run_notebook(notebook, parameters.get(notebook), out_dir=out_dir)
            else:
                _run_in_subprocess(notebook, parameters.get(notebook, {}), out_dir, threads[notebook])
        seconds[notebook] = round(time.perf_counter() - began, 1)
        say(f"{notebook} done in {seconds[notebook]:.0f} s")

    pending = list(_launch_order(notebooks, results_dir) if jobs > 1 else notebooks)
    with ThreadPoolExecutor(jobs) as pool:
        running: dict = {}
        while pending or running:
            ready = [nb for nb in pending
                     if not any(need in notebooks and need not in seconds for need in REPRODUCE_NEEDS.get(nb, ()))]
            launch = ready[: jobs - len(running)]
            sharing = len(running) + len(launch)
            for notebook in launch:
                pending.remove(notebook)
                threads[notebook] = threads_per_job(sharing)
                running[pool.submit(run_one, notebook)] = notebook
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                running.pop(future)
                if future.exception() is not None:
                    pending.clear()  # start nothing new; let the others finish, then report
                    wait(running)
                    raise future.exception()
    table = collect_table(runs_dir, results_dir=results_dir)
    total = round(time.perf_counter() - start, 1)
    atomic_write_json(results_dir / REPRODUCE_RECORD, {
        "seconds": total, "notebooks": seconds, "full_size": not parameters, "jobs": jobs,
        "torch_threads": threads if jobs > 1 else None, "machine": machine(),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    })
    say(f"table, figures and {REPRODUCE_RECORD} written to {results_dir}")
    return table
