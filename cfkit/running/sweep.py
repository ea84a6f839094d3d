"""Parameter sweeps: one notebook run over a grid of parameter values, gathered into a table and a plot.

``cfkit sweep 06_ldce -p guidance 1 2 3 5 --set n_queries 100 -j 2`` checks every grid point's
parameters against the notebook before anything starts (a wrong type or value fails at once, not after an
hour of runs), runs the points in parallel processes (a process a point, so one that dies loses only its own
point), or on an existing Dask cluster with ``--scheduler``, each into ``<out>/<name>=<value>,…/``, and gathers the runs' recorded numbers into
``<out>/sweep.csv`` (one row a run) and ``<out>/sweep.png`` (metric against the first swept
parameter). A failing run stays in the table with its error; the other runs still finish.
"""
from __future__ import annotations

import csv
import fnmatch
import hashlib
import io
import itertools
import math
import multiprocessing
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..common.threads import thread_limits, threads_per_job
from ..errors import ParameterError, SchedulerError, SweepError
from ..paths import NOTEBOOK_DIR, RUNS_DIR, atomic_write_bytes, atomic_write_text
from ..scoring import columns as table_columns
from ..scoring.table import _cell, markdown
from .parameter_values import check_values
from .run import (RECORD_FILE, check_parameters, literal_defaults, notebook_parameters, notebook_path,
                  parse_cli_parameters, read_record, run_notebook)

SWEEP_CSV = "sweep.csv"
SWEEP_PNG = "sweep.png"
RUN_COLUMNS = ("seconds", "error", "folder")
"""Columns after the recorded numbers: the run's wall time, its error ('' when it worked), its folder."""
MAX_PANELS = 4
DEFAULT_PLOT = re.compile(r"[^/]+/mean/(validity|im1)")
"""Plotted when the table keeps more than MAX_PANELS numbers: each method's mean validity and IM1."""
CONNECT_TIMEOUT_S = 10


@dataclass(frozen=True)
class Point:
    """One grid point: the swept values, everything the notebook gets, and the run's folder name."""

    swept: dict[str, Any]
    parameters: dict[str, Any]
    folder: str


@dataclass(frozen=True)
class SweepResult:
    """The gathered sweep: one row a run (swept values, recorded numbers, seconds, error, folder)."""

    rows: list[dict[str, Any]]
    swept: list[str]
    metrics: list[str]
    plotted: list[str]
    csv: Path
    plot: Path | None

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [row for row in self.rows if row["error"]]

    def summary(self) -> str:
        """A Markdown table of the swept values and plotted metrics, then where the files are."""
        rows = [{**row, "seconds": f"{row['seconds']:.0f}"} for row in self.rows]
        table = markdown(rows, self.swept + self.plotted + ["seconds"])
        files = f"table: {self.csv}" + (f"\nplot:  {self.plot}" if self.plot else "")
        return f"{table}\n\n{files}"

    def check(self) -> None:
        """Raise a SweepError naming every failed run, after the table with the others is written."""
        if not self.failed:
            return
        lines = "\n".join(f"  {row['folder']}: {row['error']}" for row in self.failed)
        raise SweepError(
            f"{len(self.failed)} of {len(self.rows)} runs failed:\n{lines}\nThe other runs' numbers are in "
            f"{self.csv}; each failed run's executed notebook, with the traceback, is in its folder there."
        )


def parse_sweep_args(
    swept: Sequence[Sequence[str]] | None, fixed: Sequence[Sequence[str]] | None = None,
) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """CLI words to values: ``[["guidance", "1", "2"]]``, ``[["n_queries", "50"]]`` ->
    ``({"guidance": [1, 2]}, {"n_queries": 50})``.

    Each value is parsed like ``cfkit run -p`` (a Python literal, else a string).
    """
    if not swept:
        raise SweepError("give at least one parameter to sweep, e.g. `-p guidance 1 2 3`; for a single run use "
                         "`cfkit run NOTEBOOK -p NAME VALUE`.")
    grid: dict[str, list[Any]] = {}
    for name, *values in swept:
        if name in grid:
            raise SweepError(f"parameter {name!r} is swept twice: give all its values after one `-p {name}`.")
        grid[name] = [parse_cli_parameters([(name, raw)])[name] for raw in values]
    return grid, parse_cli_parameters(fixed or [])


def build_grid(
    notebook: str | Path, swept: Mapping[str, Sequence[Any]], fixed: Mapping[str, Any] | None = None,
) -> list[Point]:
    """The cartesian product of the swept values (first parameter slowest), each point checked against the notebook.

    Every point's parameters go through :func:`check_point` (names, types and values) here, before any run starts.
    """
    fixed = dict(fixed or {})
    if not swept:
        raise SweepError("nothing to sweep: give at least one parameter with values, e.g. `-p guidance 1 2 3`.")
    if "out_dir" in swept or "out_dir" in fixed:
        raise SweepError("out_dir is set by the sweep (one folder a run); choose the sweep's folder with --out.")
    for name, values in swept.items():
        if not values:
            raise SweepError(f"no values given for parameter {name!r}: write them after its name, "
                             f"e.g. `-p {name} 1 2 3`.")
        if name in fixed:
            raise SweepError(f"parameter {name!r} is both swept (-p) and fixed (--set): keep one.")
    points = [Point(values, {**fixed, **values}, folder_name(values))
              for values in (dict(zip(swept, combination)) for combination in itertools.product(*swept.values()))]
    defaults = literal_defaults(notebook_parameters(notebook))
    for point in points:
        check_point(notebook, point, defaults)
    folders = [p.folder for p in points]
    if len(set(folders)) < len(folders):
        repeated = sorted({f for f in folders if folders.count(f) > 1})
        raise SweepError(f"grid points share a folder ({', '.join(repeated)}): a value is given twice; "
                         "give each value once.")
    return points


def check_point(notebook: str | Path, point: Point, defaults: Mapping[str, Any]) -> None:
    """Refuse a grid point whose parameters ``cfkit run`` would refuse: names and types
    (:func:`cfkit.running.run.check_parameters`), then values over the notebook's ``defaults``
    (:func:`cfkit.running.parameter_values.check_values`); one line naming the point."""
    try:
        check_parameters(notebook, point.parameters)
        check_values(notebook_path(notebook).stem, {**defaults, **point.parameters})
    except ParameterError as exc:
        message = " ".join(str(exc).split())
        raise ParameterError(f"grid point {point.folder}: {message} No run was started.") from None


def folder_name(values: Mapping[str, Any]) -> str:
    """``{"guidance": 2.5, "pairs": "4->9,3->8"}`` -> ``guidance=2.5,pairs=4to9+3to8``: safe on any filesystem.

    A value that still needs other characters replaced gets a short hash of itself, so names stay unique.
    """
    parts = []
    for name, value in values.items():
        text = value if isinstance(value, str) else repr(value)
        safe = text.replace("->", "to").replace(",", "+")
        cleaned = re.sub(r"[^A-Za-z0-9._+-]", "_", safe)
        if cleaned != safe or not cleaned:
            cleaned += "~" + hashlib.sha1(text.encode()).hexdigest()[:6]
        parts.append(f"{name}={cleaned}")
    return ",".join(parts)


def run_point(notebook: str, parameters: dict[str, Any], out_dir: str, threads: int | None = None) -> dict[str, Any]:
    """Run one grid point (in a worker process) and return its numbers or its error; never raises.

    Never raising is what keeps one bad point from cancelling the rest. ``threads`` caps the kernel's
    torch/BLAS threads (the kernel inherits this process's environment) so parallel runs do not
    oversubscribe the cores; None leaves the worker's environment as it is (Dask sets 1 thread).
    """
    if threads is not None:
        os.environ.update(thread_limits(threads))
    (Path(out_dir) / RECORD_FILE).unlink(missing_ok=True)  # a failed run must not report an earlier run's numbers
    start = time.perf_counter()
    try:
        run_notebook(notebook, parameters, out_dir)
        numbers, error = read_record(out_dir)["numbers"], ""
    except Exception as exc:  # noqa: BLE001 - every failure becomes the run's row
        numbers, error = {}, describe_error(exc)
    return {"numbers": numbers, "error": error, "seconds": time.perf_counter() - start}


def describe_error(exc: BaseException) -> str:
    """One line for the table: the notebook's own exception for a failed cell, else the exception itself."""
    if hasattr(exc, "ename") and hasattr(exc, "evalue"):  # papermill.PapermillExecutionError
        text = f"{exc.ename}: {exc.evalue}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


def run_sweep(
    notebook: str | Path, swept: Mapping[str, Sequence[Any]], fixed: Mapping[str, Any] | None = None,
    out: str | Path | None = None, jobs: int = 1, scheduler: str | None = None,
    metrics: Sequence[str] | None = None, progress: bool = True,
) -> SweepResult:
    """Run the grid (``jobs`` local processes, or the Dask cluster at ``scheduler``) and gather it.

    ``out`` defaults to ``runs/sweeps/<notebook>``; ``metrics`` are glob patterns over the recorded keys
    (e.g. ``ldce/mean/*``) that pick the table's columns, all of them when None. Failed runs are rows
    with an ``error``; call :meth:`SweepResult.check` to turn them into an exception.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise SweepError(f"-j/--jobs is the number of runs at once and must be an int >= 1, got {jobs!r}.")
    path = notebook_path(notebook)
    points = build_grid(path, swept, fixed)
    out = Path(out or RUNS_DIR / "sweeps" / path.stem).resolve()
    dirs = [str(out / p.folder) for p in points]
    if scheduler:  # by name where it is one of ours, so that workers resolve it in their own checkout
        ref = path.stem if path.parent == NOTEBOOK_DIR.resolve() else str(path)
        results = _run_on_cluster(ref, points, dirs, scheduler, progress)
    else:
        results = _run_locally(str(path), points, dirs, jobs, progress)
    return gather(points, results, out, metrics)


def _run_locally(notebook: str, points: list[Point], dirs: list[str], jobs: int, progress: bool,
                 run: Callable[..., dict] = run_point) -> list[dict]:
    """Each point in a process of its own, ``jobs`` at a time: a process that dies (killed, out of memory, a crash
    in native code) costs only its own point, recorded with how it died, and the other points still run.

    ``run`` is what the process calls with the point (:func:`run_point`; a module-level function, for spawn).
    """
    from concurrent.futures import ThreadPoolExecutor, as_completed

    threads = threads_per_job(min(jobs, len(points)))
    with ThreadPoolExecutor(max_workers=min(jobs, len(points)), thread_name_prefix="sweep") as pool:
        futures = [pool.submit(run_in_process, run, notebook, p.parameters, d, threads) for p, d in zip(points, dirs)]
        return _collect(futures, as_completed(futures), progress)


class WorkerDied(RuntimeError):
    """The process running a grid point ended without a result."""


def run_in_process(run: Callable[..., dict], *args: Any) -> dict:
    """``run(*args)`` in a fresh spawned process (no inherited threads or state); its result, or :class:`WorkerDied`
    naming the exit code or signal when the process ends without one."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_send_result, args=(sender, run, *args))
    process.start()
    sender.close()  # the child holds the only sending end: its death ends recv() with EOFError
    try:
        result = receiver.recv()
    except EOFError:
        result = None
    finally:
        receiver.close()
        process.join()
    if result is None:
        code = process.exitcode
        how = f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        raise WorkerDied(f"the run's process died ({how}) before reporting; the other runs went on. Out of memory "
                         "(the kernel's OOM killer sends SIGKILL) is the usual cause: try fewer -j.")
    return result


def _send_result(sender: Any, run: Callable[..., dict], *args: Any) -> None:
    """The child's side of :func:`run_in_process`."""
    sender.send(run(*args))
    sender.close()


def _run_on_cluster(notebook: str, points: list[Point], dirs: list[str], address: str, progress: bool,
                    run: Callable[..., dict] = run_point) -> list[dict]:
    """Submit every point to an existing Dask cluster; its workers need this repository and the out folder.

    A worker that dies mid-run is replaced by its nanny and Dask retries the point elsewhere; a point that kills
    every worker it lands on becomes ``KilledWorker``, that row's error, and the other points still run."""
    from distributed import Client, as_completed

    hint = (f"a Dask scheduler must be running there: start one with `dask scheduler` and workers with "
            f"`dask worker {address}` on machines that have this repository, or leave out --scheduler to run locally")
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise SchedulerError(f"cannot reach a Dask scheduler at {address!r} ({exc}); {hint}.") from exc
    with client:
        try:
            client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise SchedulerError(f"the Dask scheduler at {address!r} has no workers; {hint}.") from exc
        futures = client.map(run, [notebook] * len(points), [p.parameters for p in points], dirs, pure=False)
        return _collect(futures, as_completed(futures, loop=client.loop), progress)


def _collect(futures: list, finished: Iterable, progress: bool) -> list[dict]:
    """Results in grid order as runs finish, with a progress bar; a lost worker becomes that run's error."""
    from tqdm.auto import tqdm

    index = {future: i for i, future in enumerate(futures)}
    results: list[dict] = [{}] * len(futures)
    failures = 0
    bar = tqdm(finished, total=len(futures), desc="sweep", unit="run", disable=not progress, file=sys.stderr)
    for future in bar:
        try:
            result = future.result()
        except Exception as exc:  # noqa: BLE001 - the worker died or could not run the task
            result = {"numbers": {}, "error": f"worker failed: {describe_error(exc)}", "seconds": math.nan}
        results[index[future]] = result
        if result["error"]:
            failures += 1
            bar.set_postfix(failed=failures)
    return results


def gather(points: list[Point], results: list[dict], out: Path, metrics: Sequence[str] | None = None) -> SweepResult:
    """One row a run, written atomically to ``<out>/sweep.csv``, and the plot ``<out>/sweep.png``."""
    keys = list(dict.fromkeys(key for result in results for key in result["numbers"]))
    if metrics:
        unmatched = [p for p in metrics if not any(fnmatch.fnmatchcase(k, p) for k in keys)]
        if unmatched and keys:
            print(f"cfkit sweep: --metrics {' '.join(unmatched)} matched no recorded number; recorded are e.g. "
                  f"{', '.join(keys[:6])}", file=sys.stderr)
        keys = [k for k in keys if any(fnmatch.fnmatchcase(k, p) for p in metrics)]
    rows = [{**p.swept, **{k: r["numbers"].get(k) for k in keys}, "seconds": round(r["seconds"], 1),
             "error": r["error"], "folder": p.folder} for p, r in zip(points, results)]
    swept = list(points[0].swept)
    csv_path = atomic_write_text(out / SWEEP_CSV, to_csv(rows, swept + keys + list(RUN_COLUMNS), set(keys)))
    numeric = [k for k in keys if _is_numeric(rows, k)]
    preferred = [k for k in numeric if DEFAULT_PLOT.fullmatch(k)]
    plotted = numeric if len(numeric) <= MAX_PANELS else preferred or numeric[:MAX_PANELS]
    plot = plot_sweep(rows, swept, plotted, out / SWEEP_PNG) if plotted else None
    return SweepResult(rows, swept, keys, plotted, csv_path, plot)


def to_csv(rows: list[dict], columns: list[str], numbers: set[str]) -> str:
    """Recorded numbers formatted as in ``results/table.csv``; swept values and the rest as written."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c), 6) if c in numbers else ("" if row.get(c) is None else row[c])
                         for c in columns])
    return buffer.getvalue()


def _is_numeric(rows: list[dict], key: str) -> bool:
    values = [row[key] for row in rows if row.get(key) is not None]
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def plot_sweep(rows: list[dict], swept: list[str], metrics: list[str], path: Path) -> Path:
    """One panel a metric against the first swept parameter, one line a combination of the others (Agg, no GUI)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    x_name, others = swept[0], swept[1:]
    categorical = not all(isinstance(r[x_name], (int, float)) and not isinstance(r[x_name], bool) for r in rows)
    labels = list(dict.fromkeys(str(row[x_name]) for row in rows))
    lines: dict[str, list[dict]] = {}
    for row in rows:
        lines.setdefault(", ".join(f"{n}={row[n]}" for n in others), []).append(row)
    fig = Figure(figsize=(3.6 * len(metrics), 3.0), layout="constrained")
    FigureCanvasAgg(fig)
    for ax, metric in zip(fig.subplots(1, len(metrics), squeeze=False)[0], metrics):
        for label, members in lines.items():
            members = members if categorical else sorted(members, key=lambda r: r[x_name])
            xs = [labels.index(str(r[x_name])) if categorical else r[x_name] for r in members]
            ys = [math.nan if r.get(metric) is None else r[metric] for r in members]
            ax.plot(xs, ys, marker="o", label=label or None)
        if categorical:
            ax.set_xticks(range(len(labels)), labels)
        last = metric.rsplit("/", 1)[-1]
        ax.set_title(metric + (" (lower is better)" if last in table_columns.lower_is_better() else ""), fontsize=9)
        if last in table_columns.shares():  # on the full [0, 1] scale, so 0.98 does not look like a collapse
            ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel(x_name)
        ax.grid(alpha=0.3)
        if others:
            ax.legend(fontsize=7)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    return atomic_write_bytes(path, buffer.getvalue())
